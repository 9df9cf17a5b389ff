// xrtio-mkxclbin: synthesizes an xclbin that XRT (2.13 and later) loads, from
// a small text description. No bitstream: meant for XRT's no-op device and
// for tests (docs/DESIGN.md, "Testing without hardware"). See docs/TOOLS.md.
//
// Usage:
//   xrtio-mkxclbin [--uuid UUID] DESCRIPTION -o OUT.xclbin   (DESCRIPTION "-" = stdin)
//   xrtio-mkxclbin --vadd -o OUT.xclbin                      (the preset below)
//   xrtio-mkxclbin --print-vadd                              (prints the preset)
//   xrtio-mkxclbin --npu -o OUT.xclbin                       (the NPU argument layout preset)
//   xrtio-mkxclbin --print-npu                               (prints that preset)
//
// Description format: one statement per line; '#' starts a comment; fields
// are separated by blanks; numbers are decimal or 0x-hex, sizes may end in
// K, M or G (binary units).
//
//   platform NAME                      header platform (VBNV), default "xrtio_synthetic"
//   uuid XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX
//                                      default: derived from the description (reproducible)
//   bank TAG size=SIZE [base=ADDR] [type=DDR4|DDR3|DRAM|HBM|HOST|BRAM|URAM] [unused]
//                                      a MEM_TOPOLOGY entry; its index is its order.
//                                      base defaults to the end of the previous bank.
//   kernel NAME                        starts a kernel; cu/arg lines below belong to it
//   cu NAME [base=ADDR]                a compute unit (IP_LAYOUT "kernel:cu");
//                                      base defaults to 0x1800000 + 0x10000 * n
//   arg NAME buffer TYPE BANK[,BANK...]   a global-memory argument (e.g. "int*"),
//                                      connected to those banks on every cu
//   arg NAME scalar TYPE SIZE          a scalar argument of SIZE bytes (e.g. "uint 4")
//
// Arguments are numbered in order. Register offsets follow Vitis' layout:
// the first at 0x10, each next one after round_up(size, 4) + 4 bytes (a
// pointer takes 8). Sections written (docs/DESIGN.md, "Testing without hardware"): MEM_TOPOLOGY,
// IP_LAYOUT (IP_KERNEL, AP_CTRL_HS), CONNECTIVITY (one entry per buffer
// argument, compute unit and bank) and EMBEDDED_METADATA (the XML XRT reads
// kernel arguments from); header magic "xclbin2", no signature, XCLBIN_FLAT,
// sections 8-byte aligned.
//
// Exit status: 0 written, 1 I/O error, 2 bad description or usage.
#include <xclbin.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr const char* vadd_preset = R"(# vadd: c[i] = a[i] + b[i], like the sample vadd-noop.xclbin
platform xilinx_noop_fake_1_0
bank bank0 size=1G base=0x0 type=DDR4
kernel vadd
cu vadd_1 base=0x1800000
arg a buffer int* bank0
arg b buffer int* bank0
arg c buffer int* bank0
arg n scalar uint 4
)";

// The argument layout of a Ryzen AI NPU kernel as mlir-aie / IRON host code
// calls it (xrtio/xrt.hpp, "NPU calling convention"): opcode, instruction
// buffer on group 1, instruction word count, data buffers on groups 3, 4, 5.
// Only the layout: there is no AIE program, and the banks are synthetic.
constexpr const char* npu_preset = R"(# npu: the MLIR_AIE argument layout (opcode, instr, ninstr, bo0..bo2)
platform xrtio_npu_layout
bank unused0 size=64M unused
bank instr size=64M
bank unused2 size=64M unused
bank data0 size=64M
bank data1 size=64M
bank data2 size=64M
kernel MLIR_AIE
cu MLIRAIE
arg opcode scalar ulong 8
arg instr buffer char* instr
arg ninstr scalar uint 4
arg bo0 buffer void* data0
arg bo1 buffer void* data1
arg bo2 buffer void* data2
)";

