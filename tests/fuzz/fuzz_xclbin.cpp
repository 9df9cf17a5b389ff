// Fuzz target: the xclbin reader (xrt_backend::detail::parse_xclbin), which
// must turn any bytes into a description or errc::invalid_xclbin naming the
// source: never a crash, a hang, a huge allocation or another error.
//
// Two kinds of input:
// - raw: bytes that start with the magic "xclbin2\0" are parsed as they are
//   (seeds: whole xclbins, which libFuzzer mutates byte by byte);
// - structured: anything else is a program of edits on a valid xclbin that
//   xrtio-mkxclbin's writer builds (vadd, the NPU layout, or two kernels
//   on three banks): header fields, section headers (kind, offset, size:
//   truncated, overlapping, past the end), element counts, every field of
//   MEM_TOPOLOGY, IP_LAYOUT and CONNECTIVITY entries (huge, negative and
//   off-by-one indices, unterminated names), the metadata XML's numbers and
//   bytes, sections dropped, duplicated or cut, and the file cut.
// An accepted xclbin is checked against its bytes (xclbin_checks.hpp).
#include <xclbin.h>

#include <array>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "description.hpp"
#include "fuzz_check.hpp"
#include "fuzz_input.hpp"
#include "presets.hpp"
#include "xclbin_checks.hpp"
#include "xclbin_image.hpp"
#include "xclbin_reader.hpp"
#include "xclbin_writer.hpp"

namespace {

using xfuzz::xclbin_image;

constexpr std::string_view source_name = "<fuzz>";
/// Edits per structured input.
constexpr unsigned max_edits = 12;

/// Two kernels, three banks (one unused), a buffer connected to two banks,
/// compute units with and without base addresses.
constexpr std::string_view two_kernels = R"(platform xrtio_fuzz_two_kernels
bank ddr0 size=256M
bank hbm1 size=256M base=0x40000000 type=HBM
bank host size=64M type=HOST unused
kernel k1
cu k1_a
cu k1_b base=0x1900000
arg x buffer float* ddr0,hbm1
arg y buffer float* hbm1
arg n scalar uint 4
arg s scalar ulong 8
kernel k2
cu k2_a
arg p buffer char* ddr0
arg q scalar uint 4
)";

const std::vector<char>& base(unsigned which) {
  static const std::array<std::vector<char>, 3> bases = [] {
    namespace mk = xrtio::mkxclbin;
    std::array<std::vector<char>, 3> b;
    const std::string_view texts[] = {mk::vadd_preset, mk::npu_preset, two_kernels};
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = mk::build_xclbin(mk::parse_description(texts[i]), texts[i], {});
    return b;
  }();
  return bases[which % bases.size()];
}

// Values that find edge cases: zero, small, off by one around `near`,
// sign and width boundaries, and anything.
std::uint64_t interesting(xfuzz::fuzz_input& in, std::uint64_t near) {
  switch (in.byte() % 12) {
    case 0: return 0;
    case 1: return 1;
    case 2: return near - 1;
    case 3: return near;
    case 4: return near + 1;
    case 5: return 0x7fffffffu;
    case 6: return 0x80000000u;
    case 7: return 0xffffffffu;
    case 8: return 0x100000000ull;
    case 9: return UINT64_MAX;
    case 10: return near + in.in_range(0, 1u << 20);
    default: return in.raw(8);
  }
}

template <class T>
void put_at(std::vector<char>& v, std::size_t at, T value) {
  if (at + sizeof value <= v.size()) std::memcpy(v.data() + at, &value, sizeof value);
}
template <class T>
T get_at(const std::vector<char>& v, std::size_t at) {
  T value{};
  if (at + sizeof value <= v.size()) std::memcpy(&value, v.data() + at, sizeof value);
  return value;
}

// The array sections: where their entries start and how big each is.
struct array_layout {
  std::uint32_t kind;
  std::size_t first, elem;
};
constexpr array_layout arrays[] = {
    {MEM_TOPOLOGY, offsetof(mem_topology, m_mem_data), sizeof(mem_data)},
    {IP_LAYOUT, offsetof(ip_layout, m_ip_data), sizeof(ip_data)},
    {CONNECTIVITY, offsetof(connectivity, m_connection), sizeof(connection)},
};

