// The xclbin's uuid: parsed from text, or derived from the description text.
#include "uuid.hpp"

#include <cstddef>
#include <cstdint>
#include <tuple>

namespace xrtio::mkxclbin {
namespace {

/// FNV-1a 64's offset basis and prime.
constexpr std::uint64_t fnv_offset_basis = 0xcbf29ce484222325ull;
constexpr std::uint64_t fnv_prime = 0x100000001b3ull;
/// The second hash's seed: the offset basis with its halves swapped, so the
/// two hashes differ from the first byte on.
constexpr std::uint64_t second_seed = 0x84222325cbf29ce4ull;
/// The second hash also folds its high bits down after each byte, so it is
/// not a function of the first.
constexpr unsigned second_fold_shift = 29;
/// RFC 4122 layout: version 5 (name-based) in byte 6's high nibble and the
/// variant 10xxxxxx in byte 8.
constexpr unsigned char version_mask = 0x0f, version_bits = 0x50;
constexpr unsigned char variant_mask = 0x3f, variant_bits = 0x80;
constexpr std::size_t version_byte = 6, variant_byte = 8;
/// A uuid is written as two hex digits a byte: 32 in all.
constexpr std::size_t hex_digits_per_byte = 2;
constexpr std::size_t uuid_hex_digits = hex_digits_per_byte * std::tuple_size_v<xclbin_uuid>;

}  // namespace

xclbin_uuid derive_uuid(std::string_view text) {
  xclbin_uuid u{};
  std::uint64_t h1 = fnv_offset_basis, h2 = second_seed;
  for (unsigned char c : text) {
    h1 = (h1 ^ c) * fnv_prime;
    h2 = (h2 ^ c) * fnv_prime;
    h2 ^= h2 >> second_fold_shift;
  }
  // h1 fills the first half and h2 the second, each little-endian.
  constexpr std::size_t half = std::tuple_size_v<xclbin_uuid> / 2;
  for (std::size_t i = 0; i < half; ++i) {
    u[i] = static_cast<unsigned char>(h1 >> (8 * i));
    u[half + i] = static_cast<unsigned char>(h2 >> (8 * i));
  }
  u[version_byte] = static_cast<unsigned char>((u[version_byte] & version_mask) | version_bits);
  u[variant_byte] = static_cast<unsigned char>((u[variant_byte] & variant_mask) | variant_bits);
  return u;
}

xclbin_uuid parse_uuid(const std::string& s) {
  std::string hex;
  for (char c : s)
    if (c != '-') hex += c;
  if (hex.size() != uuid_hex_digits || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    throw bad_input("uuid \"" + s + "\" is not " + std::to_string(uuid_hex_digits) + " hex digits");
  xclbin_uuid u{};
  for (std::size_t i = 0; i < u.size(); ++i)
    u[i] = static_cast<unsigned char>(
        std::stoi(hex.substr(hex_digits_per_byte * i, hex_digits_per_byte), nullptr, 16));
  return u;
}

xclbin_uuid choose_uuid(const description& d, std::string_view text, const std::optional<std::string>& override) {
  if (override) return parse_uuid(*override);
  if (d.uuid) return parse_uuid(*d.uuid);
  return derive_uuid(text);
}

}  // namespace xrtio::mkxclbin
