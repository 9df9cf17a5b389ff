#include <doctest/doctest.h>

#include "foundation_support.hpp"
#include "observing_device.hpp"

// Memory budgets (docs/DESIGN.md, invariant 7): the charge is taken before the
// native allocation, released only after native destruction, and concurrent
// reservations never oversubscribe.

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "xrtio/context.hpp"
#include "xrtio/error.hpp"
#include "xrtio/memory_budget.hpp"
#include "xrtio/run.hpp"
#include "xrtio/sim.hpp"

using namespace std::chrono_literals;
using xrtio::errc;
namespace sim = xrtio::sim;

namespace {

using ftest::contains;
using ftest::error_of;
using btest::observations;
using btest::observing_device;

}  // namespace

// ---- the budget itself --------------------------------------------------------

TEST_CASE("budget: reserve charges and release or destruction gives the bytes back") {
  xrtio::memory_budget b(1000);
  CHECK(b.ceiling() == 1000);
  CHECK(b.used() == 0);
  {
    auto r1 = b.reserve(300);
    CHECK(r1.size() == 300);
    CHECK(b.used() == 300);
    auto r2 = b.reserve(700);  // exactly to the ceiling
    CHECK(b.used() == 1000);
    r2.release();
    CHECK(r2.size() == 0);
    CHECK(b.used() == 300);
    r2.release();  // idempotent
    CHECK(b.used() == 300);
  }
  CHECK(b.used() == 0);
}

TEST_CASE("budget: a budget moved from still refers to the same budget") {
  // Its readers are noexcept; after a move they dereferenced an empty
  // state (SIGSEGV; found by a helper's audit).
  xrtio::memory_budget b(1000);
  auto ctx = sim::open({}, std::move(b));
  CHECK(b.ceiling() == 1000);
  CHECK(b.used() == 0);
  auto buf = ctx.alloc(100);
  CHECK(b.used() == 100);
  auto r = b.reserve(50);
  CHECK(ctx.budget()->used() == 150);
  xrtio::memory_budget c(7);
  c = std::move(b);
  CHECK(b.used() == 150);
  CHECK(c.used() == 150);
  CHECK(b == c);
}

TEST_CASE("budget: zero bytes may be reserved even from a full budget") {
  xrtio::memory_budget b(10);
  auto full = b.reserve(10);
  auto none = b.reserve(0);
  CHECK(none.size() == 0);
  CHECK(b.used() == 10);
  xrtio::memory_budget empty(0);
  CHECK_NOTHROW(empty.reserve(0));
  error_of([&] { empty.reserve(1); }, errc::budget_exceeded);
}

TEST_CASE("budget: a request over the ceiling fails with budget_exceeded naming request and use and ceiling") {
  xrtio::memory_budget b(4096);
  auto held = b.reserve(1000);
  auto msg = error_of([&] { b.reserve(3097); }, errc::budget_exceeded);
  CHECK_CONTAINS(msg, "3097");
  CHECK_CONTAINS(msg, "1000");
  CHECK_CONTAINS(msg, "4096");
  CHECK(b.used() == 1000);  // a failed reservation charges nothing
  msg = error_of([&] { b.reserve(5000); }, errc::budget_exceeded);
  CHECK_CONTAINS(msg, "5000");
  // Near SIZE_MAX the check must not wrap around.
  error_of([&] { b.reserve(SIZE_MAX); }, errc::budget_exceeded);
  error_of([&] { b.reserve(SIZE_MAX - 500); }, errc::budget_exceeded);
  CHECK(b.used() == 1000);
  CHECK_NOTHROW(b.reserve(3096));
}

TEST_CASE("budget: copies share one ceiling and one use count") {
  xrtio::memory_budget a(100);
  xrtio::memory_budget b = a;
  CHECK(a == b);
  CHECK_FALSE(a == xrtio::memory_budget(100));
  auto r = b.reserve(60);
  CHECK(a.used() == 60);
  error_of([&] { a.reserve(41); }, errc::budget_exceeded);
}

