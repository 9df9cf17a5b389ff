// What the soak counts and the checks it found violated, shared by every
// thread of a round and printed as figures at the end.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace soak {

/// The outcomes a run's handler (or wait) can report.
enum class outcome : unsigned {
  ok, timed_out, aborted, abort_failed, range_in_use, range_retained, device_lost, busy, shut_down,
  run_error, other, count_
};
outcome classify(const std::error_code& ec) noexcept;
const char* outcome_name(outcome o) noexcept;

/// Each check the soak makes; a violation of any makes the exit status 1.
enum class check : unsigned {
  exactly_once,        ///< a handler called twice, or neither called nor destroyed with its io_context
  wrong_executor,      ///< a handler ran outside its strand / pool / io_context
  after_destroy,       ///< a handler ran after its io_context was destroyed
  lease_early,         ///< the canary: a late device write reached memory the host wrote or leased since
  lease_leaked,        ///< a range still leased after its run's final state
  retained_count,      ///< retained runs != refused + overlong aborts
  not_reaped,          ///< a retained run not released by reap_retained() once its device was final
  budget,              ///< budget bytes not back to zero
  rss_growth,          ///< resident memory grew across the second half
  unexpected,          ///< an outcome the plan rules out (names the run)
  hang,                ///< no progress for the hang limit: a run never completed
  count_
};
const char* check_name(check c) noexcept;

struct tally {
  std::atomic<std::uint64_t> launched{0};
  std::array<std::atomic<std::uint64_t>, static_cast<unsigned>(outcome::count_)> outcomes{};
  std::atomic<std::uint64_t> handlers_called{0}, handlers_destroyed{0};
  std::atomic<std::uint64_t> by_token_awaitable{0}, by_token_callback{0}, by_token_future{0},
      by_token_deferred{0}, by_sync{0};
  std::atomic<std::uint64_t> prepared_runs{0}, chains{0}, canary_runs{0}, canary_checks{0};
  std::atomic<std::uint64_t> cancels_terminal{0}, cancels_partial{0}, cancels_total{0};
  std::atomic<std::uint64_t> handles_dropped{0}, wait_policy{0};
  std::atomic<std::uint64_t> rounds{0}, rounds_inloop{0}, io_destroyed{0}, runtime_destroyed{0}, reopened{0};
  std::atomic<std::uint64_t> retained{0}, refused_aborts{0}, long_aborts{0}, reaped{0}, rounds_stalled{0};
  std::atomic<std::uint64_t> device_runs{0}, fault_fail{0}, fault_hang{0}, fault_refuse{0}, fault_slow{0},
      fault_slow_long{0}, fault_lost{0};
  std::array<std::atomic<std::uint64_t>, static_cast<unsigned>(check::count_)> violations{};

  void count(outcome o) noexcept { outcomes[static_cast<unsigned>(o)].fetch_add(1, std::memory_order_relaxed); }
  /// Records a violation; the first few of each check keep their message.
  void violate(check c, const std::string& what);
  std::uint64_t total_violations() const noexcept;
  std::vector<std::string> messages() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
};

}  // namespace soak
