// The reliability checks of docs/RELIABILITY.md that no other suite makes:
// leases held through a slow abort, budgets through retention, cancellation
// racing completion, other executors, runs queued behind a retained run,
// device loss with asynchronous runs in flight. Each holds the device in a
// known state (a fault, a gate, sim::device_stats::running) rather than
// racing a sleep; the only timings checked are lower bounds the library
// guarantees.
#include <doctest/doctest.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <optional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "introspection.hpp"
#include "kernel_gate.hpp"
#include "reactor_support.hpp"
#include "xrtio/xrtio.hpp"

using namespace std::chrono_literals;
using rtest::dev;
using rtest::fixture;
using rtest::make_vadd;
namespace sim = xrtio::sim;
using xrtio::errc;

namespace {

sim::device_config with_fault(sim::fault_rule r) {
  sim::device_config cfg;
  cfg.faults.push_back(std::move(r));
  return cfg;
}

template <class Token>
auto run_vadd(const xrtio::context& ctx, const rtest::vadd_set& v, xrtio::run_options o, Token&& tok) {
  auto c = ctx;
  return xrtio::async_run(c.kernel("vadd"), xrtio::in(v.a), xrtio::in(v.b), xrtio::out(v.c), v.n, o,
                          std::forward<Token>(tok));
}

bool leases_free(const rtest::vadd_set& v) {
  return xtest::tracker(v.a).active_count() == 0 && xtest::tracker(v.b).active_count() == 0 &&
         xtest::tracker(v.c).active_count() == 0;
}

/// An io_context run by `n` threads until the object is destroyed.
struct threaded_io {
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard{io.get_executor()};
  std::vector<std::thread> threads;
  explicit threaded_io(int n = 1) {
    for (int i = 0; i < n; ++i) threads.emplace_back([this] { io.run(); });
  }
  ~threaded_io() { join(); }
  void join() {
    guard.reset();
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }
};

using gate = rtest::kernel_gate;
using rtest::open_at_exit;

/// What one asynchronous run reported, written on the handler's thread.
struct async_outcome {
  std::atomic<int> calls{0};
  std::error_code ec{errc::run_error};
  xrtio::run_result result;
  rtest::clock::time_point at{};
  std::uint64_t device_final_at_call = 0;  // the device's final-state count when the handler ran
};

}  // namespace

// ---- invariant 2: leases outlive the device --------------------------------------

TEST_CASE("reliability: a cancelled run whose abort takes 100 ms keeps its leases until final, and its handler "
          "runs no earlier") {
  fixture f(with_fault({.kernel = "vadd", .what = sim::fault::slow_abort, .abort_delay = 100ms}));
  auto v = make_vadd(f.ctx);
  threaded_io t;
  async_outcome o;
  asio::cancellation_signal sig;
  run_vadd(f.ctx, v, {},
           asio::bind_cancellation_slot(sig.slot(), asio::bind_executor(t.io, [&](std::error_code ec,
                                                                                   xrtio::run_result r) {
                                          o.at = rtest::clock::now();
                                          auto d = dev(f.ctx).stats();
                                          o.device_final_at_call = d.aborted + d.completed + d.failed;
                                          o.ec = ec;
                                          o.result = r;
                                          o.calls.fetch_add(1);
                                        })));
  // On a compute unit (RUNNING), where slow_abort applies; then cancelled.
  REQUIRE(rtest::eventually([&] { return dev(f.ctx).stats().running == 1; }));
  auto cancelled_at = rtest::clock::now();
  asio::post(t.io, [&] { sig.emit(asio::cancellation_type::terminal); });  // on the handler's executor
  int in_use = 0;
  while (o.calls.load() == 0) {
    // Until the device reports the abort final, every host write fails; one
    // that succeeds is only allowed once the device is final.
    auto wc = rtest::host_write(v.c);
    auto wa = rtest::host_write(v.a);
    auto final_now = dev(f.ctx).stats().aborted;
    if (wc) CHECK(wc == errc::range_in_use);
    else CHECK(final_now == 1);
    if (wa) CHECK(wa == errc::range_in_use);
    else CHECK(final_now == 1);
    if (wc && wa && final_now == 0) ++in_use;
    std::this_thread::sleep_for(1ms);
  }
  t.join();
  MESSAGE("host writes refused during the abort: " << in_use);
  CHECK(o.calls.load() == 1);
  CHECK(o.device_final_at_call == 1);  // the handler ran after the device's final state
  CHECK(o.ec == asio::error::operation_aborted);
  CHECK(o.result.state == xrtio::run_state::abort);
  CHECK(o.at - cancelled_at >= 100ms);  // the device's abort delay is a lower bound
  CHECK(f.rt.stats().cancelled == 1);
  CHECK(f.rt.stats().retained == 0);
  CHECK(leases_free(v));
  CHECK(!rtest::host_write(v.c));
}