struct bad_input : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct bank_desc {
  std::string tag;
  std::uint64_t size = 0;
  std::optional<std::uint64_t> base;
  std::uint8_t type = MEM_DDR4;
  bool used = true;
};
struct arg_desc {
  std::string name, type;
  bool buffer = true;
  std::uint64_t size = 0;  // scalars
  std::vector<std::string> banks;
};
struct cu_desc {
  std::string name;
  std::optional<std::uint64_t> base;
};
struct kernel_desc {
  std::string name;
  std::vector<cu_desc> cus;
  std::vector<arg_desc> args;
};
struct description {
  std::string platform = "xrtio_synthetic";
  std::optional<std::string> uuid;
  std::vector<bank_desc> banks;
  std::vector<kernel_desc> kernels;
};

std::uint64_t parse_number(const std::string& s, bool allow_suffix, int line) {
  if (s.empty()) throw bad_input("line " + std::to_string(line) + ": empty number");
  std::string body = s;
  std::uint64_t mult = 1;
  if (allow_suffix) {
    char last = static_cast<char>(std::toupper(static_cast<unsigned char>(body.back())));
    if (last == 'K') mult = 1ull << 10;
    if (last == 'M') mult = 1ull << 20;
    if (last == 'G') mult = 1ull << 30;
    if (mult != 1) body.pop_back();
  }
  std::size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(body, &used, 0);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != body.size() || body.empty() || body[0] == '-')
    throw bad_input("line " + std::to_string(line) + ": not a number: \"" + s + "\"");
  if (v > UINT64_MAX / mult) throw bad_input("line " + std::to_string(line) + ": number too large: " + s);
  return v * mult;
}

std::uint8_t parse_mem_type(const std::string& s, int line) {
  static const std::map<std::string, std::uint8_t> types = {
      {"DDR3", MEM_DDR3}, {"DDR4", MEM_DDR4}, {"DRAM", MEM_DRAM}, {"HBM", MEM_HBM},
      {"HOST", MEM_HOST}, {"BRAM", MEM_BRAM}, {"URAM", MEM_URAM}};
  auto it = types.find(s);
  if (it == types.end()) throw bad_input("line " + std::to_string(line) + ": unknown bank type \"" + s + "\"");
  return it->second;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool valid_name(const std::string& s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '[' || c == ']';
  });
}

