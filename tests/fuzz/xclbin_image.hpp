// An xclbin taken apart for editing: the axlf header and each section's
// header and bytes, put back together with fresh offsets and lengths (what a
// structure-aware fuzz target mutates), and bounds-checked section lookup
// in arbitrary bytes (what its checks read back).
#pragma once

#include <xclbin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

namespace xfuzz {

/// Where the section headers start: axlf's inline m_sections.
inline constexpr std::size_t section_headers_at = offsetof(axlf, m_sections);
/// Sections start 8-byte aligned (as xrtio-mkxclbin and Vitis write them).
inline constexpr std::size_t section_alignment = 8;

struct xclbin_image {
  struct section {
    axlf_section_header header;  // kind and name kept; offset and size set by assemble()
    std::vector<char> data;
  };
  std::vector<char> head;  // bytes [0, section_headers_at)
  std::vector<section> sections;

  /// Takes apart a well-formed xclbin (one xrtio-mkxclbin wrote).
  static xclbin_image split(std::span<const char> file) {
    xclbin_image img;
    img.head.assign(file.begin(), file.begin() + section_headers_at);
    axlf top;
    std::memcpy(&top, file.data(), sizeof top);
    for (std::uint32_t i = 0; i < top.m_header.m_numSections; ++i) {
      section s;
      std::memcpy(&s.header, file.data() + section_headers_at + i * sizeof s.header, sizeof s.header);
      s.data.assign(file.begin() + static_cast<std::ptrdiff_t>(s.header.m_sectionOffset),
                    file.begin() + static_cast<std::ptrdiff_t>(s.header.m_sectionOffset + s.header.m_sectionSize));
      img.sections.push_back(std::move(s));
    }
    return img;
  }

  /// Header, section headers, then each section at the next aligned offset;
  /// m_length is the total and m_numSections the count.
  std::vector<char> assemble() const {
    auto align = [](std::size_t v) { return (v + section_alignment - 1) & ~(section_alignment - 1); };
    std::size_t pos = align(section_headers_at + sections.size() * sizeof(axlf_section_header));
    std::vector<axlf_section_header> headers;
    for (auto& s : sections) {
      auto h = s.header;
      h.m_sectionOffset = pos;
      h.m_sectionSize = s.data.size();
      headers.push_back(h);
      pos = align(pos + s.data.size());
    }
    // At least a whole axlf, whose inline first section header counts
    // even when there are no sections.
    std::vector<char> out(std::max(pos, sizeof(axlf)), 0);
    std::memcpy(out.data(), head.data(), head.size());
    for (std::size_t i = 0; i < headers.size(); ++i) {
      std::memcpy(out.data() + section_headers_at + i * sizeof(axlf_section_header), &headers[i], sizeof headers[i]);
      if (!sections[i].data.empty())
        std::memcpy(out.data() + headers[i].m_sectionOffset, sections[i].data.data(), sections[i].data.size());
    }
    axlf top;
    std::memcpy(&top, out.data(), sizeof top);
    top.m_header.m_length = out.size();
    top.m_header.m_numSections = static_cast<std::uint32_t>(sections.size());
    std::memcpy(out.data(), &top, section_headers_at);
    return out;
  }

  section* find(std::uint32_t kind) {
    for (auto& s : sections)
      if (s.header.m_sectionKind == kind) return &s;
    return nullptr;
  }
};

/// The first section of `kind` in `file` (as its header's m_length and
/// m_numSections bound it), or nullopt when absent or out of bounds.
inline std::optional<std::span<const char>> find_section(std::span<const char> file, std::uint32_t kind) {
  if (file.size() < sizeof(axlf)) return std::nullopt;
  axlf top;
  std::memcpy(&top, file.data(), sizeof top);
  const std::uint64_t length = std::min<std::uint64_t>(top.m_header.m_length, file.size());
  for (std::uint64_t i = 0; i < top.m_header.m_numSections; ++i) {
    const std::uint64_t at = section_headers_at + i * sizeof(axlf_section_header);
    if (at + sizeof(axlf_section_header) > length) return std::nullopt;
    axlf_section_header h;
    std::memcpy(&h, file.data() + at, sizeof h);
    if (h.m_sectionKind != kind) continue;
    if (h.m_sectionOffset > length || h.m_sectionSize > length - h.m_sectionOffset) return std::nullopt;
    return file.subspan(h.m_sectionOffset, h.m_sectionSize);
  }
  return std::nullopt;
}

}  // namespace xfuzz