TEST_CASE("budget: moving a reservation moves the charge and assigning over one releases it") {
  xrtio::memory_budget b(100);
  auto r1 = b.reserve(10);
  xrtio::memory_reservation r2(std::move(r1));
  CHECK(r1.size() == 0);
  CHECK(r2.size() == 10);
  CHECK(b.used() == 10);
  auto r3 = b.reserve(20);
  r2 = std::move(r3);  // r2's 10 bytes go back
  CHECK(b.used() == 20);
  CHECK(r2.size() == 20);
  r1 = {};
  r2 = {};
  CHECK(b.used() == 0);
}

TEST_CASE("budget: eight threads hammering reserve/release never oversubscribe") {
  constexpr std::size_t ceiling = 10000;
  xrtio::memory_budget budget(ceiling);
  std::atomic<std::size_t> held{0};        // sum of successful reservations alive now
  std::atomic<std::size_t> max_held{0};
  std::atomic<std::size_t> max_used{0};
  std::atomic<std::size_t> successes{0}, refusals{0};
  std::atomic<bool> go{false};
  auto bump = [](std::atomic<std::size_t>& m, std::size_t v) {
    auto cur = m.load();
    while (v > cur && !m.compare_exchange_weak(cur, v)) {
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t + 1);
      std::uniform_int_distribution<std::size_t> size(0, 3000);
      while (!go.load()) std::this_thread::yield();
      std::vector<xrtio::memory_reservation> mine;
      for (int i = 0; i < 4000; ++i) {
        if (!mine.empty() && (rng() % 3 == 0 || mine.size() > 3)) {
          auto n = mine.back().size();
          held.fetch_sub(n);  // before the release: `held` never exceeds what is charged
          mine.pop_back();
          continue;
        }
        auto n = size(rng);
        try {
          auto r = budget.reserve(n);
          bump(max_held, held.fetch_add(n) + n);
          mine.push_back(std::move(r));
          successes.fetch_add(1);
        } catch (const xrtio::error& e) {
          if (e.code() != errc::budget_exceeded) throw;
          refusals.fetch_add(1);
        }
        bump(max_used, budget.used());
      }
      for (auto& r : mine) held.fetch_sub(r.size());
    });
  }
  go = true;
  for (auto& th : threads) th.join();
  CHECK(max_used.load() <= ceiling);
  CHECK(max_held.load() <= ceiling);
  CHECK(budget.used() == 0);
  CHECK(held.load() == 0);
  CHECK(successes.load() > 1000);
  CHECK(refusals.load() > 0);  // the ceiling was actually contended
}

// ---- budgets and contexts ------------------------------------------------------

TEST_CASE("budget: the charge is taken before the native allocation and released after native destruction") {
  xrtio::memory_budget budget(1 << 20);
  observations obs;
  obs.budget = &budget;
  xrtio::context ctx(std::make_shared<observing_device>(&obs), budget);
  {
    auto b = ctx.alloc(1000);
    REQUIRE(obs.used_at_alloc.size() == 1);
    CHECK(obs.used_at_alloc[0] == 1000);  // already charged when the device allocates
    CHECK(budget.used() == 1000);
    auto c = ctx.alloc(24);
    CHECK(obs.used_at_alloc[1] == 1024);
  }
  REQUIRE(obs.used_at_free.size() == 2);
  // Each still charged while its native buffer dies: c goes first (both
  // charged), then b (its own 1000 bytes still charged).
  CHECK(obs.used_at_free[0] == 1024);
  CHECK(obs.used_at_free[1] == 1000);
  CHECK(budget.used() == 0);
}

TEST_CASE("budget: a failed native allocation returns its charge") {
  xrtio::memory_budget budget(1 << 20);
  observations obs;
  obs.budget = &budget;
  xrtio::context ctx(std::make_shared<observing_device>(&obs), budget);
  auto keep = ctx.alloc(100);
  obs.fail_alloc = true;
  auto msg = error_of([&] { ctx.alloc(5000); }, errc::backend_failure);
  CHECK_CONTAINS(msg, "5000");
  CHECK(obs.used_at_alloc.back() == 5100);
  CHECK(budget.used() == 100);
}