TEST_CASE("reliability: while a cancelled run's kernel holds off the abort, host writes fail with range_in_use and "
          "the handler is not called") {
  // The same promise held open deterministically: the kernel sees the abort's
  // stop request and finishes only when the test opens the gate.
  gate g;
  std::atomic<bool> saw_stop{false};
  sim::device_config cfg;
  cfg.kernels.push_back(sim::kernel_def{"held",
                                        {{"out", xrtio::backend::arg_kind::buffer, 0, 0}},
                                        [&](sim::kernel_call& c) {
                                          while (!c.stop_requested()) std::this_thread::sleep_for(100us);
                                          saw_stop = true;
                                          g.wait();
                                          c.buffer_as<std::uint32_t>(0)[0] = 0xfeed;  // the device still writes
                                        }});
  fixture f(cfg);
  open_at_exit opener{g};  // a failed REQUIRE must not leave the kernel waiting on the gate
  auto out = f.ctx.alloc(64);
  threaded_io t;
  async_outcome o;
  asio::cancellation_signal sig;
  xrtio::async_run(f.ctx.kernel("held"), xrtio::out(out),
                   asio::bind_cancellation_slot(sig.slot(), asio::bind_executor(t.io, [&](std::error_code ec,
                                                                                           xrtio::run_result r) {
                                                  o.ec = ec;
                                                  o.result = r;
                                                  o.calls.fetch_add(1);
                                                })));
  REQUIRE(rtest::eventually([&] { return dev(f.ctx).stats().running == 1; }));
  asio::post(t.io, [&] { sig.emit(asio::cancellation_type::terminal); });
  REQUIRE(rtest::eventually([&] { return saw_stop.load(); }));  // the abort reached the device
  for (int i = 0; i < 20; ++i) {
    CHECK(rtest::host_write(out) == errc::range_in_use);
    CHECK(o.calls.load() == 0);
    std::this_thread::sleep_for(1ms);
  }
  g.open();
  t.join();
  CHECK(o.calls.load() == 1);
  CHECK(o.ec == asio::error::operation_aborted);
  CHECK(o.result.state == xrtio::run_state::abort);
  std::uint32_t first = 0;
  out.read(std::span<std::uint32_t>(&first, 1));
  CHECK(first == 0xfeed);  // the device's late write landed while the range was still leased
  CHECK(xtest::tracker(out).active_count() == 0);
}

// ---- invariant 7: budgets through retention ----------------------------------------

