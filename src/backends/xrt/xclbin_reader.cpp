// The xclbin reader (xclbin_reader.hpp): xrtio checks lengths, section bounds,
// element counts and cross-section indices that XRT 2.13 indexes blindly
// (docs/DESIGN.md, "Pitfalls"), then describes the kernels XRT parsed.
#include "xclbin_reader.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include <xclbin.h>

#include "xrt_types.hpp"
#include "xrtio/error.hpp"

namespace xrtio::xrt_backend {
namespace detail {
namespace {

using backend::arg_kind;

/// axlf::m_magic, its terminating NUL included.
constexpr char xclbin_magic[] = "xclbin2";
static_assert(sizeof xclbin_magic == sizeof(axlf::m_magic));
/// MEM_TOPOLOGY gives bank sizes in KiB.
constexpr std::uint64_t bytes_per_kib = 1024;

const char* section_name(std::uint32_t kind) {
  switch (kind) {
    case MEM_TOPOLOGY: return "MEM_TOPOLOGY";
    case IP_LAYOUT: return "IP_LAYOUT";
    case CONNECTIVITY: return "CONNECTIVITY";
    case EMBEDDED_METADATA: return "EMBEDDED_METADATA";
    default: return "section";
  }
}

const char* mem_type_name(std::uint8_t t) {
  switch (t) {
    case MEM_DDR3: return "DDR3";
    case MEM_DDR4: return "DDR4";
    case MEM_DRAM: return "DRAM";
    case MEM_STREAMING: return "STREAMING";
    case MEM_PREALLOCATED_GLOB: return "PREALLOCATED_GLOB";
    case MEM_ARE: return "ARE";
    case MEM_HBM: return "HBM";
    case MEM_BRAM: return "BRAM";
    case MEM_URAM: return "URAM";
    case MEM_STREAMING_CONNECTION: return "STREAMING_CONNECTION";
    case MEM_HOST: return "HOST";
    case MEM_PS_KERNEL: return "PS_KERNEL";
    default: return "unknown";
  }
}

bool nul_terminated(const void* p, std::size_t n) { return std::memchr(p, 0, n) != nullptr; }

[[noreturn]] void bad_xclbin(const std::string& path, const std::string& why) {
  throw error(errc::invalid_xclbin, "xclbin " + quoted(path) + ": " + why);
}

// ---- reading -------------------------------------------------------------------

std::vector<char> read_file(const std::string& path) {
  if (path.empty()) bad_xclbin(path, "no path given");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) bad_xclbin(path, std::string("cannot open: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) bad_xclbin(path, "not a regular file");
  std::vector<char> data;
  try {
    std::ifstream f(path, std::ios::binary);
    if (!f) bad_xclbin(path, std::string("cannot open: ") + std::strerror(errno));
    data.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (f.bad()) bad_xclbin(path, "read error");
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    bad_xclbin(path, std::string("read error: ") + e.what());
  }
  return data;
}

// ---- structural checks -----------------------------------------------------------

// Where the section headers start in the file.
constexpr std::size_t section_headers_at = offsetof(axlf, m_sections);

// Section kind -> (offset, size), each within the file. The first header of
// a kind wins.
using section_map = std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>>;

// What the checked axlf header says.
struct header_facts {
  std::uint64_t length;     // m_length: the bytes that are the xclbin
  std::uint32_t sections;   // m_numSections, all of whose headers fit in `length`
};

header_facts check_header(std::span<const char> data, const std::string& path) {
  const std::size_t size = data.size();
  if (size < sizeof(axlf))
    bad_xclbin(path, "truncated: " + std::to_string(size) + " bytes, an xclbin header alone has " +
                         std::to_string(sizeof(axlf)));
  axlf top;
  std::memcpy(&top, data.data(), sizeof top);
  if (std::memcmp(top.m_magic, xclbin_magic, sizeof xclbin_magic) != 0)
    bad_xclbin(path, "not an xclbin (magic is not \"xclbin2\")");
  const std::uint64_t length = top.m_header.m_length;
  if (length > size)
    bad_xclbin(path, "truncated: header says " + std::to_string(length) + " bytes, the file has " +
                         std::to_string(size));
  if (length < sizeof(axlf)) bad_xclbin(path, "corrupt: header length " + std::to_string(length));
  const std::uint32_t n = top.m_header.m_numSections;
  if (n == 0 || n > XCLBIN_MAX_NUM_SECTION) bad_xclbin(path, "corrupt: " + std::to_string(n) + " sections");
  if ((length - section_headers_at) / sizeof(axlf_section_header) < n)
    bad_xclbin(path, "truncated: " + std::to_string(n) + " section headers do not fit in " +
                         std::to_string(length) + " bytes");
  return {length, n};
}

// Reads the `n` section headers of `xclbin` (m_length bytes, header checked).
section_map read_sections(std::span<const char> xclbin, std::uint32_t n, const std::string& path) {
  const std::uint64_t length = xclbin.size();
  section_map sections;
  for (std::uint32_t i = 0; i < n; ++i) {
    axlf_section_header h;
    std::memcpy(&h, xclbin.data() + section_headers_at + i * sizeof h, sizeof h);
    if (h.m_sectionOffset > length || h.m_sectionSize > length - h.m_sectionOffset)
      bad_xclbin(path, "corrupt: section " + std::to_string(i) + " (kind " + std::to_string(h.m_sectionKind) +
                           ") spans [" + std::to_string(h.m_sectionOffset) + ", +" + std::to_string(h.m_sectionSize) +
                           ") outside the file's " + std::to_string(length) + " bytes");
    sections.emplace(h.m_sectionKind, std::make_pair(h.m_sectionOffset, h.m_sectionSize));
  }
  for (std::uint32_t k : {IP_LAYOUT, EMBEDDED_METADATA})
    if (!sections.count(k)) bad_xclbin(path, std::string("corrupt: no ") + section_name(k) + " section");
  if (sections.at(EMBEDDED_METADATA).second == 0) bad_xclbin(path, "corrupt: empty EMBEDDED_METADATA");
  return sections;
}

// The array a section holds after its `fixed` bytes (which start with an
// int32 count of `elem`-byte entries), checked to fit in the section.
struct section_array {
  const char* first;
  std::int32_t count;
};

struct section_reader {
  std::span<const char> xclbin;
  const section_map& sections;
  const std::string& path;

  bool has(std::uint32_t kind) const { return sections.count(kind) != 0; }

  section_array array(std::uint32_t kind, std::size_t fixed, std::size_t elem) const {
    auto [off, sz] = sections.at(kind);
    if (sz < fixed)
      bad_xclbin(path, std::string("corrupt: ") + section_name(kind) + " has " + std::to_string(sz) + " bytes");
    std::int32_t count;
    std::memcpy(&count, xclbin.data() + off, sizeof count);
    if (count < 0 || static_cast<std::uint64_t>(count) > (sz - fixed) / elem)
      bad_xclbin(path, std::string("corrupt: ") + section_name(kind) + " claims " + std::to_string(count) +
                           " entries in " + std::to_string(sz) + " bytes");
    return {xclbin.data() + off + fixed, count};
  }

  template <class T>
  static T entry(const section_array& a, std::int32_t i) {
    T t;
    std::memcpy(&t, a.first + i * sizeof t, sizeof t);
    return t;
  }
};

// Every tag terminated; returns the number of banks (0 without MEM_TOPOLOGY).
std::int32_t check_mem_topology(const section_reader& r) {
  if (!r.has(MEM_TOPOLOGY)) return 0;
  auto mems = r.array(MEM_TOPOLOGY, offsetof(mem_topology, m_mem_data), sizeof(mem_data));
  for (std::int32_t i = 0; i < mems.count; ++i) {
    auto m = section_reader::entry<mem_data>(mems, i);
    if (!nul_terminated(m.m_tag, sizeof m.m_tag))
      bad_xclbin(r.path, "corrupt: MEM_TOPOLOGY entry " + std::to_string(i) + " has an unterminated tag");
  }
  return mems.count;
}

// Every name terminated, kernels named kernel:instance; returns the names.
std::vector<std::string> check_ip_layout(const section_reader& r) {
  auto ips = r.array(IP_LAYOUT, offsetof(ip_layout, m_ip_data), sizeof(ip_data));
  std::vector<std::string> names;
  for (std::int32_t i = 0; i < ips.count; ++i) {
    auto ip = section_reader::entry<ip_data>(ips, i);
    if (!nul_terminated(ip.m_name, sizeof ip.m_name))
      bad_xclbin(r.path, "corrupt: IP_LAYOUT entry " + std::to_string(i) + " has an unterminated name");
    names.emplace_back(reinterpret_cast<const char*>(ip.m_name));
    if (ip.m_type == IP_KERNEL && names.back().find(':') == std::string::npos)
      bad_xclbin(r.path, "corrupt: IP_LAYOUT kernel instance \"" + names.back() + "\" is not named kernel:instance");
  }
  return names;
}

// How many <arg> elements the metadata XML has, counted in its text: no
// kernel has more arguments than that.
std::size_t metadata_arg_elements(const section_reader& r) {
  auto [off, sz] = r.sections.at(EMBEDDED_METADATA);
  const std::string_view xml(r.xclbin.data() + off, sz);
  constexpr std::string_view open = "<arg";
  std::size_t n = 0;
  for (auto at = xml.find(open); at != std::string_view::npos; at = xml.find(open, at + open.size())) {
    const auto next = at + open.size();
    if (next < xml.size() && (std::isspace(static_cast<unsigned char>(xml[next])) || xml[next] == '/' || xml[next] == '>'))
      ++n;
  }
  return n;
}

// Every connection points at an IP and a bank that exist, and at an argument
// index the metadata can have: XRT 2.13 sizes a vector by the index, so a
// huge one would allocate gigabytes (found by fuzzing: docs/RELIABILITY.md).
std::vector<connection> check_connectivity(const section_reader& r, std::int32_t ips, std::int32_t mems) {
  if (!r.has(CONNECTIVITY)) return {};
  auto conns = r.array(CONNECTIVITY, offsetof(connectivity, m_connection), sizeof(connection));
  const std::size_t args = metadata_arg_elements(r);
  std::vector<connection> out;
  for (std::int32_t i = 0; i < conns.count; ++i) {
    auto c = section_reader::entry<connection>(conns, i);
    auto entry = [&] {
      return "CONNECTIVITY entry " + std::to_string(i) + " {arg " + std::to_string(c.arg_index) + ", ip " +
             std::to_string(c.m_ip_layout_index) + ", mem " + std::to_string(c.mem_data_index) + "}";
    };
    if (c.arg_index < 0 || c.m_ip_layout_index < 0 || c.m_ip_layout_index >= ips || c.mem_data_index < 0 ||
        c.mem_data_index >= mems)
      bad_xclbin(r.path, "corrupt: " + entry() + " points outside IP_LAYOUT (" + std::to_string(ips) +
                             ") or MEM_TOPOLOGY (" + std::to_string(mems) + ")");
    if (static_cast<std::size_t>(c.arg_index) >= args)
      bad_xclbin(r.path, "corrupt: " + entry() + " names argument " + std::to_string(c.arg_index) +
                             " but EMBEDDED_METADATA declares " + std::to_string(args) + " arguments in all");
    out.push_back(c);
  }
  return out;
}

// What the structural checks leave for the check after XRT's parse.
struct structure_facts {
  std::vector<std::string> ip_names;   // IP_LAYOUT, in order
  std::vector<connection> connections;  // CONNECTIVITY, checked
};

// Checks what XRT 2.13 trusts without checking. Cuts `data` to m_length:
// anything past it (e.g. a signature) is not ours to parse.
structure_facts check_structure(std::vector<char>& data, const std::string& path) {
  const header_facts h = check_header(data, path);
  data.resize(h.length);
  const std::span<const char> xclbin(data);
  const auto sections = read_sections(xclbin, h.sections, path);
  const section_reader r{xclbin, sections, path};
  const std::int32_t mems = check_mem_topology(r);
  structure_facts f;
  f.ip_names = check_ip_layout(r);
  f.connections = check_connectivity(r, static_cast<std::int32_t>(f.ip_names.size()), mems);
  return f;
}

// Every connection of a compute unit names an argument its kernel has (XRT
// ignores the others silently, leaving that argument without its bank).
void check_connections(const xclbin_info& info, const structure_facts& f, const std::string& path) {
  for (std::size_t i = 0; i < f.connections.size(); ++i) {
    const auto& c = f.connections[i];
    const auto& ip = f.ip_names[static_cast<std::size_t>(c.m_ip_layout_index)];
    for (auto& k : info.kernels) {
      bool is_cu = std::any_of(k.compute_units.begin(), k.compute_units.end(), [&](auto& cu) { return cu.name == ip; });
      if (is_cu && static_cast<std::size_t>(c.arg_index) >= k.args.size())
        bad_xclbin(path, "corrupt: CONNECTIVITY entry " + std::to_string(i) + " names argument " +
                             std::to_string(c.arg_index) + " of compute unit " + ip + ", whose kernel " + k.name +
                             " has " + std::to_string(k.args.size()) + " arguments");
    }
  }
}

// ---- description -------------------------------------------------------------------

bool is_pointer_type(const std::string& t) { return t.find('*') != std::string::npos; }

std::vector<bank_info> describe_banks(const xrt::xclbin& x) {
  std::vector<bank_info> banks;
  for (auto& m : x.get_mems()) {
    bank_info b;
    b.index = m.get_index();
    b.tag = m.get_tag();
    b.type = mem_type_name(static_cast<std::uint8_t>(m.get_type()));
    b.used = m.get_used();
    b.base_address = m.get_base_address();
    b.size_bytes = m.get_size_kb() * bytes_per_kib;
    banks.push_back(std::move(b));
  }
  std::sort(banks.begin(), banks.end(), [](auto& a, auto& b) { return a.index < b.index; });
  return banks;
}

// XRT 2.13's xclbin::arg has no address qualifier: an argument is a buffer
// when its host type is a pointer or it is connected to memory, a scalar
// otherwise.
arg_info describe_arg(const xrt::xclbin::arg& a) {
  arg_info ai;
  ai.index = static_cast<unsigned>(a.get_index());
  ai.name = a.get_name();
  ai.type = a.get_host_type();
  ai.port = a.get_port();
  ai.offset = a.get_offset();
  ai.size = a.get_size();
  std::set<int> banks;
  for (auto& m : a.get_mems()) banks.insert(m.get_index());
  ai.banks.assign(banks.begin(), banks.end());
  ai.kind = (is_pointer_type(ai.type) || !ai.banks.empty()) ? arg_kind::buffer : arg_kind::scalar;
  ai.group_id = (ai.kind == arg_kind::buffer && !ai.banks.empty()) ? ai.banks.front() : unknown_group;
  return ai;
}

kernel_info describe_kernel(const xrt::xclbin::kernel& k, const std::string& path) {
  kernel_info ki;
  ki.name = k.get_name();
  for (auto& cu : k.get_cus()) ki.compute_units.push_back({cu.get_name(), cu.get_base_address()});
  for (auto& a : k.get_args()) ki.args.push_back(describe_arg(a));
  std::sort(ki.args.begin(), ki.args.end(), [](auto& a, auto& b) { return a.index < b.index; });
  for (std::size_t i = 0; i < ki.args.size(); ++i)
    if (ki.args[i].index != i)
      bad_xclbin(path, "corrupt: kernel " + ki.name + " argument indices are not 0.." +
                           std::to_string(ki.args.size() - 1));
  for (auto& a : ki.args)
    if (a.kind == arg_kind::scalar && a.size == 0)
      bad_xclbin(path, "corrupt: kernel " + ki.name + " scalar argument " + a.name + " has size 0");
  return ki;
}

// Kernel metadata through XRT's xclbin API.
xclbin_info describe(const xrt::xclbin& x, const std::string& path, std::size_t file_size) {
  xclbin_info info;
  info.path = path;
  info.file_size = file_size;
  info.uuid = x.get_uuid().to_string();
  try {
    info.platform = x.get_xsa_name();
  } catch (const std::exception&) {
  }
  info.banks = describe_banks(x);
  for (auto& k : x.get_kernels()) info.kernels.push_back(describe_kernel(k, path));
  std::sort(info.kernels.begin(), info.kernels.end(), [](auto& a, auto& b) { return a.name < b.name; });
  return info;
}

// `data`: a whole xclbin's bytes.
loaded_xclbin load_checked(std::vector<char> data, const std::string& path) {
  const structure_facts facts = check_structure(data, path);
  loaded_xclbin l;
  try {
    l.xclbin = xrt::xclbin(data);
    l.info = describe(l.xclbin, path, data.size());
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    bad_xclbin(path, std::string("rejected by XRT: ") + e.what());
  }
  check_connections(l.info, facts, path);
  return l;
}

}  // namespace

xclbin_info parse_xclbin(std::span<const std::byte> bytes, const std::string& name) {
  const auto* p = reinterpret_cast<const char*>(bytes.data());
  return load_checked(std::vector<char>(p, p + bytes.size()), name).info;
}

loaded_xclbin load_xclbin_file(const std::string& path) { return load_checked(read_file(path), path); }

}  // namespace detail

xclbin_info inspect_xclbin(const std::string& path) { return detail::load_xclbin_file(path).info; }

}  // namespace xrtio::xrt_backend
