// Invariant 1 (docs/DESIGN.md): every completion runs exactly once through
// the handler's associated executor, whatever that executor is: a strand
// held by its own type or type-erased in any_io_executor, a thread_pool, a
// strand of a thread_pool, a user-defined executor. Batching never merges
// completions whose executors differ, even when they share a context.
#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "reactor_support.hpp"

using namespace std::chrono_literals;
using rtest::fixture;

namespace {

constexpr int io_threads = 4;
constexpr int strands = 8;
constexpr int per_strand = 100;

xrtio::sim::device_config jittery() {
  xrtio::sim::device_config cfg;
  cfg.latency.jitter = 50us;  // completions of different strands interleave
  return cfg;
}

void run_threads(asio::io_context& io, int n = io_threads) {
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i) ts.emplace_back([&] { io.run(); });
  for (auto& t : ts) t.join();
}

/// What a strand-bound coroutine records: resumes and how many of them were
/// inside its strand. A counter touched only inside the strand, without
/// atomics, lets TSan see any resume outside it as a race.
struct strand_tally {
  asio::strand<asio::io_context::executor_type> strand;
  int resumes = 0;  // strand-protected, deliberately not atomic
  int in_strand = 0;
  int errors = 0;
};

enum class token_kind { awaitable, as_tuple, redirect_error };

asio::awaitable<void> strand_worker(xrtio::context ctx, strand_tally& t, token_kind kind) {
  for (int i = 0; i < per_strand; ++i) {
    std::error_code ec;
    switch (kind) {
      case token_kind::awaitable:
        co_await xrtio::async_run(ctx.kernel("noop"), asio::use_awaitable);
        break;
      case token_kind::as_tuple: {
        auto [e, r] = co_await xrtio::async_run(ctx.kernel("noop"), asio::experimental::as_tuple(asio::use_awaitable));
        ec = e;
        break;
      }
      case token_kind::redirect_error:
        co_await xrtio::async_run(ctx.kernel("noop"), asio::redirect_error(asio::use_awaitable, ec));
        break;
    }
    ++t.resumes;
    if (t.strand.running_in_this_thread()) ++t.in_strand;
    if (ec) ++t.errors;
  }
}

/// Every tally resumed `n` times, all in its strand, without errors.
void check_tallies(const std::vector<std::unique_ptr<strand_tally>>& tallies, int n) {
  for (auto& t : tallies) {
    CHECK(t->resumes == n);
    CHECK(t->in_strand == n);
    CHECK(t->errors == 0);
  }
}

/// One coroutine per strand of `io` (8 strands), made by `body(tally)`;
/// runs `io` on 4 threads, then checks each tally resumed `n` times in its strand.
template <class Body>
void run_strand_coroutines(Body body, int n) {
  asio::io_context io;
  std::vector<std::unique_ptr<strand_tally>> tallies;
  for (int s = 0; s < strands; ++s) {
    tallies.push_back(std::make_unique<strand_tally>(strand_tally{asio::make_strand(io)}));
    asio::co_spawn(tallies.back()->strand, body(*tallies.back()), rtest::rethrow);
  }
  run_threads(io);
  check_tallies(tallies, n);
}

void check_strand_coroutines(token_kind kind) {
  fixture f(jittery());
  asio::io_context io;
  std::vector<std::unique_ptr<strand_tally>> tallies;
  for (int s = 0; s < strands; ++s) {
    tallies.push_back(std::make_unique<strand_tally>(strand_tally{asio::make_strand(io)}));
    asio::co_spawn(tallies.back()->strand, strand_worker(f.ctx, *tallies.back(), kind), rtest::rethrow);
  }
  run_threads(io);
  int resumes = 0, in_strand = 0, errors = 0;
  for (auto& t : tallies) {
    resumes += t->resumes;
    in_strand += t->in_strand;
    errors += t->errors;
  }
  MESSAGE("resumed " << resumes << ", on strand " << in_strand);
  CHECK(resumes == strands * per_strand);
  CHECK(in_strand == strands * per_strand);
  CHECK(errors == 0);
}