description parse(const std::string& text) {
  description d;
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  auto fail = [&](const std::string& why) -> bad_input { return bad_input("line " + std::to_string(line) + ": " + why); };
  while (std::getline(in, raw)) {
    ++line;
    if (auto h = raw.find('#'); h != std::string::npos) raw.erase(h);
    std::istringstream ls(raw);
    std::vector<std::string> w{std::istream_iterator<std::string>(ls), std::istream_iterator<std::string>()};
    if (w.empty()) continue;
    const auto& kw = w[0];
    auto options = [&](std::size_t from, auto&& on) {
      for (std::size_t i = from; i < w.size(); ++i) {
        auto eq = w[i].find('=');
        on(w[i].substr(0, eq), eq == std::string::npos ? std::string() : w[i].substr(eq + 1), eq != std::string::npos);
      }
    };
    if (kw == "platform") {
      if (w.size() != 2 || w[1].size() >= 64) throw fail("platform takes one name of at most 63 characters");
      d.platform = w[1];
    } else if (kw == "uuid") {
      if (w.size() != 2) throw fail("uuid takes one value");
      d.uuid = w[1];
    } else if (kw == "bank") {
      if (w.size() < 3) throw fail("bank TAG size=SIZE [base=ADDR] [type=TYPE] [unused]");
      bank_desc b;
      b.tag = w[1];
      if (!valid_name(b.tag) || b.tag.size() >= 16) throw fail("bank tag \"" + b.tag + "\": 1-15 name characters");
      for (auto& o : d.banks)
        if (o.tag == b.tag) throw fail("bank \"" + b.tag + "\" declared twice");
      options(2, [&](const std::string& k, const std::string& v, bool has) {
        if (k == "size" && has) b.size = parse_number(v, true, line);
        else if (k == "base" && has) b.base = parse_number(v, true, line);
        else if (k == "type" && has) b.type = parse_mem_type(v, line);
        else if (k == "unused" && !has) b.used = false;
        else throw fail("unknown bank option \"" + k + "\"");
      });
      if (b.size == 0 || b.size % 1024 != 0) throw fail("bank \"" + b.tag + "\" needs size=SIZE, a non-zero multiple of 1K");
      d.banks.push_back(std::move(b));
    } else if (kw == "kernel") {
      if (w.size() != 2 || !valid_name(w[1])) throw fail("kernel takes one name");
      for (auto& k : d.kernels)
        if (k.name == w[1]) throw fail("kernel \"" + w[1] + "\" declared twice");
      d.kernels.push_back({w[1], {}, {}});
    } else if (kw == "cu") {
      if (d.kernels.empty()) throw fail("cu before any kernel");
      if (w.size() < 2 || !valid_name(w[1])) throw fail("cu NAME [base=ADDR]");
      auto& k = d.kernels.back();
      cu_desc c{w[1], std::nullopt};
      if (k.name.size() + 1 + c.name.size() >= 64) throw fail("\"" + k.name + ":" + c.name + "\" exceeds 63 characters");
      for (auto& kk : d.kernels)
        for (auto& o : kk.cus)
          if (o.name == c.name) throw fail("compute unit \"" + c.name + "\" declared twice");
      options(2, [&](const std::string& key, const std::string& v, bool has) {
        if (key == "base" && has) c.base = parse_number(v, true, line);
        else throw fail("unknown cu option \"" + key + "\"");
      });
      k.cus.push_back(std::move(c));
    } else if (kw == "arg") {
      if (d.kernels.empty()) throw fail("arg before any kernel");
      if (w.size() != 5) throw fail("arg NAME buffer TYPE BANK[,BANK...]  or  arg NAME scalar TYPE SIZE");
      auto& k = d.kernels.back();
      arg_desc a;
      a.name = w[1];
      a.type = w[3];
      if (!valid_name(a.name)) throw fail("bad argument name \"" + a.name + "\"");
      for (auto& o : k.args)
        if (o.name == a.name) throw fail("argument \"" + a.name + "\" declared twice in kernel " + k.name);
      if (a.type.find_first_of("<>&\"'") != std::string::npos) throw fail("bad type \"" + a.type + "\"");
      if (w[2] == "buffer") {
        a.buffer = true;
        a.size = 8;
        a.banks = split(w[4], ',');
        for (auto& b : a.banks)
          if (b.empty()) throw fail("empty bank name in \"" + w[4] + "\"");
      } else if (w[2] == "scalar") {
        a.buffer = false;
        a.size = parse_number(w[4], false, line);
        if (a.size == 0 || a.size > 64) throw fail("scalar size must be 1..64 bytes");
      } else {
        throw fail("argument kind must be buffer or scalar, not \"" + w[2] + "\"");
      }
      k.args.push_back(std::move(a));
    } else {
      throw fail("unknown statement \"" + kw + "\"");
    }
  }
  if (d.kernels.empty()) throw bad_input("no kernel declared");
  for (auto& k : d.kernels) {
    if (k.cus.empty()) throw bad_input("kernel " + k.name + " has no compute unit (cu line)");
    for (auto& a : k.args)
      for (auto& b : a.banks)
        if (std::none_of(d.banks.begin(), d.banks.end(), [&](auto& x) { return x.tag == b; }))
          throw bad_input("kernel " + k.name + " argument " + a.name + ": no bank \"" + b + "\"");
  }
  return d;
}