// One field of an array entry: its offset in the entry and its width.
struct field {
  std::size_t at, width;
};
field pick_field(xfuzz::fuzz_input& in, std::uint32_t kind) {
  switch (kind) {
    case MEM_TOPOLOGY: {
      constexpr field f[] = {{offsetof(mem_data, m_type), 1}, {offsetof(mem_data, m_used), 1},
                             {offsetof(mem_data, m_size), 8}, {offsetof(mem_data, m_base_address), 8},
                             {offsetof(mem_data, m_tag), 16}};
      return f[in.byte() % std::size(f)];
    }
    case IP_LAYOUT: {
      constexpr field f[] = {{offsetof(ip_data, m_type), 4}, {offsetof(ip_data, properties), 4},
                             {offsetof(ip_data, m_base_address), 8}, {offsetof(ip_data, m_name), 64}};
      return f[in.byte() % std::size(f)];
    }
    default: {
      constexpr field f[] = {{offsetof(connection, arg_index), 4}, {offsetof(connection, m_ip_layout_index), 4},
                             {offsetof(connection, mem_data_index), 4}};
      return f[in.byte() % std::size(f)];
    }
  }
}

// An edit of an array section: its count, or one field of one entry
// (a name or tag overwritten without its terminator, or with no colon).
void edit_array(xfuzz::fuzz_input& in, xclbin_image& img) {
  const auto& a = arrays[in.byte() % std::size(arrays)];
  auto* s = img.find(a.kind);
  if (!s) return;
  const auto count = get_at<std::int32_t>(s->data, 0);
  if (in.flag()) {
    put_at(s->data, 0, static_cast<std::int32_t>(interesting(in, static_cast<std::uint64_t>(count))));
    return;
  }
  const std::size_t entry = in.in_range(0, count > 0 ? static_cast<std::uint64_t>(count) : 0);
  const field f = pick_field(in, a.kind);
  const std::size_t at = a.first + entry * a.elem + f.at;
  if (f.width > 8) {  // a string field
    const char fill = in.flag() ? 'A' : static_cast<char>(in.byte());
    for (std::size_t i = 0; i < f.width; ++i) put_at(s->data, at + i, fill);
    return;
  }
  const std::uint64_t v = interesting(in, f.width == 1   ? get_at<std::uint8_t>(s->data, at)
                                          : f.width == 4 ? get_at<std::uint32_t>(s->data, at)
                                                         : get_at<std::uint64_t>(s->data, at));
  if (f.width == 1) put_at(s->data, at, static_cast<std::uint8_t>(v));
  else if (f.width == 4) put_at(s->data, at, static_cast<std::uint32_t>(v));
  else put_at(s->data, at, v);
}

// An edit of the metadata XML: its n-th number replaced, a byte changed,
// inserted or removed, or a stretch duplicated.
void edit_xml(xfuzz::fuzz_input& in, xclbin_image& img) {
  auto* s = img.find(EMBEDDED_METADATA);
  if (!s || s->data.empty()) return;
  auto& x = s->data;
  switch (in.byte() % 4) {
    case 0: {  // the n-th run of digits (decimal, or after 0x) becomes another number
      std::vector<std::pair<std::size_t, std::size_t>> numbers;
      for (std::size_t i = 0; i < x.size();) {
        if (std::isxdigit(static_cast<unsigned char>(x[i])) && i > 0 && (x[i - 1] == '"' || x[i - 1] == 'x')) {
          std::size_t j = i;
          while (j < x.size() && std::isxdigit(static_cast<unsigned char>(x[j]))) ++j;
          numbers.emplace_back(i, j);
          i = j;
        } else {
          ++i;
        }
      }
      if (numbers.empty()) return;
      auto [b, e] = numbers[in.in_range(0, numbers.size() - 1)];
      const std::string v = in.flag() ? std::to_string(interesting(in, 0))
                                      : std::to_string(static_cast<std::int64_t>(interesting(in, 0)));
      x.erase(x.begin() + static_cast<std::ptrdiff_t>(b), x.begin() + static_cast<std::ptrdiff_t>(e));
      x.insert(x.begin() + static_cast<std::ptrdiff_t>(b), v.begin(), v.end());
      return;
    }
    case 1: x[in.in_range(0, x.size() - 1)] = static_cast<char>(in.byte()); return;
    case 2:
      if (in.flag()) x.insert(x.begin() + static_cast<std::ptrdiff_t>(in.in_range(0, x.size())), static_cast<char>(in.byte()));
      else x.erase(x.begin() + static_cast<std::ptrdiff_t>(in.in_range(0, x.size() - 1)));
      return;
    default: {
      const std::size_t b = in.in_range(0, x.size() - 1);
      const std::size_t n = in.in_range(1, std::min<std::size_t>(512, x.size() - b));
      const std::vector<char> dup(x.begin() + static_cast<std::ptrdiff_t>(b), x.begin() + static_cast<std::ptrdiff_t>(b + n));
      x.insert(x.begin() + static_cast<std::ptrdiff_t>(in.in_range(0, x.size())), dup.begin(), dup.end());
      return;
    }
  }
}