TEST_CASE("reliability: a retained async run keeps its budget charge through dropped handles and its handler, "
          "until the device finishes and reap_retained runs") {
  xrtio::memory_budget budget(1 << 20);
  sim::device_config cfg = with_fault({.kernel = "vadd", .what = sim::fault::refuse_abort});
  fixture f(cfg);
  auto ctx = sim::open(std::move(cfg), budget);
  ctx.bind(f.rt);
  asio::io_context io;
  async_outcome o;
  auto reaped_before = xrtio::retained_runs();
  {
    auto v = make_vadd(ctx, 16);
    CHECK(budget.used() == 3 * 64);
    run_vadd(ctx, v, {.timeout = 5ms}, asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result r) {
               o.ec = ec;
               o.result = r;
               o.calls.fetch_add(1);
             }));
  }  // every buffer handle dropped while the run is in flight
  io.run();
  CHECK(o.calls.load() == 1);
  CHECK(o.ec == errc::abort_failed);
  CHECK(budget.used() == 3 * 64);  // after the handler: still charged
  CHECK(xrtio::retained_runs() == reaped_before + 1);
  xrtio::reap_retained();  // the device has not finished: nothing is released
  CHECK(budget.used() == 3 * 64);
  dev(ctx).lose();  // the device finishes the run (NORESPONSE)
  CHECK(budget.used() == 3 * 64);  // not before reap_retained
  CHECK(xrtio::reap_retained() >= 1);
  CHECK(budget.used() == 0);
  CHECK(xrtio::retained_runs() == reaped_before);
}

TEST_CASE("reliability: a run retained at runtime shutdown keeps its budget charge until the device finishes and "
          "reap_retained runs") {
  xrtio::memory_budget budget(1 << 20);
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::refuse_abort}), budget);
  asio::io_context io;
  async_outcome o;
  auto before = xrtio::retained_runs();
  {
    auto rt = std::make_unique<rtest::mode_runtime>(xrtio::runtime_options{.shutdown_grace = 20ms});
    ctx.bind(*rt);
    {
      auto v = make_vadd(ctx, 16);
      run_vadd(ctx, v, {}, asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                 o.ec = ec;
                 o.calls.fetch_add(1);
               }));
    }
    REQUIRE(rtest::eventually([&] { return dev(ctx).stats().running == 1; }));
    rt.reset();  // aborts the run; the device refuses: retained
  }
  io.run();
  CHECK(o.calls.load() == 1);
  CHECK(o.ec == errc::abort_failed);
  CHECK(xrtio::retained_runs() == before + 1);
  CHECK(budget.used() == 3 * 64);
  xrtio::reap_retained();
  CHECK(budget.used() == 3 * 64);
  dev(ctx).lose();
  CHECK(budget.used() == 3 * 64);
  CHECK(xrtio::reap_retained() >= 1);
  CHECK(budget.used() == 0);
}

// ---- invariants 1 and 3: cancellation racing completion ----------------------------

