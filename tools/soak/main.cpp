// xrtio-soak: a randomized, seeded soak of xrtio on the simulated device
// (docs/RELIABILITY.md, "Soak"). Rounds of runs through every completion
// token, fault class, cancellation type and ending; the checks' figures at
// the end; exit status 1 on any violation.
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <cstdio>
#include <vector>

#include "options.hpp"
#include "plan.hpp"
#include "process_rss.hpp"
#include "round.hpp"
#include "stall_detector.hpp"
#include "tally.hpp"
#include "watchdog.hpp"
#include "xrtio/memory_budget.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define XRTIO_SOAK_SANITIZED 1
#else
#define XRTIO_SOAK_SANITIZED 0
#endif
#ifndef XRTIO_SOAK_EMULATED  // set by tools/CMakeLists.txt for cross builds
#define XRTIO_SOAK_EMULATED 0
#endif

namespace {

/// Ceiling of the budget every device of the soak charges (far above use:
/// the check is that it returns to zero).
constexpr std::size_t budget_ceiling = 256u << 20;
/// RSS may grow this much across the second half (allocator noise) before
/// it counts as growth: 8 MiB or 10 %, whichever is more.
constexpr std::uint64_t rss_slack_bytes = 8u << 20;
constexpr std::uint64_t rss_slack_per_cent = 10;

struct rss_sample {
  std::uint64_t launched, bytes;
};

void print_figures(const soak::options& o, const soak::tally& t, double seconds, const std::vector<rss_sample>& rss,
                   std::uint64_t rss_mid, std::uint64_t rss_end, const char* rss_verdict, double stall_ms) {
  using soak::check;
  auto v = [&](auto& a) { return static_cast<unsigned long long>(a.load()); };
  std::printf("xrtio-soak: seed %llu, %llu runs requested, %u io threads, abort_grace %lld ms\n",
              static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(o.runs), o.threads,
              static_cast<long long>(o.abort_grace.count()));
  std::printf("wall time          %.1f s (%.0f runs/s)\n", seconds, seconds > 0 ? v(t.launched) / seconds : 0.0);
  std::printf("runs launched      %llu (device runs %llu)\n", v(t.launched), v(t.device_runs));
  std::printf("rounds             %llu (in-loop %llu; io_context destroyed %llu; runtime destroyed %llu; devices reopened %llu)\n",
              v(t.rounds), v(t.rounds_inloop), v(t.io_destroyed), v(t.runtime_destroyed), v(t.reopened));
  std::printf("tokens             use_awaitable %llu, callback(thread_pool) %llu, deferred(strand) %llu, use_future %llu, sync start %llu\n",
              v(t.by_token_awaitable), v(t.by_token_callback), v(t.by_token_deferred), v(t.by_token_future),
              v(t.by_sync));
  std::printf("kinds              prepared %llu, chains %llu, canary %llu (regions checked %llu), wait policy %llu, handles dropped %llu\n",
              v(t.prepared_runs), v(t.chains), v(t.canary_runs), v(t.canary_checks), v(t.wait_policy),
              v(t.handles_dropped));
  std::printf("cancellations      terminal %llu, partial %llu, total %llu\n", v(t.cancels_terminal),
              v(t.cancels_partial), v(t.cancels_total));
  std::printf("faults             fail %llu, hang %llu, refuse_abort %llu, slow_abort %llu (+%llu past abort_grace), device_lost %llu\n",
              v(t.fault_fail), v(t.fault_hang), v(t.fault_refuse), v(t.fault_slow), v(t.fault_slow_long),
              v(t.fault_lost));
  std::printf("outcomes          ");
  for (unsigned i = 0; i < static_cast<unsigned>(soak::outcome::count_); ++i)
    std::printf(" %s %llu%s", soak::outcome_name(static_cast<soak::outcome>(i)), v(t.outcomes[i]),
                i + 1 < static_cast<unsigned>(soak::outcome::count_) ? "," : "\n");
  std::printf("handlers           called %llu, destroyed uncalled with their io_context %llu\n",
              v(t.handlers_called), v(t.handlers_destroyed));
  std::printf("retention          retained %llu, refused aborts %llu, overlong aborts %llu; reaped %llu\n",
              v(t.retained), v(t.refused_aborts), v(t.long_aborts), v(t.reaped));
  std::printf("stalls             %llu rounds of %llu saw the process stall (longest %.0f ms): their retention checked as >= refused only\n",
              v(t.rounds_stalled), v(t.rounds), stall_ms);
  std::printf("RSS                at half %.1f MiB, at end %.1f MiB (%zu samples): %s\n", rss_mid / 1048576.0,
              rss_end / 1048576.0, rss.size(), rss_verdict);
  std::printf("violations         %llu\n", static_cast<unsigned long long>(t.total_violations()));
  for (unsigned i = 0; i < static_cast<unsigned>(check::count_); ++i)
    std::printf("  %-40s %llu\n", soak::check_name(static_cast<check>(i)), v(t.violations[i]));
  for (auto& m : t.messages()) std::printf("  ! %s\n", m.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  int code = 0;
  auto parsed = soak::parse_options(argc, argv, code);
  if (!parsed) return code;
  const auto& o = *parsed;
  soak::tally t;
  xrtio::memory_budget budget(budget_ceiling);
  std::vector<rss_sample> rss;
  // A stall of a quarter of abort_grace can flip an abort across it.
  soak::stall_detector stalls(std::chrono::nanoseconds(o.abort_grace) / 4);
  auto t0 = std::chrono::steady_clock::now();
  std::uint64_t launched = 0, next_report = o.runs / 10;
  // A round that stops making progress holds a run that never completes.
  std::mutex print_mutex;
  soak::watchdog dog(
      [&] {
        std::uint64_t p = t.launched.load();
        for (auto& c : t.outcomes) p += c.load();
        return p + t.handles_dropped.load() + t.rounds.load();
      },
      std::chrono::seconds(o.hang_limit_s), [&] {
        std::lock_guard lock(print_mutex);
        t.violate(soak::check::hang, "no run launched or completed for " + std::to_string(o.hang_limit_s) +
                                         " s of running time, round of run " + std::to_string(launched));
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        print_figures(o, t, s, rss, 0, 0, "not checked: the soak hung", stalls.longest().count() / 1e6);
        std::fflush(stdout);
        std::_Exit(1);
      });
  for (std::uint64_t round = 0; launched < o.runs; ++round) {
    soak::rng r(o.seed ^ soak::mix(round + 0xabcdef));
    soak::round_spec spec;
    spec.index = round;
    spec.first_run = launched;
    spec.quota = std::min(o.round_runs, o.runs - launched);
    spec.inloop = o.mode == soak::reactor_mode::inloop || (o.mode == soak::reactor_mode::mixed && r.chance(500));
    auto e = r.below(10);
    spec.end = e < 6 ? soak::round_end::drain : e < 8 ? soak::round_end::destroy_io : soak::round_end::destroy_runtime;
    launched += soak::run_round(o, spec, budget, t, stalls);
    rss.push_back({launched, soak::resident_bytes()});
    if (!o.quiet && launched >= next_report) {
      auto s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("[%5.1f s] %llu runs, %llu violations, RSS %.1f MiB\n", s, static_cast<unsigned long long>(launched),
                  static_cast<unsigned long long>(t.total_violations()), rss.back().bytes / 1048576.0);
      std::fflush(stdout);
      next_report = launched + o.runs / 10;
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // RSS across the second half: from the first sample past half the runs to the last.
  std::uint64_t mid = 0, end = rss.empty() ? 0 : rss.back().bytes;
  for (auto& s : rss)
    if (s.launched >= o.runs / 2) {
      mid = s.bytes;
      break;
    }
  const char* verdict = "flat";
  if (rss.size() < 4) {
    verdict = "not checked: fewer than 4 rounds";
  } else if (XRTIO_SOAK_SANITIZED) {
    verdict = "not checked: a sanitizer's quarantine and shadow memory grow by design";
  } else if (XRTIO_SOAK_EMULATED) {
    verdict = "not checked: a cross build, run under an emulator whose own code cache grows";
  } else if (end > mid + std::max(rss_slack_bytes, mid * rss_slack_per_cent / 100)) {
    verdict = "GREW";
    t.violate(soak::check::rss_growth, std::to_string(mid) + " -> " + std::to_string(end) + " bytes");
  }
  print_figures(o, t, seconds, rss, mid, end, verdict, stalls.longest().count() / 1e6);
  return t.total_violations() == 0 ? 0 : 1;
}
