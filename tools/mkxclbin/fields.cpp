// The description's field syntax: numbers and sizes, names, bank types and
// comma lists.
#include "fields.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>

namespace xrtio::mkxclbin {
namespace {

/// Size suffixes are binary units: K = 2^10, M = 2^20, G = 2^30.
constexpr std::uint64_t kib = 1ull << 10;
constexpr std::uint64_t mib = 1ull << 20;
constexpr std::uint64_t gib = 1ull << 30;

// The multiplier `body`'s last character stands for (1 without a suffix),
// which is then cut off.
std::uint64_t take_suffix(std::string& body) {
  char last = static_cast<char>(std::toupper(static_cast<unsigned char>(body.back())));
  std::uint64_t mult = 1;
  if (last == 'K') mult = kib;
  if (last == 'M') mult = mib;
  if (last == 'G') mult = gib;
  if (mult != 1) body.pop_back();
  return mult;
}

}  // namespace

bad_input at_line(int line, const std::string& why) { return bad_input("line " + std::to_string(line) + ": " + why); }

std::uint64_t parse_number(const std::string& s, bool allow_suffix, int line) {
  if (s.empty()) throw at_line(line, "empty number");
  std::string body = s;
  std::uint64_t mult = allow_suffix ? take_suffix(body) : 1;
  std::size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(body, &used, 0);  // base 0: decimal, or hex after 0x
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != body.size() || body.empty() || body[0] == '-') throw at_line(line, "not a number: \"" + s + "\"");
  if (v > UINT64_MAX / mult) throw at_line(line, "number too large: " + s);
  return v * mult;
}

std::uint8_t parse_mem_type(const std::string& s, int line) {
  static const std::map<std::string, std::uint8_t> types = {
      {"DDR3", MEM_DDR3}, {"DDR4", MEM_DDR4}, {"DRAM", MEM_DRAM}, {"HBM", MEM_HBM},
      {"HOST", MEM_HOST}, {"BRAM", MEM_BRAM}, {"URAM", MEM_URAM}};
  auto it = types.find(s);
  if (it == types.end()) throw at_line(line, "unknown bank type \"" + s + "\"");
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

bool printable(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '!' && c <= '~'; });
}

bool valid_identifier(const std::string& s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace xrtio::mkxclbin
