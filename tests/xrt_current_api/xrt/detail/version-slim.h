// Current-XRT API declarations for xrtio's syntax check (tests/xrt_current_api/README.md).
// Mirrors upstream xrt/detail/version-slim.h (installed from XRT 2.17 on):
// the version macros. A version past 2.15 here makes the check compile the
// backend's branch for an XRT whose exit handler stops its command monitors
// under their mutex (src/backends/xrt/xrt_api.hpp).
#pragma once

#define XRT_VERSION(major, minor) ((major << 16) + (minor))
#define XRT_VERSION_CODE XRT_VERSION(2, 19)
#define XRT_MAJOR(code) ((code >> 16))
#define XRT_MINOR(code) (code - ((code >> 16) << 16))
