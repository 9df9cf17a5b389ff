// The EMBEDDED_METADATA section: the XML XRT reads kernels, their arguments
// (register offsets, ports, sizes, types) and their instances from.
#pragma once

#include <vector>

#include "description.hpp"

namespace xrtio::mkxclbin {

/// project/platform/device/core/kernel, one kernel element per kernel.
std::vector<char> embedded_metadata_section(const description& d);

}  // namespace xrtio::mkxclbin
