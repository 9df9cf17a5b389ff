// The xclbin's binary sections: MEM_TOPOLOGY, IP_LAYOUT and CONNECTIVITY.
#include "sections.hpp"

#include <xclbin.h>

#include <algorithm>
#include <cstring>

#include "encoding.hpp"

namespace xrtio::mkxclbin {
namespace {

/// Where compute units start when the description gives no base: Vitis' first
/// CU address, as in the sample vadd-noop.xclbin.
constexpr std::uint64_t first_cu_base = 0x1800000;
/// The address window each compute unit gets: 64 KiB, Vitis' usual CU range.
constexpr std::uint64_t cu_address_stride = 0x10000;
/// mem_data::m_size counts KB.
constexpr std::uint64_t bytes_per_kb = 1024;
/// CONNECTIVITY's index for a bank not in MEM_TOPOLOGY (never written: the
/// parser checks that every bank an argument names is declared).
constexpr std::int32_t no_bank = -1;

// A section's leading element count; MEM_TOPOLOGY and IP_LAYOUT pad it to 8
// bytes (their arrays hold 64-bit fields), CONNECTIVITY does not.
void put_count(std::vector<char>& out, std::size_t n, bool padded) {
  put(out, static_cast<std::int32_t>(n));
  if (padded) put(out, std::int32_t{0});
}

std::int32_t bank_index(const description& d, const std::string& tag) {
  for (std::size_t i = 0; i < d.banks.size(); ++i)
    if (d.banks[i].tag == tag) return static_cast<std::int32_t>(i);
  return no_bank;
}

}  // namespace

std::vector<ip_entry> layout_compute_units(const description& d) {
  std::vector<ip_entry> ips;
  std::uint64_t auto_base = first_cu_base;
  for (std::size_t k = 0; k < d.kernels.size(); ++k)
    for (auto& c : d.kernels[k].cus) {
      ips.push_back({d.kernels[k].name + ":" + c.name, c.base.value_or(auto_base), k});
      auto_base = std::max(auto_base, ips.back().base) + cu_address_stride;
    }
  std::stable_sort(ips.begin(), ips.end(), [](auto& a, auto& b) { return a.base < b.base; });
  for (std::size_t i = 1; i < ips.size(); ++i)
    if (ips[i].base == ips[i - 1].base)
      throw bad_input("compute units " + ips[i - 1].name + " and " + ips[i].name + " share base address " +
                      hex(ips[i].base));
  return ips;
}

std::vector<char> mem_topology_section(const description& d) {
  std::vector<char> mem;
  put_count(mem, d.banks.size(), true);
  std::uint64_t next_base = 0;
  for (auto& b : d.banks) {
    mem_data m;
    std::memset(&m, 0, sizeof m);
    m.m_type = b.type;
    m.m_used = b.used ? 1 : 0;
    m.m_size = b.size / bytes_per_kb;
    m.m_base_address = b.base.value_or(next_base);
    next_base = m.m_base_address + b.size;
    std::memcpy(m.m_tag, b.tag.c_str(), b.tag.size() + 1);
    put(mem, m);
  }
  return mem;
}

std::vector<char> ip_layout_section(const std::vector<ip_entry>& ips) {
  std::vector<char> ipl;
  put_count(ipl, ips.size(), true);
  for (auto& e : ips) {
    ip_data ip;
    std::memset(&ip, 0, sizeof ip);
    ip.m_type = IP_KERNEL;
    ip.properties = static_cast<std::uint32_t>(AP_CTRL_HS) << IP_CONTROL_SHIFT;
    ip.m_base_address = e.base;
    std::memcpy(ip.m_name, e.name.c_str(), e.name.size() + 1);
    put(ipl, ip);
  }
  return ipl;
}

std::vector<char> connectivity_section(const description& d, const std::vector<ip_entry>& ips) {
  std::vector<connection> conns;
  for (std::size_t i = 0; i < ips.size(); ++i) {
    auto& k = d.kernels[ips[i].kernel];
    for (std::size_t a = 0; a < k.args.size(); ++a)
      for (auto& b : k.args[a].banks)
        conns.push_back({static_cast<std::int32_t>(a), static_cast<std::int32_t>(i), bank_index(d, b)});
  }
  std::vector<char> con;
  put_count(con, conns.size(), false);
  for (auto& c : conns) put(con, c);
  return con;
}

}  // namespace xrtio::mkxclbin
