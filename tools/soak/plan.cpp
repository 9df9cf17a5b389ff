#include "plan.hpp"

namespace soak {

using namespace std::chrono_literals;

std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

run_plan plan_run(std::uint64_t seed, std::uint64_t index) {
  rng r(seed * 0x100000001b3ull ^ mix(index));
  run_plan p;
  p.salt = r.next();
  auto k = r.below(100);
  p.kind = k < 70 ? run_kind::single : k < 82 ? run_kind::prepared : k < 90 ? run_kind::chain : run_kind::canary;
  auto kk = r.below(10);
  p.kernel = kk < 5 ? kernel_kind::vadd : kk < 7 ? kernel_kind::checksum : kernel_kind::noop;
  static constexpr std::size_t sizes[] = {64, 256, 1024};
  p.out_size = sizes[r.below(3)];
  p.out_offset = r.below((shared_out_bytes - p.out_size) / view_align + 1) * view_align;
  p.in_offset = r.below((shared_in_bytes - p.out_size) / view_align + 1) * view_align;
  p.prepared_index = static_cast<unsigned>(r.below(prepared_per_device));
  p.chain_length = 2 + static_cast<unsigned>(r.below(2));
  // Every run has a deadline: a hang that nothing else ends still ends.
  p.options.timeout = r.chance(250) ? std::chrono::milliseconds(1 + r.below(8)) : 60ms;
  p.options.on_conflict = r.chance(500) ? xrtio::conflict_policy::wait : xrtio::conflict_policy::fail;
  auto c = r.below(100);
  p.cancel = c < 15   ? asio::cancellation_type::terminal
             : c < 30 ? asio::cancellation_type::partial
             : c < 45 ? asio::cancellation_type::total
                      : asio::cancellation_type::none;
  p.cancel_after = std::chrono::microseconds(r.below(2000));
  p.hold_us = static_cast<std::uint32_t>(r.below(1500));
  p.late_us = static_cast<std::uint32_t>(r.below(800));
  p.drop_handle = r.chance(400);
  if (p.kind == run_kind::single && p.cancel == asio::cancellation_type::none && r.chance(200)) {
    p.kernel = kernel_kind::scale;
    p.options.timeout = std::chrono::nanoseconds(0);
    p.options.on_conflict = xrtio::conflict_policy::wait;
  }
  return p;
}

xrtio::sim::fault_rule pick_fault(std::uint64_t seed, std::uint64_t device_id, std::string_view kernel,
                                  std::uint64_t run_number, std::chrono::nanoseconds long_abort) {
  using xrtio::sim::fault;
  rng r(seed ^ mix(device_id * 0x9e3779b97f4a7c15ull + run_number));
  xrtio::sim::fault_rule f;
  auto u = r.below(100000);
  bool canary = kernel == "late_marker";
  // The synchronous lane's kernels (checksum, late_marker) get no abort past
  // the limit: its device counts long aborts against the synchronous limit
  // (1 s), and waiting that long per round would slow the soak down.
  bool no_long_abort = kernel == "checksum" || canary;
  // scale runs have no deadline and nothing cancels them: every fault must
  // end by itself (no hang or slow abort without a duration).
  bool ends_alone = kernel == "scale";
  if (u < 25) f.what = fault::device_lost;                        // 0.025 %
  else if (u < 3025) f.what = canary ? fault::none : fault::fail;  // 3 % (a canary's ERROR is its alarm)
  else if (u < 5025) {                                             // 2 %: hang for a while
    f.what = fault::hang;
    f.duration = std::chrono::microseconds(500 + r.below(10000));
  } else if (u < 6025) {  // 1 %: hang until aborted
    f.what = fault::hang;
    if (ends_alone) f.duration = std::chrono::microseconds(500 + r.below(10000));
  } else if (u < 7025) {  // 1 %: refuse aborts, finish after a while (then reapable)
    f.what = fault::refuse_abort;
    f.duration = std::chrono::microseconds(1000 + r.below(20000));
  } else if (u < 8725) {  // 1.5 %: an abort that takes up to 1 ms; 0.2 %: one past abort_grace (retained)
    f.what = ends_alone ? fault::hang : fault::slow_abort;
    if (ends_alone) f.duration = std::chrono::microseconds(500 + r.below(10000));
    f.abort_delay = u < 8525 || no_long_abort ? std::chrono::nanoseconds(std::chrono::microseconds(r.below(1000)))
                                              : long_abort;
  }
  return f;
}

}  // namespace soak
