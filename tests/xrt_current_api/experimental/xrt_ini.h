// Current-XRT API declarations for xrtio's syntax check (tests/xrt_current_api/README.md).
// Mirrors upstream xrt/experimental/xrt_ini.h. Declarations only; never linked.
#pragma once
#include <string>

namespace xrt::ini {

// Throws when the key was already read by XRT.
void set(const std::string& key, const std::string& value);
inline void set(const std::string& key, unsigned int value) { set(key, std::to_string(value)); }

}  // namespace xrt::ini
