// Defects the soak (tools/soak, xrtio-soak) found, each pinned by a test that
// failed on the code before its fix (docs/RELIABILITY.md, "Soak").
#include <doctest/doctest.h>

#include <asio.hpp>
#include <atomic>

#include "introspection.hpp"
#include "reactor_support.hpp"
#include "xrtio/detail/access_tracker.hpp"
#include "xrtio/xrtio.hpp"

using namespace std::chrono_literals;
namespace sim = xrtio::sim;
using xrtio::detail::access_listener;
using xrtio::detail::access_mode;
using xrtio::detail::access_request;
using xrtio::detail::access_tracker;
using xrtio::detail::access_waiter;
using xrtio::detail::acquire_status;
using xrtio::detail::holder_kind;

namespace {
struct counting_listener final : access_listener {
  std::atomic<int> calls{0};
  void access_released() noexcept override { calls.fetch_add(1); }
};
}  // namespace

// Defect: mark_retained() turned a lease into a retained one without telling
// the runs queued (conflict_policy::wait) on its range. Their retry, the only
// way they learn they must fail with range_retained, never came: they waited
// until their own deadline (or forever without one).
TEST_CASE("soak regression: marking a lease retained wakes the waiters queued on its range") {
  access_tracker t;
  access_request held{&t, 0, 64, access_mode::write};
  REQUIRE(access_tracker::acquire(std::span(&held, 1), holder_kind::run, nullptr) == acquire_status::acquired);

  counting_listener listener;
  int owner = 0;
  access_waiter w{&owner, access_tracker::next_wait_seq(), &listener};
  access_request want{&t, 32, 96, access_mode::read};
  REQUIRE(access_tracker::acquire(std::span(&want, 1), holder_kind::run, nullptr, &w) == acquire_status::queued);
  REQUIRE(t.waiting_count() == 1);

  held.id = t.mark_retained(held.id);
  CHECK(listener.calls.load() >= 1);  // told to retry
  // The retry it was told to make reports the retained holder.
  CHECK(access_tracker::acquire(std::span(&want, 1), holder_kind::run, nullptr, &w) == acquire_status::retained);
  access_tracker::withdraw(std::span(&want, 1), &owner);
  CHECK(t.waiting_count() == 0);
  CHECK(t.active_count() == 1);  // the retained lease stays
}

TEST_CASE("soak regression: a run waiting behind a run whose abort is refused fails with range_retained, never started") {
  sim::device_config cfg;
  cfg.faults.push_back({.kernel = "vadd", .run_number = 1, .what = sim::fault::refuse_abort});
  rtest::fixture f(std::move(cfg));
  auto v = rtest::make_vadd(f.ctx);
  auto out = v.c.sub(32, 16);  // overlaps the retained run's output, does not equal it
  asio::io_context io;
  std::error_code first{xrtio::errc::busy}, second{xrtio::errc::busy};
  int calls = 0;
  xrtio::async_run(f.ctx.kernel("vadd"), xrtio::in(v.a), xrtio::in(v.b), xrtio::out(v.c), v.n,
                   xrtio::run_options{.timeout = 5ms}, asio::bind_executor(io, [&](std::error_code e, xrtio::run_result) {
                     ++calls;
                     first = e;
                   }));
  // Queued behind the first run's lease on c. Its own deadline is far past
  // the first run's retention, so a timed_out here means it was never woken.
  xrtio::async_run(f.ctx.kernel("vadd"), xrtio::in(v.a), xrtio::in(v.b), xrtio::out(out), 4u,
                   xrtio::run_options{.timeout = 3s, .on_conflict = xrtio::conflict_policy::wait},
                   asio::bind_executor(io, [&](std::error_code e, xrtio::run_result) {
                     ++calls;
                     second = e;
                   }));
  io.run();
  CHECK(calls == 2);
  CHECK(first == xrtio::errc::abort_failed);
  CHECK(second == xrtio::errc::range_retained);
  CHECK(rtest::dev(f.ctx).stats().started == 1);  // the waiter never reached the device
  CHECK(xtest::tracker(v.c).waiting_count() == 0);
  auto s = f.rt.stats();
  CHECK(s.retained == 1);
  CHECK(s.timed_out == 0);
  CHECK(s.in_flight == 0);
}

namespace soak_regression {
extern const bool asio_aligned_alloc_asio_first;  // asio_alloc_asio_first.cpp
extern const bool asio_aligned_alloc_std_first;   // asio_alloc_std_first.cpp
}  // namespace soak_regression

// Defect: Asio 1.22 chooses its handler memory functions (aligned_alloc and
// free, or operator new and delete) by whether <bits/c++config.h> was read
// before its configuration. xrtio's files that begin with an Asio include
// (inloop.cpp, completion_service.cpp, prepared_run.cpp) and files that do
// not compiled different inline asio::aligned_new/aligned_delete, and memory
// allocated by one was freed by the other: ASan's alloc-dealloc-mismatch in
// ~thread_info_base from xrtio::run's io.poll() (the soak, in-loop rounds).
// Both orders must agree.
TEST_CASE("soak regression: Asio's handler memory functions do not depend on include order") {
  CHECK(soak_regression::asio_aligned_alloc_asio_first == soak_regression::asio_aligned_alloc_std_first);
}
