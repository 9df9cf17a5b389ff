// The soak's random choices: every run's plan and every device run's fault
// are pure functions of the seed and a number, so a seed names the mix.
// (Which device run number a launched run gets depends on thread timing.)
#pragma once

#include <asio/cancellation_type.hpp>
#include <chrono>
#include <cstdint>

#include "xrtio/run_options.hpp"
#include "xrtio/sim.hpp"

namespace soak {

/// splitmix64 (Steele, Lea and Flood, 2014): a well-mixed 64-bit hash.
std::uint64_t mix(std::uint64_t x) noexcept;

/// A small deterministic stream of random numbers.
class rng {
 public:
  explicit rng(std::uint64_t seed) noexcept : state_(mix(seed)) {}
  std::uint64_t next() noexcept { return state_ = mix(state_); }
  /// Uniform in [0, n).
  std::uint64_t below(std::uint64_t n) noexcept { return n ? next() % n : 0; }
  /// True with probability per_mille / 1000.
  bool chance(unsigned per_mille) noexcept { return below(1000) < per_mille; }

 private:
  std::uint64_t state_;
};

enum class run_kind { single, prepared, chain, canary };
/// scale runs have no deadline and wait for their ranges: only kernels whose
/// faults all end by themselves (pick_fault), so a run stuck waiting shows
/// as a round that never ends (the soak's watchdog).
enum class kernel_kind { vadd, checksum, noop, scale };

struct run_plan {
  run_kind kind = run_kind::single;
  kernel_kind kernel = kernel_kind::noop;
  std::size_t out_offset = 0, out_size = 0;  ///< vadd's output view of the shared output buffer
  std::size_t in_offset = 0;                 ///< its inputs' view of the shared input buffer
  unsigned prepared_index = 0, chain_length = 0;
  xrtio::run_options options{};
  asio::cancellation_type cancel = asio::cancellation_type::none;
  std::chrono::microseconds cancel_after{0};
  std::uint32_t hold_us = 0, late_us = 0;  ///< the canary's
  bool drop_handle = false;                ///< sync lane: drop the handle in flight
  std::uint64_t salt = 0;                  ///< what the run writes (canary patterns)
};

/// Sizes of the buffers runs share (bytes).
inline constexpr std::size_t shared_in_bytes = 4096;
inline constexpr std::size_t shared_out_bytes = 8192;
inline constexpr std::size_t view_align = 64;
inline constexpr unsigned prepared_per_device = 6;

/// The plan of run `index` of the soak seeded `seed`.
run_plan plan_run(std::uint64_t seed, std::uint64_t index);

/// The fault of run `run_number` of `kernel` on device `device_id`; long
/// slow aborts take `long_abort` (beyond the runtime's abort_grace).
xrtio::sim::fault_rule pick_fault(std::uint64_t seed, std::uint64_t device_id, std::string_view kernel,
                                  std::uint64_t run_number, std::chrono::nanoseconds long_abort);

}  // namespace soak