TEST_CASE("budget: context::alloc over the budget fails with budget_exceeded and leaves used() unchanged") {
  xrtio::memory_budget budget(10000);
  observations obs;
  obs.budget = &budget;
  xrtio::context ctx(std::make_shared<observing_device>(&obs), budget);
  auto a = ctx.alloc(6000);
  auto msg = error_of([&] { ctx.alloc(4001); }, errc::budget_exceeded);
  CHECK_CONTAINS(msg, "4001");
  CHECK_CONTAINS(msg, "6000");
  CHECK_CONTAINS(msg, "10000");
  CHECK(budget.used() == 6000);
  CHECK(obs.used_at_alloc.size() == 1);  // the device was never asked
  auto b = ctx.alloc(4000);
  CHECK(budget.used() == 10000);
  a = {};
  CHECK(budget.used() == 4000);
  CHECK_NOTHROW(ctx.alloc(6000));
}

TEST_CASE("budget: contexts sharing a budget share its ceiling") {
  xrtio::memory_budget budget(8192);
  auto c1 = sim::open({}, budget);
  auto c2 = sim::open({}, budget);
  auto a = c1.alloc(5000);
  error_of([&] { c2.alloc(5000); }, errc::budget_exceeded);
  auto b = c2.alloc(3192);
  CHECK(budget.used() == 8192);
  REQUIRE(c1.budget());
  CHECK(*c1.budget() == budget);
  CHECK_FALSE(sim::open().budget());
}

TEST_CASE("budget: views and imports carry no charge") {
  xrtio::memory_budget budget(1 << 20);
  auto ctx = sim::open({}, budget);
  auto root = ctx.alloc(8192);
  CHECK(budget.used() == 8192);
  auto v = root.sub(4096, 0), vv = v.sub(100, 100);
  CHECK(budget.used() == 8192);

  std::vector<std::byte> user(4096);
  auto u = ctx.import_user_memory(user.data(), user.size());
  CHECK(budget.used() == 8192);

  int fd = ::memfd_create("xrtio-budget", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 65536) == 0);
  auto d = ctx.import_dmabuf(fd, 65536);
  ::close(fd);
  CHECK(budget.used() == 8192);
  d = {};
  u = {};
  CHECK(budget.used() == 8192);
}

TEST_CASE("budget: a view keeps the root's charge after every root handle is dropped") {
  xrtio::memory_budget budget(1 << 20);
  auto ctx = sim::open({}, budget);
  auto root = ctx.alloc(4096);
  auto v = root.sub(16, 16);
  root = {};
  CHECK(budget.used() == 4096);
  v = {};
  CHECK(budget.used() == 0);
}

TEST_CASE("budget: an in-flight run keeps its buffers' charge after the user drops them") {
  xrtio::memory_budget budget(1 << 20);
  sim::device_config cfg;
  cfg.faults.push_back(sim::fault_rule{.kernel = "vadd", .what = sim::fault::hang});
  auto ctx = sim::open(cfg, budget);
  xrtio::run_handle h;
  {
    auto a = ctx.alloc(1024), b = ctx.alloc(1024), c = ctx.alloc(2048);
    h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(c.sub(1024, 1024)),
                     std::uint32_t{256});
  }
  CHECK(budget.used() == 4096);  // the run still holds every buffer
  h = {};                        // aborts the hung run, then lets go
  CHECK(budget.used() == 0);
  CHECK(sim::device_of(ctx).stats().aborted == 1);
}

TEST_CASE("budget: a completed run's buffers are released with the handle and not before") {
  xrtio::memory_budget budget(1 << 20);
  sim::device_config cfg;
  cfg.latency.fixed = 5ms;
  auto ctx = sim::open(cfg, budget);
  auto h = [&] {
    auto a = ctx.alloc(512), b = ctx.alloc(512), c = ctx.alloc(512);
    return xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{128});
  }();
  CHECK(budget.used() == 1536);
  h.wait(10s);
  CHECK(budget.used() == 1536);
  h = {};
  CHECK(budget.used() == 0);
}