/// Callbacks bound to `make_ex(strand)`; each checks its strand.
template <class MakeEx>
void check_strand_callbacks(MakeEx make_ex) {
  fixture f(jittery());
  asio::io_context io;
  std::vector<asio::strand<asio::io_context::executor_type>> ss;
  for (int s = 0; s < strands; ++s) ss.push_back(asio::make_strand(io));
  std::vector<int> in_strand(strands, 0), calls(strands, 0);  // each touched only in its strand
  for (int i = 0; i < strands * 50; ++i) {
    int s = i % strands;
    xrtio::async_run(f.ctx.kernel("noop"), asio::bind_executor(make_ex(ss[s]), [&, s](std::error_code ec, xrtio::run_result) {
                       CHECK(!ec);
                       ++calls[s];
                       if (ss[s].running_in_this_thread()) ++in_strand[s];
                     }));
  }
  run_threads(io);
  for (int s = 0; s < strands; ++s) {
    CHECK(calls[s] == 50);
    CHECK(in_strand[s] == 50);
  }
}

/// A user-defined executor: forwards to an io_context executor and marks
/// the functions it runs, so a handler can tell it came through this type.
thread_local int inside_user_executor = 0;

struct user_executor {
  asio::io_context* io;
  std::atomic<int>* executed;

  asio::execution_context& query(asio::execution::context_t) const noexcept { return *io; }
  static constexpr asio::execution::blocking_t::never_t query(asio::execution::blocking_t) noexcept { return {}; }
  template <class F>
  void execute(F f) const {
    ++*executed;
    asio::post(*io, [f = std::move(f)]() mutable {
      ++inside_user_executor;
      std::move(f)();
      --inside_user_executor;
    });
  }
  bool operator==(const user_executor& o) const noexcept { return io == o.io && executed == o.executed; }
  bool operator!=(const user_executor& o) const noexcept { return !(*this == o); }
};
static_assert(asio::execution::is_executor_v<user_executor>);

}  // namespace

TEST_CASE("executors: coroutines on strands of a 4-thread io_context resume in their strand (use_awaitable)") {
  check_strand_coroutines(token_kind::awaitable);
}

TEST_CASE("executors: coroutines on strands of a 4-thread io_context resume in their strand (as_tuple)") {
  check_strand_coroutines(token_kind::as_tuple);
}

TEST_CASE("executors: coroutines on strands of a 4-thread io_context resume in their strand (redirect_error)") {
  check_strand_coroutines(token_kind::redirect_error);
}

TEST_CASE("executors: callbacks bound to any_io_executor(strand) run in their strand") {
  check_strand_callbacks([](auto& s) { return asio::any_io_executor(s); });
}

TEST_CASE("executors: callbacks bound to the strand's own type run in their strand") {
  check_strand_callbacks([](auto& s) { return s; });
}

TEST_CASE("executors: strands of one io_context are never merged into one batch") {
  // Many strands, one run each, all completing at once: the reactor sees
  // one context and must still post each strand's completions to it alone.
  fixture f;
  asio::io_context io;
  constexpr int n = 256;
  std::vector<asio::strand<asio::io_context::executor_type>> ss;
  for (int i = 0; i < n; ++i) ss.push_back(asio::make_strand(io));
  std::vector<int> ok(n, 0);
  for (int i = 0; i < n; ++i)
    xrtio::async_run(f.ctx.kernel("noop"),
                     asio::bind_executor(asio::any_io_executor(ss[i]), [&, i](std::error_code ec, xrtio::run_result) {
                       CHECK(!ec);
                       ok[i] = ss[i].running_in_this_thread() ? 1 : -1;
                     }));
  run_threads(io, 2);
  int good = 0;
  for (int v : ok) good += v == 1;
  CHECK(good == n);
}

TEST_CASE("executors: a handler bound to a strand of a thread_pool runs in that strand") {
  fixture f(jittery());
  asio::thread_pool pool(3);
  auto strand = asio::make_strand(pool);
  constexpr int n = 200;
  int calls = 0, in_strand = 0;  // strand-protected
  std::promise<void> all;
  for (int i = 0; i < n; ++i)
    xrtio::async_run(f.ctx.kernel("noop"), asio::bind_executor(asio::any_io_executor(strand), [&](std::error_code ec, xrtio::run_result) {
                       CHECK(!ec);
                       if (strand.running_in_this_thread()) ++in_strand;
                       if (++calls == n) all.set_value();
                     }));
  REQUIRE(all.get_future().wait_for(10s) == std::future_status::ready);
  pool.join();
  CHECK(in_strand == n);
}

