// Which XRT C++ API the backend is compiled against, and the XRT headers its
// device, buffers and runs use. Private to src/backends/xrt; one place, so
// every file of the backend takes the same branch (docs/DESIGN.md, "Backends").
//
// API selection is by header detection, not by version strings:
//  - XRT 2.13 (Debian 12): xrt::device::load_xclbin + xrt::kernel(device,
//    uuid, name). One program per device at a time.
//  - current XRT (xrt_hw_context.h present): xrt::device::register_xclbin +
//    xrt::hw_context + xrt::kernel(hw_context, name). Debian's XRT lacks it:
//    CI compiles this branch only with -fsyntax-only against declarations of
//    the current API (tests/xrt_current_api, CTest xrt.current_api_syntax);
//    it has never run here.
// XRTIO_XRT_NO_HW_CONTEXT forces the 2.13 branch.
#pragma once

#include <xrt/xrt_bo.h>
#include <xrt/xrt_device.h>
#include <xrt/xrt_kernel.h>
#include <xrt/xrt_uuid.h>

#if !defined(XRTIO_XRT_NO_HW_CONTEXT)
#if __has_include(<xrt/xrt_hw_context.h>)
#include <xrt/xrt_hw_context.h>
#define XRTIO_XRT_HW_CONTEXT 1
#elif __has_include(<experimental/xrt_hw_context.h>)
#include <experimental/xrt_hw_context.h>
#define XRTIO_XRT_HW_CONTEXT 1
#endif
#endif
#ifndef XRTIO_XRT_HW_CONTEXT
#define XRTIO_XRT_HW_CONTEXT 0
#endif
// Set by the syntax check against current XRT's API (CTest
// xrt.current_api_syntax): it must not pass by compiling the 2.13 branch.
#if defined(XRTIO_EXPECT_HW_CONTEXT) && !XRTIO_XRT_HW_CONTEXT
#error "XRTIO_EXPECT_HW_CONTEXT: xrt_hw_context.h was not found, the hw_context branch is not being compiled"
#endif

// XRT before 2.15 can hang at exit when a device's command monitor started
// just before (monitor_settle.hpp). The version comes from XRT's own header:
// xrt/detail/version-slim.h in current XRT (2.17 on), version.h at the top
// of XRT's include directory before (Debian's 2.13 puts that directory at
// /usr/include/xrt, so it is also <xrt/version.h> there). Where none says,
// the backend assumes an affected XRT: the cost of assuming so is a few
// /proc readings when a context first opens a kernel.
#if __has_include(<xrt/detail/version-slim.h>)
#include <xrt/detail/version-slim.h>
#elif __has_include(<xrt/version.h>)
#include <xrt/version.h>
#elif __has_include(<version.h>)
#include <version.h>
#endif
#if defined(XRT_VERSION_CODE) && defined(XRT_VERSION) && XRT_VERSION_CODE >= XRT_VERSION(2, 15)
#define XRTIO_XRT_EXIT_MAY_LOSE_MONITOR 0
#else
#define XRTIO_XRT_EXIT_MAY_LOSE_MONITOR 1
#endif
