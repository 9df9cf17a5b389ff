// XRT's own device object behind an xrtio context, for code that calls XRT
// directly beside xrtio. Kept apart from xrt.hpp because it includes XRT's
// headers: link XRT::xrt_coreutil (or add -I/usr/include/xrt on Debian).
#pragma once

#include <xrt/xrt_device.h>

#include "xrtio/xrt.hpp"

namespace xrtio::xrt_backend {

/// The xrt::device of `ctx` (a copy of XRT's shared handle). Errors:
/// errc::not_supported when `ctx` is empty or not on the XRT backend.
xrt::device native_xrt_device(const xrtio::context& ctx);

}  // namespace xrtio::xrt_backend