TEST_CASE("executors: a coroutine on a thread_pool strand resumes in that strand") {
  fixture f(jittery());
  asio::thread_pool pool(3);
  auto strand = asio::make_strand(pool);
  int resumes = 0, in_strand = 0;
  std::promise<void> done;
  asio::co_spawn(
      strand,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 200; ++i) {
          co_await xrtio::async_run(f.ctx.kernel("noop"), asio::use_awaitable);
          ++resumes;
          if (strand.running_in_this_thread()) ++in_strand;
        }
      },
      [&](std::exception_ptr e) {
        CHECK(!e);
        done.set_value();
      });
  REQUIRE(done.get_future().wait_for(10s) == std::future_status::ready);
  pool.join();
  CHECK(resumes == 200);
  CHECK(in_strand == 200);
}

// README, "What it looks like": a callback with no associated executor runs
// on Asio's system_executor, a thread of Asio's own, not the caller's (no
// io_context need run) and not inside the initiating call.
TEST_CASE("executors: a plain callback with no associated executor completes on a thread of Asio's own") {
  fixture f;
  const auto caller = std::this_thread::get_id();
  // Shared with the handler: set_value may still be returning on Asio's
  // thread when this test's scope ends.
  auto where = std::make_shared<std::promise<std::thread::id>>();
  auto fut = where->get_future();
  auto returned = std::make_shared<std::atomic<bool>>(false);
  auto inline_call = std::make_shared<std::atomic<bool>>(false);
  xrtio::async_run(f.ctx.kernel("noop"), [=](std::error_code ec, xrtio::run_result r) {
    CHECK(!ec);
    CHECK(r.ok());
    *inline_call = !*returned && std::this_thread::get_id() == caller;
    where->set_value(std::this_thread::get_id());
  });
  *returned = true;
  REQUIRE(fut.wait_for(10s) == std::future_status::ready);
  CHECK(fut.get() != caller);
  CHECK(!inline_call->load());
}

TEST_CASE("executors: a user-defined executor type runs the handler") {
  fixture f;
  asio::io_context io;
  std::atomic<int> executed{0};
  user_executor ux{&io, &executed};
  // Atomic: the main thread polls these while handlers still arrive (a
  // plain int here is a data race TSan reports).
  std::atomic<int> calls{0}, inside{0};
  for (int i = 0; i < 50; ++i)
    xrtio::async_run(f.ctx.kernel("noop"), asio::bind_executor(ux, [&](std::error_code ec, xrtio::run_result) {
                       CHECK(!ec);
                       ++calls;
                       inside += inside_user_executor > 0;
                     }));
  // The user executor tracks no work: keep run() going until all arrived.
  auto guard = asio::make_work_guard(io);
  std::thread t([&] { io.run(); });
  REQUIRE(rtest::eventually([&] { return calls.load() == 50; }));
  guard.reset();
  t.join();
  CHECK(calls.load() == 50);
  CHECK(inside.load() == 50);
  CHECK(executed.load() >= 1);
}

TEST_CASE("executors: prepared runs and chains complete in the strand of a coroutine on a multi-threaded io_context") {
  fixture f(jittery());
  run_strand_coroutines(
      [&f](strand_tally& t) -> asio::awaitable<void> {
        auto p = xrtio::prepare(f.ctx.kernel("noop"));
        for (int i = 0; i < 20; ++i) {
          co_await xrtio::async_execute(p, asio::use_awaitable);
          ++t.resumes;
          if (t.strand.running_in_this_thread()) ++t.in_strand;
          std::vector<xrtio::prepared_run> chain{xrtio::prepare(f.ctx.kernel("noop")),
                                                 xrtio::prepare(f.ctx.kernel("noop"))};
          auto r = co_await xrtio::async_run_chain(std::move(chain), asio::use_awaitable);
          ++t.resumes;
          if (t.strand.running_in_this_thread()) ++t.in_strand;
          if (r.completed != 2) ++t.errors;
          // An empty chain completes at once, still through the strand.
          co_await xrtio::async_run_chain({}, asio::use_awaitable);
          ++t.resumes;
          if (t.strand.running_in_this_thread()) ++t.in_strand;
        }
      },
      60);
}

