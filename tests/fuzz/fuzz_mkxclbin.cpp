// Fuzz target: xrtio-mkxclbin's description parser (tools/mkxclbin,
// parse_description) and what follows from what it accepts.
//
// - Any text is a checked description or bad_input, never another exception
//   or a crash.
// - An accepted description keeps the format's rules (docs/TOOLS.md): a
//   kernel, each with a compute unit; every bank an argument names declared;
//   names (kernels: letters, digits, _), sizes and lengths within their limits.
// - Its xclbin (build_xclbin, which may refuse only a shared base address or
//   a malformed uuid) is accepted by xrtio's own xclbin reader, and describes
//   exactly what the text said: platform, uuid, banks, kernels, compute
//   units and arguments.
#include <xclbin.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "description.hpp"
#include "fuzz_check.hpp"
#include "fuzz_input.hpp"
#include "uuid.hpp"
#include "xclbin_checks.hpp"
#include "xclbin_reader.hpp"
#include "xclbin_writer.hpp"

namespace {

namespace mk = xrtio::mkxclbin;

/// Descriptions longer than this say nothing new and cost time.
constexpr std::size_t max_text = 4096;
/// The format's limits (docs/TOOLS.md, xclbin.h's field sizes).
constexpr std::size_t max_platform_chars = sizeof(axlf_header::m_platformVBNV) - 1;
constexpr std::size_t max_tag_chars = sizeof(mem_data::m_tag) - 1;
constexpr std::size_t max_ip_name_chars = sizeof(ip_data::m_name) - 1;
constexpr std::uint64_t max_scalar_bytes = 64;

bool name_chars(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '[' || c == ']';
  });
}

bool printable(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '!' && c <= '~'; });
}

void check_description(const mk::description& d) {
  XFUZZ_CHECK(!d.kernels.empty(), "accepted a description without a kernel");
  XFUZZ_CHECK(d.platform.size() <= max_platform_chars && printable(d.platform),
              "platform \"" + d.platform + "\" of " + std::to_string(d.platform.size()) + " characters");
  for (std::size_t i = 0; i < d.banks.size(); ++i) {
    auto& b = d.banks[i];
    XFUZZ_CHECK(name_chars(b.tag) && b.tag.size() <= max_tag_chars, "bank tag \"" + b.tag + "\"");
    XFUZZ_CHECK(b.size > 0 && b.size % 1024 == 0, "bank " + b.tag + " of " + std::to_string(b.size) + " bytes");
    for (std::size_t j = 0; j < i; ++j) XFUZZ_CHECK(d.banks[j].tag != b.tag, "bank " + b.tag + " twice");
  }
  for (auto& k : d.kernels) {
    XFUZZ_CHECK(!k.name.empty() && std::all_of(k.name.begin(), k.name.end(),
                                               [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }),
                "kernel name \"" + k.name + "\"");
    XFUZZ_CHECK(!k.cus.empty(), "kernel " + k.name + " without a compute unit");
    for (auto& c : k.cus)
      XFUZZ_CHECK(name_chars(c.name) && k.name.size() + 1 + c.name.size() <= max_ip_name_chars, "cu \"" + c.name + "\"");
    for (auto& a : k.args) {
      XFUZZ_CHECK(name_chars(a.name), "argument name \"" + a.name + "\"");
      XFUZZ_CHECK(printable(a.type), "argument type \"" + a.type + "\"");
      XFUZZ_CHECK(a.buffer || a.type.find('*') == std::string::npos, "scalar " + a.name + " of pointer type " + a.type);
      XFUZZ_CHECK(a.buffer ? a.size == 8 : (a.size >= 1 && a.size <= max_scalar_bytes),
            "argument " + a.name + " of size " + std::to_string(a.size));
      XFUZZ_CHECK(a.buffer != a.banks.empty(), "argument " + a.name + ": banks iff a buffer");
      for (auto& b : a.banks)
        XFUZZ_CHECK(std::any_of(d.banks.begin(), d.banks.end(), [&](auto& x) { return x.tag == b; }),
              "argument " + a.name + " names undeclared bank " + b);
    }
  }
}

