#include "kernel_job.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>

namespace server {
namespace {

static_assert(std::endian::native == std::endian::little, "bodies are little-endian and copied as they are");

refusal bad(std::string text) { return {400, std::move(text) + "\n"}; }

std::optional<std::uint32_t> parse_u32(std::string_view s) {
  std::uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<float> parse_float(std::string_view s) {
  float v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// `bytes` rounded up to a whole number of granules (at least one: a buffer cannot be empty).
std::size_t granules(std::size_t bytes, std::size_t granule) {
  return std::max<std::size_t>(1, (bytes + granule - 1) / granule) * granule;
}

// A buffer holding `data`.
xrtio::buffer upload(xrtio::context& ctx, std::string_view data, std::size_t granule) {
  auto b = ctx.alloc(granules(data.size(), granule));
  if (!data.empty()) b.write(std::as_bytes(std::span(data.data(), data.size())));
  return b;
}

}  // namespace

std::optional<std::string_view> query_param(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    auto amp = query.find('&');
    auto item = query.substr(0, amp);
    auto eq = item.find('=');
    if (item.substr(0, eq) == key) return eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1);
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

std::variant<kernel_job, refusal> kernel_job::make(const kernel_set& kernels, xrtio::context& ctx,
                                                   std::string_view name, std::string_view query,
                                                   std::string_view body) {
  kernel_job j;
  std::size_t out_bytes = 0;
  std::string_view a, b;
  auto size_text = std::to_string(body.size());
  if (name == "vadd") {
    if (body.empty() || body.size() % 8 != 0)
      return bad("vadd: the body has " + size_text +
                 " bytes; it must be two u32 arrays a and b of equal length (a non-zero multiple of 8 bytes)");
    j.kind_ = kind::vadd;
    j.kernel_ = kernels.vadd;
    j.n_ = static_cast<std::uint32_t>(body.size() / 8);
    a = body.substr(0, body.size() / 2);
    b = body.substr(body.size() / 2);
    out_bytes = a.size();
  } else if (name == "scale") {
    if (body.empty() || body.size() % 4 != 0)
      return bad("scale: the body has " + size_text + " bytes; it must be an f32 array (a non-zero multiple of 4 bytes)");
    auto f = query_param(query, "factor");
    if (f) {
      auto v = parse_float(*f);
      if (!v) return bad("scale: factor=" + std::string(*f) + " is not a number");
      j.factor_ = *v;
    }
    j.kind_ = kind::scale;
    j.kernel_ = kernels.scale;
    j.n_ = static_cast<std::uint32_t>(body.size() / 4);
    a = body;
    out_bytes = body.size();
  } else if (name == "matmul") {
    std::uint32_t dims[3];
    const char* names[3] = {"m", "n", "k"};
    for (int i = 0; i < 3; ++i) {
      auto p = query_param(query, names[i]);
      auto v = p ? parse_u32(*p) : std::nullopt;
      if (!v || *v == 0) return bad(std::string("matmul: query parameter ") + names[i] + " must be a positive integer");
      dims[i] = *v;
    }
    auto [m, n, k] = dims;
    // u32 dimensions: 4 * m * k can reach 2^66. A wrapped product (m = n =
    // k = 2^31 made both 0) let an empty body through to a run that failed
    // (500 instead of 400; found by a helper's audit).
    std::uint64_t a_bytes = 0, b_bytes = 0, sum = 0;
    if (__builtin_mul_overflow(4ull * m, std::uint64_t{k}, &a_bytes) ||
        __builtin_mul_overflow(4ull * k, std::uint64_t{n}, &b_bytes) || __builtin_add_overflow(a_bytes, b_bytes, &sum))
      return bad("matmul: m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                 " needs a body of more than 2^64 bytes");
    if (body.size() != sum)
      return bad("matmul: m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                 " needs a body of " + std::to_string(a_bytes + b_bytes) + " bytes (a: " + std::to_string(a_bytes) +
                 " + b: " + std::to_string(b_bytes) + "), got " + size_text);
    j.kind_ = kind::matmul;
    j.kernel_ = kernels.matmul;
    j.m_ = m;
    j.n_ = n;
    j.k_ = k;
    a = body.substr(0, a_bytes);
    b = body.substr(a_bytes);
    out_bytes = 4ull * m * n;
  } else if (name == "checksum") {
    j.kind_ = kind::checksum;
    j.kernel_ = kernels.checksum;
    j.n_ = static_cast<std::uint32_t>(body.size());
    a = body;
    out_bytes = 8;
  } else {
    return refusal{404, "no kernel named '" + std::string(name) + "'\n"};
  }
  auto budget = ctx.budget();
  auto g = kernels.alloc_granule;
  std::size_t need = granules(a.size(), g) + (b.empty() ? 0 : granules(b.size(), g)) + granules(out_bytes, g);
  if (budget && need > budget->ceiling())
    return refusal{413, std::string(name) + ": needs " + std::to_string(need) + " bytes of device memory, over the " +
                            std::to_string(budget->ceiling()) + "-byte budget\n"};
  try {
    j.a_ = upload(ctx, a, g);
    if (!b.empty()) j.b_ = upload(ctx, b, g);
    j.out_ = ctx.alloc(granules(out_bytes, g));
    j.out_bytes_ = out_bytes;
  } catch (const xrtio::error& e) {
    if (e.code() == xrtio::errc::budget_exceeded) return refusal{503, std::string(e.what()) + "\n", true};
    throw;
  }
  return j;
}

void kernel_job::read_result(std::string& into) const {
  into.resize(out_bytes_);
  out_.read(std::as_writable_bytes(std::span(into.data(), into.size())));
}

}  // namespace server
