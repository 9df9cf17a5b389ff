// The xclbin's binary sections: MEM_TOPOLOGY, IP_LAYOUT and CONNECTIVITY, laid
// out as XRT 2.13 reads them (docs/DESIGN.md, "Testing without hardware: the no-op device").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "description.hpp"

namespace xrtio::mkxclbin {

/// A compute unit as IP_LAYOUT lists it.
struct ip_entry {
  std::string name;     ///< "kernel:cu"
  std::uint64_t base;   ///< its base address
  std::size_t kernel;   ///< index in description::kernels
};

/// The compute units sorted by base address, the order IP_LAYOUT lists them
/// in. A cu without base= takes the next free slot. Throws bad_input when
/// two compute units share a base address.
std::vector<ip_entry> layout_compute_units(const description& d);

/// int32 count, 4 bytes of padding, then one mem_data per bank.
std::vector<char> mem_topology_section(const description& d);

/// int32 count, 4 bytes of padding, then one ip_data per compute unit.
std::vector<char> ip_layout_section(const std::vector<ip_entry>& ips);

/// int32 count (no padding), then {arg, ip, mem} per buffer argument,
/// compute unit and bank.
std::vector<char> connectivity_section(const description& d, const std::vector<ip_entry>& ips);

}  // namespace xrtio::mkxclbin