TEST_CASE("reliability: 10 000 runs cancelled as the device completes them, on a 4-thread io_context: one call "
          "each, !ec exactly when COMPLETED, leases freed, stats reconcile") {
  const int total = rtest::sanitized ? 4000 : 10000;
  constexpr int lanes = 16;
  struct lane {
    std::optional<asio::strand<asio::io_context::executor_type>> strand;
    asio::cancellation_signal sig;
    xrtio::buffer buf;
    int next = 0;
  };
  asio::io_context io;
  std::vector<lane> ls(lanes);
  // The kernel's last act before the device publishes COMPLETED: post the
  // run's cancellation to its strand (where the handler will run, so emit
  // and completion never overlap). The cancellation then reaches the reactor
  // around the moment the run turns final, before its handler.
  sim::device_config cfg;
  cfg.compute_units = 2;
  cfg.kernels.push_back(sim::kernel_def{"racer",
                                        {{"buf", xrtio::backend::arg_kind::buffer, 0, 0},
                                         {"lane", xrtio::backend::arg_kind::scalar, 4, 0}},
                                        [&](sim::kernel_call& c) {
                                          auto& l = ls[c.scalar<std::uint32_t>(1)];
                                          c.buffer_as<std::uint32_t>(0)[0] += 1;
                                          static constexpr asio::cancellation_type kinds[] = {
                                              asio::cancellation_type::terminal, asio::cancellation_type::partial};
                                          auto kind = kinds[c.run_number() % 2];
                                          asio::post(*l.strand, [&l, kind] { l.sig.emit(kind); });
                                        }});
  fixture f(cfg);
  auto k = f.ctx.kernel("racer");
  std::vector<std::atomic<int>> calls(total);
  std::atomic<int> launched{0}, ok{0}, aborted{0}, inconsistent{0}, other{0};
  std::function<void(std::uint32_t)> launch = [&](std::uint32_t li) {
    int id = launched.fetch_add(1);
    if (id >= total) return;
    auto& l = ls[li];
    xrtio::async_run(k, xrtio::inout(l.buf), li,
                     asio::bind_cancellation_slot(
                         l.sig.slot(), asio::bind_executor(*l.strand, [&, id, li](std::error_code ec,
                                                                                  xrtio::run_result r) {
                           calls[id].fetch_add(1);
                           if (!ec != (r.state == xrtio::run_state::completed)) inconsistent.fetch_add(1);
                           if (!ec) ok.fetch_add(1);
                           else if (ec == asio::error::operation_aborted) aborted.fetch_add(1);
                           else other.fetch_add(1);
                           launch(li);
                         })));
  };
  for (std::uint32_t i = 0; i < lanes; ++i) {
    ls[i].strand.emplace(asio::make_strand(io));
    ls[i].buf = f.ctx.alloc(64);
    asio::post(*ls[i].strand, [&launch, i] { launch(i); });
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&] { io.run(); });
  for (auto& t : threads) t.join();

  int not_once = 0;
  for (auto& c : calls)
    if (c.load() != 1) ++not_once;
  MESSAGE("completed " << ok.load() << ", aborted " << aborted.load() << ", other " << other.load() << " of "
                       << total);
  CHECK(not_once == 0);
  CHECK(inconsistent.load() == 0);
  CHECK(other.load() == 0);
  CHECK(ok.load() + aborted.load() == total);
  CHECK(ok.load() > 0);       // both sides of the race were seen
  CHECK(aborted.load() > 0);
  auto s = f.rt.stats();
  CHECK(s.submitted == std::uint64_t(total));
  CHECK(s.completed == std::uint64_t(ok.load()));
  CHECK(s.cancelled == std::uint64_t(aborted.load()));
  CHECK(s.failed == 0);
  CHECK(s.retained == 0);
  CHECK(s.in_flight == 0);
  auto d = dev(f.ctx).stats();
  CHECK(d.started == std::uint64_t(total));
  CHECK(d.completed + d.aborted == d.started);
  CHECK(d.completed >= s.completed);  // a run may complete while its abort is on its way: then it succeeded
  CHECK(d.running == 0);
  for (auto& l : ls) CHECK(xtest::tracker(l.buf).active_count() == 0);
}

// ---- invariant 5: a retained prepared run --------------------------------------
// (A run waiting behind a retained run: tests/test_soak_regressions.cpp.)

