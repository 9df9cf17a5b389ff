// The simulated device when the submitting thread's clock runs ahead of the
// compute units': steady_clock read on two CPUs of a virtual machine need
// not agree. This executable defines clock_gettime, which libstdc++'s
// steady_clock::now() calls, and adds an offset to CLOCK_MONOTONIC on the
// threads that ask for it; the device's own threads read the real clock.
#include <doctest/doctest.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>

#include "xrtio/context.hpp"
#include "xrtio/run.hpp"
#include "xrtio/sim.hpp"

using namespace std::chrono_literals;
namespace sim = xrtio::sim;

namespace {
// Constant-initialised: read by clock_gettime on any thread from its start.
thread_local bool clock_ahead = false;
constexpr std::int64_t ahead_ns = 2'000'000;  // far more than any real skew, so the old code fails every run
constexpr std::int64_t ns_per_s = 1'000'000'000;

// This thread's steady_clock runs ahead_ns ahead while it lives.
struct ahead_clock {
  ahead_clock() { clock_ahead = true; }
  ~ahead_clock() { clock_ahead = false; }
  ahead_clock(const ahead_clock&) = delete;
  ahead_clock& operator=(const ahead_clock&) = delete;
};

std::int64_t real_monotonic_ns() {
  timespec ts{};
  ::syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
  return std::int64_t(ts.tv_sec) * ns_per_s + ts.tv_nsec;
}

// `runs` noop runs one after another, submitted from this thread with its
// clock ahead, on a new device of two units; its statistics after them.
sim::device_stats runs_from_ahead(std::chrono::nanoseconds idle_poll, int runs) {
  sim::device_config c;
  c.compute_units = 2;
  c.idle_poll = idle_poll;
  auto ctx = sim::open(c);
  auto k = ctx.kernel("noop");
  {
    ahead_clock ahead;
    for (int i = 0; i < runs; ++i) REQUIRE(xrtio::start(k).wait(5s).ok());
  }
  auto st = sim::device_of(ctx).stats();
  CHECK(st.completed == std::uint64_t(runs));
  return st;
}
}  // namespace

extern "C" int clock_gettime(clockid_t id, struct timespec* ts) noexcept {
  auto rc = static_cast<int>(::syscall(SYS_clock_gettime, id, ts));
  if (rc == 0 && clock_ahead && id == CLOCK_MONOTONIC) {
    std::int64_t ns = std::int64_t(ts->tv_sec) * ns_per_s + ts->tv_nsec + ahead_ns;
    ts->tv_sec = static_cast<time_t>(ns / ns_per_s);
    ts->tv_nsec = static_cast<long>(ns % ns_per_s);
  }
  return rc;
}

TEST_CASE("sim clock skew: the offset reaches steady_clock on the thread that asks for it, and only there") {
  // Without this the cases below would pass whatever the device does.
  auto before = real_monotonic_ns();
  std::int64_t seen;
  {
    ahead_clock ahead;
    seen = std::chrono::steady_clock::now().time_since_epoch().count();
  }
  auto after = real_monotonic_ns();
  CHECK(seen >= before + ahead_ns);
  CHECK(seen <= after + ahead_ns);
  auto plain = std::chrono::steady_clock::now().time_since_epoch().count();
  auto real = real_monotonic_ns();
  CHECK(plain <= real);
}

TEST_CASE("sim clock skew: a watching unit takes a run from a submitter whose clock is ahead without sleeping") {
  // A run of zero latency is due when submitted. A unit that compared its
  // due time with its own, lagging clock slept until then: one timed
  // wake-up per run where the watch should take it with none (CI saw one
  // such wake-up in 200 runs of test_sim's watcher case).
  constexpr int runs = 100;
  auto st = runs_from_ahead(10s, runs);
  MESSAGE(runs << " runs, submitter " << ahead_ns / 1000 << " us ahead: " << st.idle_catches
               << " taken by the watcher, " << st.wakeups << " wake-ups");
  CHECK(st.wakeups == 0);
}

TEST_CASE("sim clock skew: a sleeping unit woken for a run from a submitter whose clock is ahead runs it at once") {
  // Without the watch, each submission wakes a unit: one wake-up per run,
  // not a second one for a timed sleep until the submitter's clock.
  constexpr int runs = 50;
  auto st = runs_from_ahead(0ns, runs);
  MESSAGE(runs << " runs, submitter " << ahead_ns / 1000 << " us ahead, no watch: " << st.wakeups << " wake-ups");
  CHECK(st.wakeups <= std::uint64_t(runs));
}
