// The whole xclbin: the axlf header, the section headers and the sections,
// as XRT 2.13 loads them (docs/DESIGN.md, "Testing without hardware: the no-op device").
#include "xclbin_writer.hpp"

#include <xclbin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>

#include "metadata_xml.hpp"
#include "sections.hpp"
#include "uuid.hpp"

namespace xrtio::mkxclbin {
namespace {

/// XRT expects every section to start 8-byte aligned.
constexpr std::size_t section_alignment = 8;
/// The xclbin format version written: that of XRT 2.13, the oldest XRT this
/// tool's output is checked against.
constexpr std::uint8_t version_major = 2, version_minor = 13;
constexpr std::uint16_t version_patch = 0;
/// m_signature_length of an unsigned xclbin.
constexpr std::int32_t no_signature = -1;
/// axlf's reserved bytes and key block hold 0xFF when unused (xclbin.h).
constexpr int unused_fill = 0xff;
/// A fixed timestamp, so the same description gives the same bytes.
constexpr std::uint64_t reproducible_timestamp = 0;
/// The header's section headers start at axlf::m_sections, inline.
constexpr std::size_t section_headers_at = offsetof(axlf, m_sections);

static_assert(sizeof(axlf_header::uuid) == std::tuple_size_v<xclbin_uuid>);

// One section: its kind, its name in the section header, its bytes.
struct section {
  std::uint32_t kind;
  const char* name;
  std::vector<char> data;
};

std::size_t align(std::size_t v) { return (v + section_alignment - 1) & ~(section_alignment - 1); }

// The section headers, with the sections placed one after another from the
// first aligned offset after the headers.
std::vector<axlf_section_header> section_headers(const std::vector<section>& secs) {
  std::vector<axlf_section_header> hdrs;
  std::size_t pos = align(section_headers_at + secs.size() * sizeof(axlf_section_header));
  for (auto& s : secs) {
    axlf_section_header h;
    std::memset(&h, 0, sizeof h);
    h.m_sectionKind = s.kind;
    std::strncpy(h.m_sectionName, s.name, sizeof h.m_sectionName - 1);
    h.m_sectionOffset = pos;
    h.m_sectionSize = s.data.size();
    hdrs.push_back(h);
    pos = align(pos + s.data.size());
  }
  return hdrs;
}

axlf top_header(const std::string& platform, const xclbin_uuid& uuid, std::size_t total, std::size_t nsec) {
  axlf top;
  std::memset(&top, 0, sizeof top);
  std::memcpy(top.m_magic, "xclbin2", sizeof top.m_magic);
  top.m_signature_length = no_signature;
  std::memset(top.reserved, unused_fill, sizeof top.reserved);
  std::memset(top.m_keyBlock, unused_fill, sizeof top.m_keyBlock);
  top.m_uniqueId = 0;
  top.m_header.m_length = total;
  top.m_header.m_timeStamp = reproducible_timestamp;
  top.m_header.m_versionMajor = version_major;
  top.m_header.m_versionMinor = version_minor;
  top.m_header.m_versionPatch = version_patch;
  top.m_header.m_mode = XCLBIN_FLAT;
  std::memcpy(top.m_header.m_platformVBNV, platform.c_str(), platform.size() + 1);
  std::memcpy(top.m_header.uuid, uuid.data(), uuid.size());
  top.m_header.m_numSections = static_cast<std::uint32_t>(nsec);
  return top;
}

// The file: header up to its inline m_sections[0], then the section headers,
// then each section at its offset, zero padding between.
std::vector<char> assemble(const std::string& platform, const xclbin_uuid& uuid, const std::vector<section>& secs) {
  auto hdrs = section_headers(secs);
  const std::size_t total = align(hdrs.back().m_sectionOffset + hdrs.back().m_sectionSize);
  axlf top = top_header(platform, uuid, total, secs.size());
  std::vector<char> out(total, 0);
  std::memcpy(out.data(), &top, section_headers_at);
  for (std::size_t i = 0; i < secs.size(); ++i) {
    std::memcpy(out.data() + section_headers_at + i * sizeof(axlf_section_header), &hdrs[i], sizeof hdrs[i]);
    std::memcpy(out.data() + hdrs[i].m_sectionOffset, secs[i].data.data(), secs[i].data.size());
  }
  return out;
}

}  // namespace

std::vector<char> build_xclbin(const description& d, std::string_view text,
                               const std::optional<std::string>& uuid_override) {
  auto mem = mem_topology_section(d);
  auto ips = layout_compute_units(d);
  std::vector<section> secs;
  secs.push_back({MEM_TOPOLOGY, "MEM_TOPOLOGY", std::move(mem)});
  secs.push_back({IP_LAYOUT, "IP_LAYOUT", ip_layout_section(ips)});
  secs.push_back({CONNECTIVITY, "CONNECTIVITY", connectivity_section(d, ips)});
  secs.push_back({EMBEDDED_METADATA, "METADATA", embedded_metadata_section(d)});
  return assemble(d.platform, choose_uuid(d, text, uuid_override), secs);
}

}  // namespace xrtio::mkxclbin