TEST_CASE("reliability: a retained prepared run stays busy until reaped, then executes again") {
  // Run 1 hangs and ignores its abort; the device then completes it by itself
  // only when the test says so (a timed hang would race the test).
  gate g;
  std::atomic<int> executions{0};
  sim::device_config cfg;
  cfg.kernels.push_back(sim::kernel_def{"once_stuck",
                                        {{"out", xrtio::backend::arg_kind::buffer, 0, 0}},
                                        [&](sim::kernel_call& c) {
                                          if (executions.fetch_add(1) == 0) g.wait();  // ignores stop requests
                                          c.buffer_as<std::uint32_t>(0)[0] = 7;
                                        }});
  xrtio::runtime_options ro;
  ro.abort_grace = 20ms;  // an abort the kernel ignores is not final in time: retained
  fixture f(cfg, ro);
  open_at_exit opener{g};
  auto out = f.ctx.alloc(64);
  auto p = xrtio::prepare(f.ctx.kernel("once_stuck"), xrtio::out(out));
  // Each io.run_for below has handlers that are due in milliseconds (at most
  // abort_grace after the cancellation); the limit only turns a regression
  // into a failed CHECK instead of a hang until the suite's watchdog.
  constexpr auto limit = 30s;
  asio::io_context io;
  asio::cancellation_signal sig;
  std::error_code first{errc::run_error}, second{errc::run_error}, third{errc::run_error};
  xrtio::async_execute(p, asio::bind_cancellation_slot(
                              sig.slot(), asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                                first = ec;
                              })));
  // The abort must find the run in its kernel. A run still queued for a
  // compute unit (idle units sleep, and a loaded host may not wake one for a
  // long while) is aborted at once and never retained; a timeout instead of
  // the cancellation raced that: the run timed out, the prepared run was
  // free, and the second execution really started the kernel, which waited
  // on the gate for good.
  REQUIRE(rtest::eventually([&] { return executions.load() == 1; }));
  sig.emit(asio::cancellation_type::terminal);  // io is not running: this thread is its handlers' thread
  io.run_for(limit);
  CHECK(io.stopped());
  CHECK(first == errc::abort_failed);
  CHECK(p.in_flight());
  io.restart();
  xrtio::async_execute(p, asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) { second = ec; }));
  io.run_for(limit);
  CHECK(io.stopped());
  CHECK(second == errc::busy);
  xrtio::reap_retained();  // still executing: kept
  CHECK(p.in_flight());
  CHECK(executions.load() == 1);  // the busy execution never reached the device
  g.open();  // the device finishes the run
  CHECK(rtest::eventually([&] {
    xrtio::reap_retained();
    return !p.in_flight();
  }));
  io.restart();
  xrtio::async_execute(p, asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) { third = ec; }));
  io.run_for(limit);
  CHECK(io.stopped());
  CHECK(!third);
  CHECK(executions.load() == 2);
}

// ---- invariant 3: device loss with asynchronous runs in flight ---------------------

TEST_CASE("reliability: losing the device with async runs in flight ends every run with device_lost, and later "
          "runs fail at once") {
  fixture f(with_fault({.kernel = "vadd", .what = sim::fault::hang}));
  std::vector<rtest::vadd_set> sets;
  for (int i = 0; i < 6; ++i) sets.push_back(make_vadd(f.ctx));
  asio::io_context io;
  std::vector<async_outcome> os(6);
  for (int i = 0; i < 6; ++i)
    run_vadd(f.ctx, sets[i], {}, asio::bind_executor(io, [&os, i](std::error_code ec, xrtio::run_result r) {
               os[i].ec = ec;
               os[i].result = r;
               os[i].calls.fetch_add(1);
             }));
  REQUIRE(rtest::eventually([&] { return dev(f.ctx).stats().running == 6; }));
  dev(f.ctx).lose();
  io.run();
  for (auto& o : os) {
    CHECK(o.calls.load() == 1);
    CHECK(o.ec == errc::device_lost);
    CHECK(o.result.state == xrtio::run_state::no_response);
  }
  for (auto& v : sets) CHECK(leases_free(v));
  async_outcome late;
  io.restart();
  run_vadd(f.ctx, sets[0], {}, asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
             late.ec = ec;
             late.calls.fetch_add(1);
           }));
  io.run();
  CHECK(late.calls.load() == 1);
  CHECK(late.ec == errc::device_lost);
  CHECK(dev(f.ctx).stats().started == 6);
  CHECK(f.rt.stats().in_flight == 0);
}

// ---- other executors ---------------------------------------------------------------

