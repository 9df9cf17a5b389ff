// Current-XRT API declarations for xrtio's syntax check (tests/xrt_current_api/README.md).
// Mirrors upstream xrt/experimental/xrt_system.h. Declarations only; never linked.
#pragma once

namespace xrt::system {

unsigned int enumerate_devices();

}  // namespace xrt::system
