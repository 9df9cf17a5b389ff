// One request for a kernel run, checked and in device buffers: what the
// endpoints /v1/vadd, /v1/scale, /v1/matmul and /v1/checksum take, and the
// argument list each kernel is called with. The same jobs serve the xrtio
// server and the baseline, so they differ only in how they wait for a run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "xrtio/xrtio.hpp"

namespace server {

/// The kernels the endpoints run, resolved once at start-up.
struct kernel_set {
  xrtio::kernel vadd, scale, matmul, checksum;
  /// Buffer sizes are rounded up to a multiple of this: XRT allocates its
  /// buffers with aligned_alloc(4096, size), which wants whole pages
  /// (docs/DESIGN.md, pitfalls); the simulator takes any size.
  std::size_t alloc_granule = 1;
};

/// An answer that is not a kernel's result: an HTTP status and a text body.
struct refusal {
  int status;
  std::string text;
  bool retry_after = false;  ///< 503 with Retry-After
};

class kernel_job {
 public:
  enum class kind { vadd, scale, matmul, checksum };

  /// Checks `body` (and `query`) for the kernel named `name` (the path's last
  /// segment) and copies it into buffers of `ctx`. A refusal: 404 (no such
  /// kernel), 400 (malformed parameters; wrong sizes, naming them),
  /// 413 (buffers larger than the whole budget), 503 (the budget is full now).
  static std::variant<kernel_job, refusal> make(const kernel_set& kernels, xrtio::context& ctx, std::string_view name,
                                                std::string_view query, std::string_view body);

  /// Calls f(kernel, arguments...) with the kernel's argument list; returns what f returns.
  template <class F>
  decltype(auto) with_arguments(F&& f) const {
    switch (kind_) {
      case kind::vadd: return f(kernel_, xrtio::in(a_), xrtio::in(b_), xrtio::out(out_), n_);
      case kind::scale: return f(kernel_, xrtio::in(a_), xrtio::out(out_), factor_, n_);
      case kind::matmul: return f(kernel_, xrtio::in(a_), xrtio::in(b_), xrtio::out(out_), m_, n_, k_);
      case kind::checksum: break;
    }
    return f(kernel_, xrtio::in(a_), xrtio::out(out_), n_);
  }

  /// The result's bytes (little-endian, as the device wrote them).
  void read_result(std::string& into) const;

 private:
  kernel_job() = default;
  kind kind_ = kind::vadd;
  xrtio::kernel kernel_;
  xrtio::buffer a_, b_, out_;
  std::size_t out_bytes_ = 0;  ///< the result's size (the buffer may be larger: alloc_granule)
  std::uint32_t m_ = 0, n_ = 0, k_ = 0;
  float factor_ = 1.0f;
};

/// The value of query parameter `key` ("" if absent).
std::optional<std::string_view> query_param(std::string_view query, std::string_view key);

}  // namespace server