namespace {
/// A minimal user-defined executor that counts what it runs and runs it on
/// its own single thread. Its tracked copies count outstanding work, as an
/// io_context's do, and note a tracked copy destroyed on another thread.
class counting_context {
 public:
  counting_context() : thread_([this] { loop(); }) {}
  ~counting_context() { shutdown(); }
  /// Stops the thread and destroys the queued work without running it.
  void shutdown() {
    {
      std::lock_guard l(m_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_all();
    thread_.join();
    std::deque<std::function<void()>> drop;
    {
      std::lock_guard l(m_);
      drop.swap(q_);
    }
  }
  void post(std::function<void()> f) {
    {
      std::lock_guard l(m_);
      if (stopped_) return;  // destroyed uncalled
      q_.push_back(std::move(f));
    }
    cv_.notify_one();
  }
  bool on_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
  std::atomic<int> executed{0};
  std::atomic<int> outstanding{0};
  std::atomic<long> work{0};                 // tracked copies alive
  std::atomic<int> work_dropped_elsewhere{0};  // tracked copies destroyed off this context's thread

  struct executor {
    counting_context* ctx;
    bool tracked = false;
    executor(counting_context* c, bool t = false) noexcept : ctx(c), tracked(t) {
      if (tracked) ctx->work.fetch_add(1);
    }
    executor(const executor& o) noexcept : executor(o.ctx, o.tracked) {}
    executor& operator=(const executor& o) noexcept {
      if (this != &o) {
        this->~executor();
        new (this) executor(o);
      }
      return *this;
    }
    ~executor() {
      if (!tracked) return;
      ctx->work.fetch_sub(1);
      if (!ctx->on_thread()) ctx->work_dropped_elsewhere.fetch_add(1);
    }
    bool operator==(const executor& o) const noexcept { return ctx == o.ctx; }
    template <class F>
    void execute(F&& f) const {
      auto p = std::make_shared<std::decay_t<F>>(std::forward<F>(f));
      ctx->post([c = ctx, p] {
        c->executed.fetch_add(1);
        (*p)();
      });
    }
    asio::execution_context& query(asio::execution::context_t) const noexcept { return ctx->ec_; }
    // Without this query Asio takes every copy for untracked already, and
    // prefer(untracked) returns a tracked one unchanged.
    asio::execution::outstanding_work_t query(asio::execution::outstanding_work_t) const noexcept {
      if (tracked) return asio::execution::outstanding_work.tracked;
      return asio::execution::outstanding_work.untracked;
    }
    executor require(asio::execution::outstanding_work_t::tracked_t) const noexcept { return {ctx, true}; }
    executor require(asio::execution::outstanding_work_t::untracked_t) const noexcept { return {ctx, false}; }
    static constexpr asio::execution::blocking_t::never_t query(asio::execution::blocking_t) noexcept { return {}; }
    executor require(asio::execution::blocking_t::never_t) const noexcept { return *this; }
    executor prefer(asio::execution::relationship_t::continuation_t) const noexcept { return *this; }
  };
  executor get_executor() { return {this}; }

 private:
  void loop() {
    std::unique_lock l(m_);
    for (;;) {
      cv_.wait(l, [&] { return stopped_ || !q_.empty(); });
      if (stopped_) return;
      auto f = std::move(q_.front());
      q_.pop_front();
      l.unlock();
      f();
      l.lock();
    }
  }
  asio::execution_context ec_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stopped_ = false;
  std::thread thread_;
};
}  // namespace

TEST_CASE("reliability: co_spawn on a thread_pool and on a user-defined executor resumes there exactly once per "
          "run") {
  fixture f;
  auto v = make_vadd(f.ctx);
  constexpr int runs = 50;
  asio::thread_pool pool(2);
  std::atomic<int> pool_resumes{0}, pool_wrong{0};
  std::promise<void> pool_done;
  asio::co_spawn(
      pool,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < runs; ++i) {
          co_await run_vadd(f.ctx, v, {}, asio::use_awaitable);
          pool_resumes.fetch_add(1);
          if (!pool.get_executor().running_in_this_thread()) pool_wrong.fetch_add(1);
        }
      },
      [&](std::exception_ptr e) {
        rtest::rethrow(e);
        pool_done.set_value();
      });
  pool_done.get_future().get();
  CHECK(pool_resumes.load() == runs);
  CHECK(pool_wrong.load() == 0);