TEST_CASE("executors: runs rejected for bad arguments complete in the caller's strand") {
  fixture f;
  run_strand_coroutines(
      [&f](strand_tally& t) -> asio::awaitable<void> {
        auto v = rtest::make_vadd(f.ctx);
        for (int i = 0; i < 20; ++i) {
          // Wrong argument count: rejected before the device.
          auto [ec, r] = co_await xrtio::async_run(f.ctx.kernel("vadd"), xrtio::in(v.a),
                                                   asio::experimental::as_tuple(asio::use_awaitable));
          ++t.resumes;
          if (t.strand.running_in_this_thread()) ++t.in_strand;
          if (ec != xrtio::errc::argument_count) ++t.errors;
        }
      },
      20);
}

TEST_CASE("executors: runtime shutdown completes pending runs in their strands") {
  asio::io_context io;
  auto strand = asio::make_strand(io);
  int calls = 0, in_strand = 0;
  {
    xrtio::sim::device_config cfg;
    cfg.latency.fixed = 2ms;
    fixture f(cfg);
    for (int i = 0; i < 20; ++i)
      xrtio::async_run(f.ctx.kernel("noop"), asio::bind_executor(asio::any_io_executor(strand), [&](std::error_code, xrtio::run_result) {
                         ++calls;
                         if (strand.running_in_this_thread()) ++in_strand;
                       }));
  }  // runtime and context destroyed with runs in flight
  run_threads(io, 2);
  CHECK(calls == 20);
  CHECK(in_strand == 20);
}

// ---- never inside the initiating call, from inside a running handler ------------

TEST_CASE("executors: from inside a running handler, async_run and async_run_chain never complete inline") {
  fixture f;
  asio::io_context io;
  auto v = rtest::make_vadd(f.ctx);
  auto p = xrtio::prepare(f.ctx.kernel("noop"));
  std::atomic<bool> inside{false};
  std::atomic<int> calls{0}, inline_calls{0};
  std::thread::id initiator;
  auto cb = [&](std::error_code, auto) {
    // Inline: on the initiating thread while the initiating handler runs.
    if (inside.load() && std::this_thread::get_id() == initiator) ++inline_calls;
    ++calls;
  };
  asio::post(io, [&] {
    initiator = std::this_thread::get_id();
    inside = true;
    xrtio::async_run_chain({}, cb);                                                       // empty chain, system executor
    xrtio::async_run_chain({}, asio::bind_executor(io, cb));                              // empty chain, this io_context
    xrtio::async_run(f.ctx.kernel("vadd"), xrtio::in(v.a), asio::bind_executor(io, cb));  // rejected at once
    xrtio::async_run(f.ctx.kernel("noop"), asio::bind_executor(io, cb));
    xrtio::async_execute(p, asio::bind_executor(io, cb));
    xrtio::async_execute(p, asio::bind_executor(io, cb));  // busy: completes at once
    std::this_thread::sleep_for(20ms);                     // room for a wrong inline or early call
    inside = false;
  });
  io.run();
  CHECK(rtest::eventually([&] { return calls.load() == 6; }));
  CHECK(inline_calls.load() == 0);
}

TEST_CASE("executors: an empty chain with a callback completes after async_run_chain returned, on the io_context") {
  asio::io_context io;
  bool returned = false, called = false, on_io = false;
  asio::post(io, [&] {
    xrtio::async_run_chain({}, asio::bind_executor(io, [&](std::error_code ec, xrtio::chain_result r) {
                             CHECK(!ec);
                             CHECK(r.completed == 0);
                             called = true;
                             CHECK(returned);
                             on_io = io.get_executor().running_in_this_thread();
                           }));
    returned = true;
  });
  io.run();
  CHECK(called);
  CHECK(on_io);
}

// ---- outstanding work ----------------------------------------------------------
// A pending run is outstanding work of its handler's io_context, whatever
// executor type carries it (here any_io_executor over the io_context or a
// strand of it, as use_awaitable's): run() waits for every pending handler,
// and returns once the last has run, its work let go.