// Whole sections: dropped, duplicated, cut, grown, moved, re-kinded.
void edit_sections(xfuzz::fuzz_input& in, xclbin_image& img) {
  if (img.sections.empty()) return;
  const std::size_t i = in.in_range(0, img.sections.size() - 1);
  auto& s = img.sections[i];
  switch (in.byte() % 6) {
    case 0: img.sections.erase(img.sections.begin() + static_cast<std::ptrdiff_t>(i)); return;
    case 1: img.sections.insert(img.sections.begin() + static_cast<std::ptrdiff_t>(in.in_range(0, img.sections.size())), s); return;
    case 2: s.data.resize(in.in_range(0, s.data.size())); return;
    case 3: s.data.resize(s.data.size() + in.in_range(1, 256), static_cast<char>(in.byte())); return;
    case 4: std::swap(s, img.sections[in.in_range(0, img.sections.size() - 1)]); return;
    default: s.header.m_sectionKind = static_cast<std::uint32_t>(interesting(in, s.header.m_sectionKind)); return;
  }
}

// Edits of the assembled file: header fields, section headers, the length.
void edit_file(xfuzz::fuzz_input& in, std::vector<char>& f) {
  const auto nsec = get_at<std::uint32_t>(f, offsetof(axlf, m_header) + offsetof(axlf_header, m_numSections));
  switch (in.byte() % 6) {
    case 0: {  // m_length
      const std::size_t at = offsetof(axlf, m_header) + offsetof(axlf_header, m_length);
      put_at(f, at, interesting(in, get_at<std::uint64_t>(f, at)));
      return;
    }
    case 1: {  // m_numSections
      const std::size_t at = offsetof(axlf, m_header) + offsetof(axlf_header, m_numSections);
      put_at(f, at, static_cast<std::uint32_t>(interesting(in, nsec)));
      return;
    }
    case 2:
    case 3: {  // a section header's offset or size (overlapping, past the end, wrapping)
      const std::size_t h = xfuzz::section_headers_at + in.in_range(0, nsec) * sizeof(axlf_section_header);
      const std::size_t at = h + (in.flag() ? offsetof(axlf_section_header, m_sectionOffset)
                                            : offsetof(axlf_section_header, m_sectionSize));
      const std::uint64_t other = get_at<std::uint64_t>(
          f, xfuzz::section_headers_at + in.in_range(0, nsec) * sizeof(axlf_section_header) +
                 offsetof(axlf_section_header, m_sectionOffset));
      put_at(f, at, in.flag() ? interesting(in, get_at<std::uint64_t>(f, at)) : interesting(in, other));
      return;
    }
    case 4: f.resize(in.in_range(0, f.size())); return;  // cut
    default:  // any byte of the header
      if (!f.empty()) f[in.in_range(0, std::min(f.size(), sizeof(axlf)) - 1)] = static_cast<char>(in.byte());
      return;
  }
}

std::vector<char> structured(xfuzz::fuzz_input& in) {
  auto img = xclbin_image::split(base(in.byte()));
  std::vector<char> file;
  bool assembled = false;
  for (unsigned i = 0; i < max_edits && !in.empty(); ++i) {
    const unsigned op = in.byte() % 4;
    if (op == 3) {  // from here on, edits of the assembled file
      if (!assembled) file = img.assemble(), assembled = true;
      edit_file(in, file);
    } else if (!assembled) {
      if (op == 0) edit_array(in, img);
      else if (op == 1) edit_xml(in, img);
      else edit_sections(in, img);
    }
  }
  return assembled ? file : img.assemble();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static constexpr char magic[] = "xclbin2";  // with its NUL: 8 bytes
  std::vector<char> file;
  if (size >= sizeof magic && std::memcmp(data, magic, sizeof magic) == 0) {
    file.assign(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size);
  } else {
    xfuzz::fuzz_input in({data, size});
    file = structured(in);
  }
  const std::string name(source_name);
  try {
    auto info = xrtio::xrt_backend::detail::parse_xclbin(std::as_bytes(std::span<const char>(file)), name);
    xfuzz::check_accepted(file, info, name);
  } catch (const xrtio::error& e) {
    xfuzz::check_refusal(e, name);
  } catch (const std::exception& e) {
    XFUZZ_CHECK(false, std::string("an exception other than xrtio::error: ") + e.what());
  }
  return 0;
}