  counting_context cc;
  std::atomic<int> resumes{0}, wrong{0};
  std::promise<void> done;
  asio::co_spawn(
      cc.get_executor(),
      [&]() -> asio::awaitable<void, counting_context::executor> {
        for (int i = 0; i < runs; ++i) {
          int before = cc.executed.load();
          co_await run_vadd(f.ctx, v, {}, asio::use_awaitable_t<counting_context::executor>{});
          resumes.fetch_add(1);
          if (!cc.on_thread()) wrong.fetch_add(1);
          if (cc.executed.load() != before + 1) wrong.fetch_add(1);  // one resumption, through this executor
        }
      },
      [&](std::exception_ptr e) {
        rtest::rethrow(e);
        done.set_value();
      });
  done.get_future().get();
  CHECK(resumes.load() == runs);
  CHECK(wrong.load() == 0);
  CHECK(f.rt.stats().completed == 2 * runs);
}

// An operation's outstanding work is the handler's executor's, and only the
// handler's thread may end it: a tracked copy dropped on the reactor's (or
// driver's) thread could be the context's last work, and Asio's io_context
// stops itself when its work count reaches zero, after a decrement another
// thread may be preempted in; the io_context its owner had restarted for the
// next operation was then stopped with that operation's handler queued
// (docs/DESIGN.md, "File I/O", "Waking"; run_op::send).
TEST_CASE("reliability: the handler's outstanding work is kept until the handler ran, and ended on its thread only") {
  fixture f;
  constexpr int runs = 200;
  counting_context cc;
  std::atomic<int> calls{0}, work_missing{0};
  std::promise<void> all_done;
  cc.post([&] {
    for (int i = 0; i < runs; ++i)
      xrtio::async_run(f.ctx.kernel("noop"), asio::bind_executor(cc.get_executor(), [&](std::error_code ec,
                                                                                      xrtio::run_result) {
                         CHECK(!ec);
                         // Each op not yet finished holds its own work, this one's included.
                         if (cc.work.load() < runs - calls.load()) work_missing.fetch_add(1);
                         if (calls.fetch_add(1) + 1 == runs) all_done.set_value();
                       }));
  });
  REQUIRE(all_done.get_future().wait_for(30s) == std::future_status::ready);
  // The last handler's work is dropped after it returns, on cc's thread.
  REQUIRE(rtest::eventually([&] { return cc.work.load() == 0; }));
  CHECK(calls.load() == runs);
  CHECK(work_missing.load() == 0);
  CHECK_MESSAGE(cc.work_dropped_elsewhere.load() == 0,
                "tracked copies of the handler's executor destroyed off its thread: " << cc.work_dropped_elsewhere.load());
}

TEST_CASE("reliability: destroying a user-defined executor with a run pending destroys the handler uncalled, "
          "leases held until the device is final") {
  gate g;
  sim::device_config cfg;
  cfg.kernels.push_back(sim::kernel_def{"held", {{"out", xrtio::backend::arg_kind::buffer, 0, 0}},
                                        [&](sim::kernel_call&) { g.wait(); }});
  fixture f(cfg);
  open_at_exit opener{g};  // a failed REQUIRE must not leave the kernel waiting on the gate
  auto out = f.ctx.alloc(64);
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  std::atomic<int> calls{0};
  {
    counting_context cc;
    xrtio::async_run(f.ctx.kernel("held"), xrtio::out(out),
                     asio::bind_executor(cc.get_executor(), [&calls, keep = std::move(alive)](std::error_code,
                                                                                             xrtio::run_result) {
                       calls.fetch_add(1);
                     }));
    REQUIRE(rtest::eventually([&] { return dev(f.ctx).stats().running == 1; }));
    cc.shutdown();
  }
  // counting_context's execution_context is gone: xrtio's completion
  // registry destroyed the handler with it.
  CHECK(watch.expired());
  CHECK(calls.load() == 0);
  CHECK(rtest::host_write(out) == errc::range_in_use);  // the device still runs
  g.open();
  CHECK(rtest::eventually([&] { return !rtest::host_write(out); }));
  CHECK(calls.load() == 0);
  CHECK(rtest::eventually([&] { return f.rt.stats().in_flight == 0; }));
  CHECK(xtest::tracker(out).active_count() == 0);
}
