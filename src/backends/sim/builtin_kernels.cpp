// The simulated device's stock kernels: real computations on buffer memory.
#include <cstdint>
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
                 if (!fits(c, 0, m * kk * 4) || !fits(c, 1, kk * n * 4) || !fits(c, 2, m * n * 4)) return;
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
  return k;
}

}  // namespace xrtio::sim
