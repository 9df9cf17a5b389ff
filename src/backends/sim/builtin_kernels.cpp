// The simulated device's stock kernels: real computations on buffer memory.
#include <algorithm>
#include <limits>
#include <chrono>
#include <cstdint>
#include <thread>
#include <string>

#include "xrtio/sim.hpp"

namespace xrtio::sim {
namespace {
using backend::arg_desc;
using backend::arg_kind;

arg_desc buf(std::string name) { return {std::move(name), arg_kind::buffer, 0, 0}; }
template <class T>
arg_desc scalar(std::string name) {
  return {std::move(name), arg_kind::scalar, sizeof(T), 0};
}

// A kernel whose arguments do not fit its buffers ends in ERROR, as a real
// kernel reading past its buffer would fault.
bool fits(kernel_call& c, unsigned arg, std::uint64_t bytes) {
  if (c.buffer(arg).size() < bytes) {
    c.fail("buffer too small");
    return false;
  }
  return true;
}

// Every whole u64 of `words` equals `v`.
bool all_equal(std::span<std::uint64_t> words, std::uint64_t v) {
  for (auto w : words)
    if (w != v) return false;
  return true;
}

/// Steps of the hold and late waits: short, so an abort is seen promptly.
constexpr auto late_marker_step = std::chrono::microseconds(50);

// The lease canary (sim.hpp, late_marker).
void late_marker(kernel_call& c) {
  auto words = c.buffer_as<std::uint64_t>(0);
  auto expect = c.scalar<std::uint64_t>(1), marker = c.scalar<std::uint64_t>(2);
  auto hold = std::chrono::microseconds(c.scalar<std::uint32_t>(3));
  auto late = std::chrono::microseconds(c.scalar<std::uint32_t>(4));
  if (!all_equal(words, expect)) return c.fail("late_marker: the buffer does not hold what the host wrote");
  for (auto& w : words) w = marker;
  auto until = std::chrono::steady_clock::now() + hold;
  while (!c.stop_requested() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(late_marker_step,
                                                                             until - std::chrono::steady_clock::now()));
  bool intact = all_equal(words, marker);
  if (c.stop_requested()) {
    std::this_thread::sleep_for(late);
    intact = intact && all_equal(words, marker);
    for (auto& w : words) w = marker;  // the late write
  }
  if (!intact) c.fail("late_marker: the buffer was written by someone else while leased");
}
}  // namespace

std::vector<kernel_def> builtin_kernels() {
  std::vector<kernel_def> k;
  k.push_back({"vadd", {buf("a"), buf("b"), buf("c"), scalar<std::uint32_t>("n")}, [](kernel_call& c) {
                 auto n = c.scalar<std::uint32_t>(3);
                 std::uint64_t bytes = std::uint64_t{n} * 4;
                 if (!fits(c, 0, bytes) || !fits(c, 1, bytes) || !fits(c, 2, bytes)) return;
                 auto a = c.buffer_as<std::uint32_t>(0), b = c.buffer_as<std::uint32_t>(1);
                 auto out = c.buffer_as<std::uint32_t>(2);
                 for (std::uint32_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
               }});
  k.push_back({"scale", {buf("in"), buf("out"), scalar<float>("factor"), scalar<std::uint32_t>("n")},
               [](kernel_call& c) {
                 auto f = c.scalar<float>(2);
                 auto n = c.scalar<std::uint32_t>(3);
                 std::uint64_t bytes = std::uint64_t{n} * 4;
                 if (!fits(c, 0, bytes) || !fits(c, 1, bytes)) return;
                 auto in = c.buffer_as<float>(0);
                 auto out = c.buffer_as<float>(1);
                 for (std::uint32_t i = 0; i < n; ++i) out[i] = in[i] * f;
               }});
  k.push_back({"checksum", {buf("in"), buf("out"), scalar<std::uint32_t>("n")}, [](kernel_call& c) {
                 auto n = c.scalar<std::uint32_t>(2);
                 if (!fits(c, 0, n) || !fits(c, 1, 8)) return;
                 auto in = c.buffer(0);
                 std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
                 for (std::uint32_t i = 0; i < n; ++i) {
                   h ^= static_cast<std::uint8_t>(in[i]);
                   h *= 0x100000001b3ull;
                 }
                 c.buffer_as<std::uint64_t>(1)[0] = h;
               }});
  k.push_back({"matmul",
               {buf("a"), buf("b"), buf("c"), scalar<std::uint32_t>("m"), scalar<std::uint32_t>("n"),
                scalar<std::uint32_t>("k")},
               [](kernel_call& c) {
                 std::uint64_t m = c.scalar<std::uint32_t>(3), n = c.scalar<std::uint32_t>(4),
                               kk = c.scalar<std::uint32_t>(5);
                 // u32 dimensions: m * kk * 4 can reach 2^66 and wrap, and a
                 // wrapped size passed the check (a read far past a 4-byte
                 // buffer; found by a helper's audit). A size that does not
                 // fit in 64 bits fits no buffer.
                 auto bytes = [](std::uint64_t x, std::uint64_t y) {
                   std::uint64_t r;
                   return __builtin_mul_overflow(x, y, &r) || __builtin_mul_overflow(r, std::uint64_t{4}, &r)
                              ? std::numeric_limits<std::uint64_t>::max()
                              : r;
                 };
                 if (!fits(c, 0, bytes(m, kk)) || !fits(c, 1, bytes(kk, n)) || !fits(c, 2, bytes(m, n))) return;
                 auto a = c.buffer_as<float>(0), b = c.buffer_as<float>(1);
                 auto out = c.buffer_as<float>(2);
                 for (std::uint64_t i = 0; i < m; ++i)
                   for (std::uint64_t j = 0; j < n; ++j) {
                     float s = 0;
                     for (std::uint64_t p = 0; p < kk; ++p) s += a[i * kk + p] * b[p * n + j];
                     out[i * n + j] = s;
                   }
               }});
  k.push_back({"noop", {}, [](kernel_call&) {}});
  k.push_back({"late_marker",
               {buf("buf"), scalar<std::uint64_t>("expect"), scalar<std::uint64_t>("marker"),
                scalar<std::uint32_t>("hold_us"), scalar<std::uint32_t>("late_us")},
               late_marker});
  return k;
}

}  // namespace xrtio::sim