std::string uuid_text(const mk::xclbin_uuid& u) {
  char s[37];
  std::snprintf(s, sizeof s, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
                u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return s;
}

// The xclbin describes what the text said.
void check_round_trip(const mk::description& d, const mk::xclbin_uuid& uuid,
                      const xrtio::xrt_backend::xclbin_info& info) {
  XFUZZ_CHECK(info.platform == d.platform, "platform \"" + info.platform + "\" for \"" + d.platform + "\"");
  XFUZZ_CHECK(info.uuid == uuid_text(uuid), "uuid " + info.uuid + " for " + uuid_text(uuid));
  XFUZZ_CHECK(info.banks.size() == d.banks.size(), "banks: " + std::to_string(info.banks.size()) + " of " +
                                                 std::to_string(d.banks.size()));
  for (std::size_t i = 0; i < d.banks.size(); ++i) {
    auto& b = info.banks[i];
    XFUZZ_CHECK(b.index == static_cast<int>(i) && b.tag == d.banks[i].tag && b.size_bytes == d.banks[i].size &&
              b.used == d.banks[i].used,
          "bank " + std::to_string(i) + " reads back as " + b.tag);
  }
  XFUZZ_CHECK(info.kernels.size() == d.kernels.size(), "kernels: " + std::to_string(info.kernels.size()) + " of " +
                                                     std::to_string(d.kernels.size()));
  for (auto& k : d.kernels) {
    auto it = std::find_if(info.kernels.begin(), info.kernels.end(), [&](auto& x) { return x.name == k.name; });
    XFUZZ_CHECK(it != info.kernels.end(), "kernel " + k.name + " missing");
    XFUZZ_CHECK(it->compute_units.size() == k.cus.size(), "kernel " + k.name + ": compute units");
    for (auto& c : k.cus)
      XFUZZ_CHECK(std::any_of(it->compute_units.begin(), it->compute_units.end(),
                        [&](auto& x) { return x.name == k.name + ":" + c.name; }),
            "compute unit " + k.name + ":" + c.name + " missing");
    XFUZZ_CHECK(it->args.size() == k.args.size(), "kernel " + k.name + ": " + std::to_string(it->args.size()) +
                                                " arguments read back of " + std::to_string(k.args.size()));
    for (std::size_t i = 0; i < k.args.size(); ++i) {
      auto& a = k.args[i];
      auto& r = it->args[i];
      const std::string where = "kernel " + k.name + " argument " + a.name;
      XFUZZ_CHECK(r.name == a.name && r.type == a.type && r.size == a.size, where + " reads back as " + r.name + " " +
                                                                          r.type + " " + std::to_string(r.size));
      XFUZZ_CHECK((r.kind == xrtio::backend::arg_kind::buffer) == a.buffer, where + ": kind");
      std::vector<int> banks;
      for (auto& tag : a.banks)
        for (std::size_t b = 0; b < d.banks.size(); ++b)
          if (d.banks[b].tag == tag) banks.push_back(static_cast<int>(b));
      std::sort(banks.begin(), banks.end());
      banks.erase(std::unique(banks.begin(), banks.end()), banks.end());
      XFUZZ_CHECK(r.banks == banks, where + ": banks");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  xfuzz::fuzz_input in({data, size});
  const std::string text(in.text(max_text));
  mk::description d;
  try {
    d = mk::parse_description(text);
  } catch (const mk::bad_input&) {
    return 0;
  } catch (const std::exception& e) {
    XFUZZ_CHECK(false, std::string("parse_description threw another exception: ") + e.what());
  }
  check_description(d);

  std::vector<char> file;
  mk::xclbin_uuid uuid{};
  try {
    uuid = mk::choose_uuid(d, text, std::nullopt);
    file = mk::build_xclbin(d, text, std::nullopt);
  } catch (const mk::bad_input&) {
    return 0;  // compute units sharing a base address, or a malformed uuid
  } catch (const std::exception& e) {
    XFUZZ_CHECK(false, std::string("build_xclbin threw another exception: ") + e.what());
  }

  const std::string name = "<mkxclbin>";
  try {
    auto info = xrtio::xrt_backend::detail::parse_xclbin(std::as_bytes(std::span<const char>(file)), name);
    xfuzz::check_accepted(file, info, name);
    check_round_trip(d, uuid, info);
  } catch (const xrtio::error& e) {
    XFUZZ_CHECK(false, std::string("the reader refused what the tool accepted: ") + e.what() + "\n--- description:\n" + text);
  }
  return 0;
}
