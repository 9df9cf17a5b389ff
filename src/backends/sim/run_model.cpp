// The simulated device's run model: which fault hits a run and how long the
// run takes on the device. Pure functions of the device's configuration and
// the run number, so a run's fault and latency are repeatable.
#include <string>

#include "sim_types.hpp"

namespace xrtio::sim::detail {
namespace {

// splitmix64's constants (Steele, Lea and Flood, "Fast splittable pseudorandom
// number generators", 2014): a well-mixed 64-bit hash of the seed and run number.
constexpr std::uint64_t splitmix_gamma = 0x9e3779b97f4a7c15ull;
constexpr std::uint64_t splitmix_mul1 = 0xbf58476d1ce4e5b9ull;
constexpr std::uint64_t splitmix_mul2 = 0x94d049bb133111ebull;

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += splitmix_gamma;
  x = (x ^ (x >> 30)) * splitmix_mul1;
  x = (x ^ (x >> 27)) * splitmix_mul2;
  return x ^ (x >> 31);
}

}  // namespace

fault_rule pick_fault(const device_config& cfg, const std::string& kernel, std::uint64_t run_number) {
  for (auto& f : cfg.faults)
    if ((f.kernel.empty() || f.kernel == kernel) && (f.run_number == 0 || f.run_number == run_number)) return f;
  if (cfg.fault_selector) return cfg.fault_selector(kernel, run_number);
  return {};
}

clock::duration run_latency(const latency_model& m, std::size_t bytes, std::uint64_t run_number) {
  auto ns = m.fixed.count() + static_cast<std::int64_t>(m.ns_per_byte * static_cast<double>(bytes));
  if (m.jitter.count() > 0)
    ns += static_cast<std::int64_t>(mix(m.seed ^ mix(run_number)) % static_cast<std::uint64_t>(m.jitter.count() + 1));
  return std::chrono::nanoseconds(ns);
}

}  // namespace xrtio::sim::detail