// FNV-1a 64, twice with different seeds: a reproducible uuid from the text.
std::array<unsigned char, 16> derive_uuid(const std::string& text) {
  std::array<unsigned char, 16> u{};
  std::uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
  for (unsigned char c : text) {
    h1 = (h1 ^ c) * 0x100000001b3ull;
    h2 = (h2 ^ c) * 0x100000001b3ull;
    h2 ^= h2 >> 29;
  }
  for (int i = 0; i < 8; ++i) {
    u[i] = static_cast<unsigned char>(h1 >> (8 * i));
    u[8 + i] = static_cast<unsigned char>(h2 >> (8 * i));
  }
  u[6] = static_cast<unsigned char>((u[6] & 0x0f) | 0x50);  // RFC 4122 version 5 layout (name-based)
  u[8] = static_cast<unsigned char>((u[8] & 0x3f) | 0x80);
  return u;
}

std::array<unsigned char, 16> parse_uuid(const std::string& s) {
  std::string hex;
  for (char c : s)
    if (c != '-') hex += c;
  if (hex.size() != 32 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    throw bad_input("uuid \"" + s + "\" is not 32 hex digits");
  std::array<unsigned char, 16> u{};
  for (int i = 0; i < 16; ++i) u[i] = static_cast<unsigned char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return u;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

template <class T>
void put(std::vector<char>& out, const T& v) {
  const char* p = reinterpret_cast<const char*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

std::vector<char> build(const description& d, const std::string& text, std::optional<std::string> uuid_override) {
  // ---- MEM_TOPOLOGY: int32 count, 4 bytes padding, mem_data[count]
  std::vector<char> mem;
  put(mem, static_cast<std::int32_t>(d.banks.size()));
  put(mem, std::int32_t{0});
  std::uint64_t next_base = 0;
  for (auto& b : d.banks) {
    mem_data m;
    std::memset(&m, 0, sizeof m);
    m.m_type = b.type;
    m.m_used = b.used ? 1 : 0;
    m.m_size = b.size / 1024;  // KB
    m.m_base_address = b.base.value_or(next_base);
    next_base = m.m_base_address + b.size;
    std::memcpy(m.m_tag, b.tag.c_str(), b.tag.size() + 1);
    put(mem, m);
  }

  // ---- IP_LAYOUT: int32 count, 4 bytes padding, ip_data[count], by base address
  struct ip_entry {
    std::string name;
    std::uint64_t base;
    std::size_t kernel;
  };
  std::vector<ip_entry> ips;
  std::uint64_t auto_base = 0x1800000;
  for (std::size_t k = 0; k < d.kernels.size(); ++k)
    for (auto& c : d.kernels[k].cus) {
      ips.push_back({d.kernels[k].name + ":" + c.name, c.base.value_or(auto_base), k});
      auto_base = std::max(auto_base, ips.back().base) + 0x10000;
    }
  std::stable_sort(ips.begin(), ips.end(), [](auto& a, auto& b) { return a.base < b.base; });
  for (std::size_t i = 1; i < ips.size(); ++i)
    if (ips[i].base == ips[i - 1].base)
      throw bad_input("compute units " + ips[i - 1].name + " and " + ips[i].name + " share base address " +
                      hex(ips[i].base));
  std::vector<char> ipl;
  put(ipl, static_cast<std::int32_t>(ips.size()));
  put(ipl, std::int32_t{0});
  for (auto& e : ips) {
    ip_data ip;
    std::memset(&ip, 0, sizeof ip);
    ip.m_type = IP_KERNEL;
    ip.properties = static_cast<std::uint32_t>(AP_CTRL_HS) << IP_CONTROL_SHIFT;
    ip.m_base_address = e.base;
    std::memcpy(ip.m_name, e.name.c_str(), e.name.size() + 1);
    put(ipl, ip);
  }

  // ---- CONNECTIVITY: int32 count (no padding), {arg, ip, mem} per buffer arg x cu x bank
  auto bank_index = [&](const std::string& tag) {
    for (std::size_t i = 0; i < d.banks.size(); ++i)
      if (d.banks[i].tag == tag) return static_cast<std::int32_t>(i);
    return std::int32_t{-1};
  };
  std::vector<connection> conns;
  for (std::size_t i = 0; i < ips.size(); ++i) {
    auto& k = d.kernels[ips[i].kernel];
    for (std::size_t a = 0; a < k.args.size(); ++a)
      for (auto& b : k.args[a].banks)
        conns.push_back({static_cast<std::int32_t>(a), static_cast<std::int32_t>(i), bank_index(b)});
  }
  std::vector<char> con;
  put(con, static_cast<std::int32_t>(conns.size()));
  for (auto& c : conns) put(con, c);

  // ---- EMBEDDED_METADATA: the XML XRT reads kernels and arguments from
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<project name=\"xrtio-mkxclbin\">\n"
    << "  <platform vendor=\"xrtio\" boardid=\"synthetic\" name=\"" << xml_escape(d.platform) << "\">\n"
    << "    <device name=\"fpga0\" fpgaDevice=\"synthetic\">\n"
    << "      <core name=\"OCL_REGION_0\" target=\"hw\" type=\"clc_region\">\n";
  for (auto& k : d.kernels) {
    std::uint64_t off = 0x10;
    std::vector<std::uint64_t> offsets;
    for (auto& a : k.args) {
      offsets.push_back(off);
      off += ((a.size + 3) & ~std::uint64_t{3}) + 4;
    }
    std::uint64_t range = 0x1000;
    while (range < off) range <<= 1;
    x << "        <kernel name=\"" << xml_escape(k.name)
      << "\" language=\"c\" type=\"pl\" hwControlProtocol=\"ap_ctrl_hs\">\n"
      << "          <port name=\"S_AXI_CONTROL\" mode=\"slave\" range=\"" << hex(range)
      << "\" dataWidth=\"32\" portType=\"addressable\" base=\"0x0\"/>\n"
      << "          <port name=\"M_AXI_GMEM\" mode=\"master\" range=\"0xFFFFFFFF\" dataWidth=\"32\" "
         "portType=\"addressable\" base=\"0x0\"/>\n";
    for (std::size_t i = 0; i < k.args.size(); ++i) {
      auto& a = k.args[i];
      x << "          <arg name=\"" << xml_escape(a.name) << "\" addressQualifier=\"" << (a.buffer ? 1 : 0)
        << "\" id=\"" << i << "\" port=\"" << (a.buffer ? "M_AXI_GMEM" : "S_AXI_CONTROL") << "\" size=\""
        << hex(a.size) << "\" offset=\"" << hex(offsets[i]) << "\" hostOffset=\"0x0\" hostSize=\"" << hex(a.size)
        << "\" type=\"" << xml_escape(a.type) << "\"/>\n";
    }
    for (auto& c : k.cus) x << "          <instance name=\"" << xml_escape(c.name) << "\"/>\n";
    x << "        </kernel>\n";
  }
  x << "      </core>\n    </device>\n  </platform>\n</project>\n";
  std::string xml = x.str();
  std::vector<char> meta(xml.begin(), xml.end());

  // ---- header + section headers + 8-byte aligned sections
  struct sec {
    std::uint32_t kind;
    const char* name;
    const std::vector<char>* data;
  };
  const sec secs[] = {{MEM_TOPOLOGY, "MEM_TOPOLOGY", &mem},
                      {IP_LAYOUT, "IP_LAYOUT", &ipl},
                      {CONNECTIVITY, "CONNECTIVITY", &con},
                      {EMBEDDED_METADATA, "METADATA", &meta}};
  const std::size_t nsec = std::size(secs);
  const std::size_t headers_at = offsetof(axlf, m_sections);
  auto align8 = [](std::size_t v) { return (v + 7) & ~std::size_t{7}; };
  std::size_t pos = align8(headers_at + nsec * sizeof(axlf_section_header));
  std::vector<axlf_section_header> hdrs;
  for (auto& s : secs) {
    axlf_section_header h;
    std::memset(&h, 0, sizeof h);
    h.m_sectionKind = s.kind;
    std::strncpy(h.m_sectionName, s.name, sizeof h.m_sectionName - 1);
    h.m_sectionOffset = pos;
    h.m_sectionSize = s.data->size();
    hdrs.push_back(h);
    pos = align8(pos + s.data->size());
  }
  const std::size_t total = pos;

  axlf top;
  std::memset(&top, 0, sizeof top);
  std::memcpy(top.m_magic, "xclbin2", 8);
  top.m_signature_length = -1;
  std::memset(top.reserved, 0xff, sizeof top.reserved);
  std::memset(top.m_keyBlock, 0xff, sizeof top.m_keyBlock);
  top.m_uniqueId = 0;
  top.m_header.m_length = total;
  top.m_header.m_timeStamp = 0;  // reproducible output
  top.m_header.m_versionMajor = 2;
  top.m_header.m_versionMinor = 13;
  top.m_header.m_versionPatch = 0;
  top.m_header.m_mode = XCLBIN_FLAT;
  std::memcpy(top.m_header.m_platformVBNV, d.platform.c_str(), d.platform.size() + 1);
  auto uuid = uuid_override ? parse_uuid(*uuid_override) : d.uuid ? parse_uuid(*d.uuid) : derive_uuid(text);
  std::memcpy(top.m_header.uuid, uuid.data(), 16);
  top.m_header.m_numSections = static_cast<std::uint32_t>(nsec);

  std::vector<char> out(total, 0);
  std::memcpy(out.data(), &top, headers_at);  // the inline m_sections[0] is written below
  for (std::size_t i = 0; i < nsec; ++i) {
    std::memcpy(out.data() + headers_at + i * sizeof(axlf_section_header), &hdrs[i], sizeof hdrs[i]);
    std::memcpy(out.data() + hdrs[i].m_sectionOffset, secs[i].data->data(), secs[i].data->size());
  }
  return out;
}

int usage(const char* msg = nullptr) {
  if (msg) std::cerr << "xrtio-mkxclbin: " << msg << "\n";
  std::cerr << "usage: xrtio-mkxclbin [--uuid UUID] (DESCRIPTION | - | --vadd | --npu) -o OUT.xclbin\n"
               "       xrtio-mkxclbin --print-vadd | --print-npu\n"
               "format: see docs/TOOLS.md\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, output;
  std::optional<std::string> uuid;
  const char* preset = nullptr;
  std::string preset_name;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--vadd" || a == "--npu") {
      if (preset) return usage("more than one preset");
      preset = a == "--vadd" ? vadd_preset : npu_preset;
      preset_name = a;
    } else if (a == "--print-vadd" || a == "--print-npu") {
      std::cout << (a == "--print-vadd" ? vadd_preset : npu_preset);
      return 0;
    } else if (a == "-o" && i + 1 < argc) output = argv[++i];
    else if (a == "--uuid" && i + 1 < argc) uuid = argv[++i];
    else if (a == "-h" || a == "--help") return usage(), 0;
    else if (!a.empty() && a[0] == '-' && a != "-") return usage(("unknown option " + a).c_str());
    else if (input.empty()) input = a;
    else return usage("more than one description");
  }
  if (output.empty()) return usage("no output (-o OUT.xclbin)");
  if ((preset != nullptr) == !input.empty()) return usage("give one of DESCRIPTION, -, --vadd or --npu");

  std::string text;
  if (preset) {
    text = preset;
  } else if (input == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream f(input);
    if (!f) {
      std::cerr << "xrtio-mkxclbin: cannot read " << input << ": " << std::strerror(errno) << "\n";
      return 1;
    }
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }

  std::vector<char> bytes;
  try {
    bytes = build(parse(text), text, uuid);
  } catch (const bad_input& e) {
    std::cerr << "xrtio-mkxclbin: " << (preset ? preset_name : input) << ": " << e.what() << "\n";
    return 2;
  }
  std::ofstream out(output, std::ios::binary | std::ios::trunc);
  if (!out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())) || !out.flush()) {
    std::cerr << "xrtio-mkxclbin: cannot write " << output << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  return 0;
}