namespace {
/// io.run() on a thread of its own: whether it returned within `limit`
/// (if not, the io_context is stopped so that the thread can be joined).
bool run_returns_within(asio::io_context& io, std::chrono::milliseconds limit) {
  std::promise<void> returned;
  auto fut = returned.get_future();
  std::thread t([&] {
    io.run();
    returned.set_value();
  });
  bool ok = fut.wait_for(limit) == std::future_status::ready;
  if (!ok) io.stop();
  t.join();
  return ok;
}
}  // namespace

TEST_CASE("executors: run() waits for runs whose handlers are on any_io_executor, and returns after the last") {
  xrtio::sim::device_config cfg;
  cfg.latency.fixed = 20ms;
  cfg.latency.jitter = 10ms;
  fixture f(cfg);
  asio::io_context io;
  auto strand = asio::make_strand(io);
  std::atomic<int> calls{0};
  std::atomic<bool> early{false};  // a handler ran before its run was final
  auto t0 = rtest::clock::now();
  for (int i = 0; i < 20; ++i) {
    auto cb = [&](std::error_code ec, xrtio::run_result r) {
      CHECK(!ec);
      if (r.state != xrtio::run_state::completed) early = true;
      ++calls;
    };
    // Submitted before run(): no other work keeps the io_context going.
    if (i % 2) xrtio::async_run(f.ctx.kernel("noop"), asio::bind_executor(asio::any_io_executor(io.get_executor()), cb));
    else xrtio::async_run(f.ctx.kernel("noop"), asio::bind_executor(asio::any_io_executor(strand), cb));
  }
  REQUIRE(run_returns_within(io, 10s));
  CHECK(calls.load() == 20);  // run() returned after every handler, not before
  CHECK(rtest::clock::now() - t0 >= 20ms);
  CHECK(!early.load());
  // Nothing pending any more: the work was let go, so run() returns at once
  // (work still held would keep run() going for good).
  io.restart();
  CHECK(run_returns_within(io, 2s));
}

TEST_CASE("executors: a chain of callbacks on any_io_executor keeps run() going between its runs") {
  // Each handler submits the next run: the finished run's work goes as the
  // next run's comes, while the handler (itself work of the io_context)
  // runs. Plain callbacks, not a coroutine: co_spawn keeps work of its own
  // for the coroutine's whole life, which would hide a run that kept none.
  xrtio::sim::device_config cfg;
  cfg.latency.fixed = 2ms;
  fixture f(cfg);
  asio::io_context io;
  asio::any_io_executor ex = io.get_executor();
  int done = 0;
  std::function<void()> next = [&] {
    xrtio::async_run(f.ctx.kernel("noop"), asio::bind_executor(ex, [&](std::error_code ec, xrtio::run_result) {
                       CHECK(!ec);
                       if (++done < 10) next();
                     }));
  };
  next();  // before run(): only the run's own work keeps run() going
  REQUIRE(run_returns_within(io, 10s));
  CHECK(done == 10);
}

TEST_CASE("executors: runs on any_io_executor submitted while run() goes on other threads keep it going") {
  // Two io threads, runs submitted from a third thread one at a time: the
  // runs' work falls to none and rises again many times while run() is
  // live, and never stops the io_context the user's guard holds.
  xrtio::sim::device_config cfg;
  cfg.latency.fixed = 200us;
  fixture f(cfg);
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  std::vector<std::thread> ts;
  for (int i = 0; i < 2; ++i) ts.emplace_back([&] { io.run(); });
  std::atomic<int> calls{0};
  asio::any_io_executor ex = io.get_executor();
  bool all_arrived = true;
  for (int i = 0; i < 50 && all_arrived; ++i) {
    xrtio::async_run(f.ctx.kernel("noop"), asio::bind_executor(ex, [&](std::error_code ec, xrtio::run_result) {
                       CHECK(!ec);
                       ++calls;
                     }));
    // Not REQUIRE: the io threads must be joined before the case ends.
    all_arrived = rtest::eventually([&] { return calls.load() == i + 1; });
  }
  CHECK(all_arrived);
  CHECK(!io.stopped());  // the user's guard still holds it: no release was counted twice
  guard.reset();
  if (!all_arrived) io.stop();
  for (auto& t : ts) t.join();
  CHECK(calls.load() == 50);
}
