// What the xclbin reader promises about an xclbin it accepted, checked
// against the bytes it was given (shared by the xclbin and mkxclbin fuzz
// targets), and about one it refused.
#pragma once

#include <xclbin.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "fuzz_check.hpp"
#include "xclbin_image.hpp"
#include "xrtio/error.hpp"
#include "xrtio/xrt.hpp"

namespace xfuzz {

/// A refusal is errc::invalid_xclbin naming the source, never another error.
inline void check_refusal(const xrtio::error& e, const std::string& name) {
  XFUZZ_CHECK(e.code() == xrtio::errc::invalid_xclbin, std::string("refused with another error: ") + e.what());
  XFUZZ_CHECK(std::string(e.what()).find(name) != std::string::npos, std::string("refusal does not name the source: ") + e.what());
}

/// An accepted xclbin's description agrees with its bytes: its length, bank
/// indices and every CONNECTIVITY entry of a compute unit naming one of its
/// kernel's arguments.
inline void check_accepted(std::span<const char> file, const xrtio::xrt_backend::xclbin_info& info,
                           const std::string& name) {
  XFUZZ_CHECK(info.path == name, "xclbin_info::path is " + info.path);
  axlf top;
  std::memcpy(&top, file.data(), sizeof top);
  XFUZZ_CHECK(info.file_size == top.m_header.m_length && info.file_size <= file.size(),
        "file_size " + std::to_string(info.file_size) + " for m_length " + std::to_string(top.m_header.m_length) +
            " in " + std::to_string(file.size()) + " bytes");
  for (std::size_t i = 1; i < info.banks.size(); ++i)
    XFUZZ_CHECK(info.banks[i - 1].index < info.banks[i].index, "bank indices not ascending");
  auto bank_known = [&](int b) {
    return std::any_of(info.banks.begin(), info.banks.end(), [&](auto& x) { return x.index == b; });
  };
  for (auto& k : info.kernels)
    for (std::size_t i = 0; i < k.args.size(); ++i) {
      auto& a = k.args[i];
      const std::string where = "kernel " + k.name + " argument " + std::to_string(i);
      XFUZZ_CHECK(a.index == i, where + " has index " + std::to_string(a.index));
      XFUZZ_CHECK(a.kind == xrtio::backend::arg_kind::buffer || a.size > 0, where + ": a scalar of size 0");
      for (int b : a.banks) XFUZZ_CHECK(bank_known(b), where + ": bank " + std::to_string(b) + " is not in MEM_TOPOLOGY");
      XFUZZ_CHECK(a.group_id == -1 || (!a.banks.empty() && a.group_id == a.banks.front()),
            where + ": group_id " + std::to_string(a.group_id) + " is not its first bank");
    }

  // Every connection of a compute unit names an argument its kernel has.
  auto m_length = file.first(info.file_size);
  auto ips = find_section(m_length, IP_LAYOUT);
  auto conns = find_section(m_length, CONNECTIVITY);
  if (!ips || !conns || conns->size() < sizeof(std::int32_t) || ips->size() < offsetof(ip_layout, m_ip_data)) return;
  std::int32_t nconn, nip;
  std::memcpy(&nconn, conns->data(), sizeof nconn);
  std::memcpy(&nip, ips->data(), sizeof nip);
  for (std::int32_t i = 0; i < nconn; ++i) {
    connection c;
    const std::size_t at = offsetof(connectivity, m_connection) + static_cast<std::size_t>(i) * sizeof c;
    XFUZZ_CHECK(at + sizeof c <= conns->size(), "accepted a CONNECTIVITY count past its section");
    std::memcpy(&c, conns->data() + at, sizeof c);
    XFUZZ_CHECK(c.m_ip_layout_index >= 0 && c.m_ip_layout_index < nip, "accepted a connection to IP " +
                                                                     std::to_string(c.m_ip_layout_index));
    ip_data ip;
    std::memcpy(&ip, ips->data() + offsetof(ip_layout, m_ip_data) + static_cast<std::size_t>(c.m_ip_layout_index) * sizeof ip,
                sizeof ip);
    const std::string ip_name(reinterpret_cast<const char*>(ip.m_name), strnlen(reinterpret_cast<const char*>(ip.m_name), sizeof ip.m_name));
    for (auto& k : info.kernels) {
      bool is_cu = std::any_of(k.compute_units.begin(), k.compute_units.end(), [&](auto& cu) { return cu.name == ip_name; });
      if (!is_cu) continue;
      XFUZZ_CHECK(c.arg_index >= 0 && static_cast<std::size_t>(c.arg_index) < k.args.size(),
            "accepted CONNECTIVITY entry " + std::to_string(i) + " naming argument " + std::to_string(c.arg_index) +
                " of compute unit " + ip_name + ", whose kernel " + k.name + " has " + std::to_string(k.args.size()));
    }
  }
}

}  // namespace xfuzz
