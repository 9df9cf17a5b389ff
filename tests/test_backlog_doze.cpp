// The reactor dozes while handlers are behind (docs/DESIGN.md, "The reactor
// dozes while handlers are behind"; runtime_options::backlog_doze): with
// many completions posted and not yet begun, the reactor sleeps instead of
// spinning, and wakes early when the backlog falls, for a cancellation and
// for the runtime's destruction. The early-end cases give it a doze of 30 s,
// so that a missing early wake-up shows as a case that does not finish in
// time; the cases for a backlog nobody runs give it 2 ms and count dozes;
// the threshold's cases use the default. They check the backlog's count
// returns to zero on every path (a count left high would make an idle
// reactor doze for ever).
#include <doctest/doctest.h>

#include <unistd.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../src/reactor/reactor.hpp"
#include "sim_runtime.hpp"
#include "xrtio/xrtio.hpp"

using namespace std::chrono_literals;

namespace xrtio::detail {
struct reactor_test_access {
  static std::int64_t backlog(reactor& r) noexcept { return r.queued_handlers_.load(); }
};
}  // namespace xrtio::detail

namespace {

constexpr int backlog_runs = 600;  // above the doze's threshold (at most 128 at max_batch 64)

xrtio::runtime_options long_doze() {
  xrtio::runtime_options o;
  o.backlog_doze = 30s;
  return o;
}

/// Polls `pred` for up to `limit`; returns whether it held.
template <class P>
bool eventually(P pred, std::chrono::milliseconds limit = 10s) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

/// Submits `n` noop runs whose handlers will run on `io` (not running yet)
/// and waits until the reactor dozes: their completions pile up in `io`
/// unbegun. With a long doze the runs submitted after it began wait in the
/// reactor's intake. `failed` counts handlers called with an error.
void queue_backlog(sim_runtime& s, asio::io_context& io, int n, std::atomic<int>& ran, std::atomic<int>& failed) {
  for (int i = 0; i < n; ++i)
    xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                       if (ec) ++failed;
                       ++ran;
                     }));
  REQUIRE(eventually([&] { return s.rt.stats().dozes > 0; }));
}

/// Runs `count` noop runs one after the other (each submitted by the last
/// one's handler) on an io_context of their own, run on a new thread for
/// up to 20 s; returns how many completed.
int chain_runs(sim_runtime& s, int count) {
  asio::io_context io;
  int chained = 0;
  std::function<void()> next = [&] {
    xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                       CHECK(!ec);
                       if (++chained < count) next();
                     }));
  };
  asio::post(io, next);
  std::thread t([&] { io.run_for(20s); });
  t.join();
  return chained;
}

}  // namespace

TEST_CASE("backlog doze: with handlers behind the reactor dozes, and every handler runs once") {
  sim_runtime s;  // the default doze
  asio::io_context io;
  std::atomic<int> ran{0}, failed{0};
  queue_backlog(s, io, backlog_runs, ran, failed);
  io.run();
  CHECK(ran == backlog_runs);
  CHECK(failed == 0);
}

TEST_CASE("backlog doze: with 64 runs in flight it starts at a quarter of them, not at two batches") {
  // 64 completions unbegun: past 16, a quarter of the 64, though far below
  // 2 x max_batch (128), where a few dozen runs in flight never dozed and
  // the reactor spun beside the handlers' thread (docs/PERFORMANCE.md, "The
  // doze at a few dozen runs in flight").
  sim_runtime s;
  asio::io_context io;
  std::atomic<int> ran{0}, failed{0};
  queue_backlog(s, io, 64, ran, failed);
  io.run();
  CHECK(ran == 64);
  CHECK(failed == 0);
}

TEST_CASE("backlog doze: with 240 runs outstanding, 40 completions unbegun are below the quarter (60): no doze") {
  // Runs 1-200 hang on the device (in flight, until cancelled); runs
  // 201-240 complete into an io_context not run. 40 is past 16 but below a
  // quarter of the 240 outstanding, so the reactor does not doze: the
  // threshold follows the runs outstanding, it is not a fixed small one.
  constexpr int hung = 200, done = 40;
  xrtio::sim::device_config cfg;
  for (int i = 1; i <= hung; ++i)
    cfg.faults.push_back({.kernel = "noop", .run_number = std::uint64_t(i), .what = xrtio::sim::fault::hang});
  // 200 aborts at once: under the sanitizers the last may take over the
  // default abort_grace (1 s), and a run retained ends in abort_failed.
  xrtio::runtime_options o;
  o.abort_grace = 30s;
  sim_runtime s(o, std::move(cfg));
  asio::io_context hung_io, idle;
  std::vector<asio::cancellation_signal> sigs(hung);
  std::atomic<int> aborted{0}, other{0}, ran{0};
  for (auto& sig : sigs)
    xrtio::async_run(s.ctx.kernel("noop"), asio::bind_cancellation_slot(
                                                sig.slot(), asio::bind_executor(hung_io, [&](std::error_code ec, xrtio::run_result) {
                                                  if (ec == asio::error::operation_aborted) ++aborted;
                                                  else ++other;
                                                })));
  for (int i = 0; i < done; ++i)
    xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(idle, [&](std::error_code ec, xrtio::run_result) {
                       CHECK(!ec);
                       ++ran;
                     }));
  REQUIRE(eventually([&] { return s.rt.stats().completed >= done; }));
  std::this_thread::sleep_for(20ms);
  CHECK(s.rt.stats().in_flight == hung);
  CHECK(s.rt.stats().dozes == 0);
  for (auto& sig : sigs) sig.emit(asio::cancellation_type::terminal);
  // 200 aborts: seconds under the sanitizers; returns once all have run.
  hung_io.run_for(60s);
  CHECK(aborted == hung);
  CHECK(other == 0);
  idle.run();
  CHECK(ran == done);
}

TEST_CASE("backlog doze: below 16 runs in flight it never starts") {
  sim_runtime s;
  asio::io_context io;
  std::atomic<int> ran{0};
  constexpr int few = 15;
  for (int i = 0; i < few; ++i)
    xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                       CHECK(!ec);
                       ++ran;
                     }));
  REQUIRE(eventually([&] { return s.rt.stats().completed >= few; }));
  std::this_thread::sleep_for(20ms);
  CHECK(s.rt.stats().dozes == 0);
  io.run();
  CHECK(ran == few);
}

TEST_CASE("backlog doze: 0 turns it off") {
  xrtio::runtime_options o;
  o.backlog_doze = 0ns;
  sim_runtime s(o);
  asio::io_context io;
  std::atomic<int> ran{0};
  for (int i = 0; i < backlog_runs; ++i)
    xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                       CHECK(!ec);
                       ++ran;
                     }));
  REQUIRE(eventually([&] { return s.rt.stats().completed >= backlog_runs; }));
  std::this_thread::sleep_for(20ms);
  CHECK(s.rt.stats().dozes == 0);
  io.run();
  CHECK(ran == backlog_runs);
}

TEST_CASE("backlog doze: a negative backlog_doze is refused") {
  xrtio::runtime_options o;
  o.backlog_doze = -1ns;
  CHECK_THROWS_AS(xrtio::runtime{o}, xrtio::error);
}

TEST_CASE("backlog doze: the doze ends when the handlers' backlog falls") {
  // Each handler submits the next run until 3000 have run: the reactor must
  // take those submissions in while the backlog drains, long before its
  // 30 s doze would end.
  sim_runtime s(long_doze());
  asio::io_context io;
  std::atomic<int> ran{0}, failed{0};
  queue_backlog(s, io, backlog_runs, ran, failed);
  std::atomic<int> chained{0};
  std::function<void()> next = [&] {
    xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                       CHECK(!ec);
                       if (++chained < 3000) next();
                     }));
  };
  asio::post(io, next);
  auto t0 = std::chrono::steady_clock::now();
  std::thread t([&] { io.run(); });
  bool done = eventually([&] { return chained.load() >= 3000; });
  CHECK(done);
  if (!done) io.stop();
  t.join();
  CHECK(ran == backlog_runs);
  CHECK(failed == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // far below one 30 s doze
}

TEST_CASE("backlog doze: a cancellation ends the doze at once") {
  // Run number backlog_runs + 1 hangs until aborted: it is submitted from a
  // second io_context while the reactor dozes on the first one's backlog,
  // and only its cancellation can end the 30 s doze early.
  xrtio::sim::device_config cfg;
  cfg.faults.push_back({.kernel = "noop", .run_number = backlog_runs + 1, .what = xrtio::sim::fault::hang});
  sim_runtime s(long_doze(), std::move(cfg));
  asio::io_context io;
  std::atomic<int> ran{0}, failed{0};
  queue_backlog(s, io, backlog_runs, ran, failed);

  asio::io_context io2;
  asio::cancellation_signal sig;
  std::optional<std::error_code> got;
  xrtio::async_run(s.ctx.kernel("noop"),
                   asio::bind_cancellation_slot(sig.slot(), asio::bind_executor(io2, [&](std::error_code ec, xrtio::run_result) {
                                                  got = ec;
                                                })));
  std::this_thread::sleep_for(20ms);  // the run waits in the reactor's intake
  auto t0 = std::chrono::steady_clock::now();
  sig.emit(asio::cancellation_type::terminal);
  io2.run_for(10s);
  REQUIRE(got.has_value());
  CHECK(*got);  // cancelled: the hang never ends by itself
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  io.run();
  CHECK(ran == backlog_runs);
  CHECK(failed == 0);
}

TEST_CASE("backlog doze: destroying the runtime ends the doze") {
  asio::io_context io;
  std::atomic<int> ran{0}, failed{0};
  std::optional<sim_runtime> s(std::in_place, long_doze());
  queue_backlog(*s, io, backlog_runs, ran, failed);
  auto t0 = std::chrono::steady_clock::now();
  s.reset();  // the destructor: its reactor stops, the doze must end
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  io.run();  // the completions posted before stay valid
  CHECK(ran == backlog_runs);
}

TEST_CASE("backlog doze: the backlog's count returns to zero after a throwing handler and a destroyed io_context") {
  // A count left above the threshold would make the idle reactor doze over
  // and over: dozes must stop growing once every batch has begun or been
  // destroyed.
  sim_runtime s;
  std::atomic<int> ran{0}, failed{0};
  {
    asio::io_context dead;
    queue_backlog(s, dead, backlog_runs, ran, failed);  // destroyed unrun below
    REQUIRE(eventually([&] { return s.rt.stats().completed >= backlog_runs; }));
  }
  CHECK(ran == 0);
  asio::io_context io;
  std::atomic<int> thrown{0};
  auto before = s.rt.stats().completed;
  for (int i = 0; i < backlog_runs; ++i)
    xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                       if (ec) ++failed;
                       if (++ran % 100 == 0) {
                         ++thrown;
                         throw std::runtime_error("handler");
                       }
                     }));
  REQUIRE(eventually([&] { return s.rt.stats().completed >= before + backlog_runs; }));
  for (;;) {
    try {
      io.restart();
      io.run();
      break;
    } catch (const std::runtime_error&) {
    }
  }
  CHECK(ran == backlog_runs);
  CHECK(failed == 0);
  CHECK(thrown == backlog_runs / 100);
  std::this_thread::sleep_for(20ms);
  auto dozes = s.rt.stats().dozes;
  std::this_thread::sleep_for(50ms);
  CHECK(s.rt.stats().dozes == dozes);
}

TEST_CASE("backlog doze: handlers that never run do not keep the reactor waking") {
  // The io_context is never run: its backlog never falls. A doze that found
  // nothing new is not repeated, so the reactor sleeps as when idle.
  sim_runtime s;
  asio::io_context io;
  std::atomic<int> ran{0}, failed{0};
  queue_backlog(s, io, backlog_runs, ran, failed);
  REQUIRE(eventually([&] { return s.rt.stats().completed >= backlog_runs; }));
  std::this_thread::sleep_for(10ms);
  auto before = s.rt.stats();
  std::this_thread::sleep_for(100ms);  // 100 dozes of 1 ms if each were repeated
  auto after = s.rt.stats();
  CHECK(after.dozes - before.dozes <= 1);
  CHECK(after.wakeups + after.sleeps - before.wakeups - before.sleeps <= 1);
}

TEST_CASE("backlog doze: a backlog nobody runs costs another io_context's runs one doze, not one per half batch") {
  // 600 completions sit in an io_context never run; a second io_context
  // runs 2000 runs one after the other. The reactor dozes again only after
  // half a batch (32) of handlers began since its last doze (without that
  // rule: one doze per run, 2000 dozes of 2 ms), and, once two dozes in a
  // row stalled (no handler began during either), only after handlers for
  // half the last one's backlog (600) began: two dozes, then about one per
  // 300 runs of the second io_context (without that rule: one per 32 of
  // them, 62 dozes).
  xrtio::runtime_options o;
  o.backlog_doze = 2ms;
  sim_runtime s(o);
  asio::io_context dead;
  std::atomic<int> ran{0}, failed{0};
  queue_backlog(s, dead, backlog_runs, ran, failed);
  auto before = s.rt.stats().dozes;
  CHECK(chain_runs(s, 2000) == 2000);
  CHECK(s.rt.stats().dozes - before <= 2 + 2000 / (backlog_runs / 2) + 1);
}

TEST_CASE("backlog doze: a few dozen completions nobody runs cost another io_context's runs one doze, and dozing "
          "resumes once they run") {
  // 20 completions sit in an io_context not run: a backlog past the reduced
  // threshold (16 of 20 outstanding) that no doze can bring below its end
  // mark (8). The first doze sleeps its whole 2 ms; after it the full
  // threshold (128) applies, so the 2000 chained runs of a second
  // io_context cost no more dozes (with the reduced threshold kept: one per
  // half batch of them, about 62).
  xrtio::runtime_options o;
  o.backlog_doze = 2ms;
  sim_runtime s(o);
  asio::io_context dead;
  std::atomic<int> ran{0}, failed{0};
  constexpr int stuck = 20;
  queue_backlog(s, dead, stuck, ran, failed);
  auto before = s.rt.stats().dozes;
  CHECK(chain_runs(s, 2000) == 2000);
  CHECK(s.rt.stats().dozes - before <= 1);
  // Once the stuck ones run, a backlog of a quarter of those outstanding
  // dozes again.
  dead.run();
  CHECK(ran == stuck);
  CHECK(failed == 0);
  asio::io_context later;
  std::atomic<int> ran2{0}, failed2{0};
  auto before2 = s.rt.stats().dozes;
  for (int i = 0; i < 64; ++i)
    xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(later, [&](std::error_code ec, xrtio::run_result) {
                       if (ec) ++failed2;
                       ++ran2;
                     }));
  CHECK(eventually([&] { return s.rt.stats().dozes > before2; }));
  later.run();
  CHECK(ran2 == 64);
  CHECK(failed2 == 0);
}

// The backlog counts what the loop posted and has not begun. Completions
// posted on the submitting thread itself (a cached read done in place, or
// gathered with others and read there once the handler returns) are not
// the loop's batches and are not counted (docs/DESIGN.md, "The reactor
// dozes while handlers are behind"). A run's completion is, the control.
TEST_CASE("backlog doze: completions posted on the submitting thread are not counted in the loop's backlog") {
  namespace fs = std::filesystem;
  sim_runtime s;
  auto& rx = *xrtio::detail::access::reactor(s.rt);
  auto path = fs::temp_directory_path() / ("xrtio-doze-" + std::to_string(::getpid()));
  {
    std::vector<char> bytes(256 << 10, 'x');
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    REQUIRE(out.good());
  }
  auto f = xrtio::file::open(path, xrtio::file_mode::read, {.direct = false, .runtime = &s.rt});
  constexpr int reads = 8;
  std::vector<xrtio::buffer> bufs;
  for (int i = 0; i < reads; ++i) bufs.push_back(s.ctx.alloc(4096));
  asio::io_context io{1};
  int done = 0, errors = 0;
  std::int64_t seen_in_place = -1, seen_after_flush = -1;
  std::uint64_t here0 = 0, here1 = 0;
  bool first_in_place = false;
  asio::post(io, [&] {
    here0 = s.rt.stats().file_inline_reads + s.rt.stats().file_gathered_reads;
    auto in_place0 = s.rt.stats().file_inline_reads;
    // The first, alone, is read at once; the others are gathered, read
    // once this handler returns, and their completions posted then.
    for (int i = 0; i < reads; ++i) {
      xrtio::async_read_file(f, std::uint64_t(i) * 32768, xrtio::out(bufs[std::size_t(i)]),
                             asio::bind_executor(io, [&](std::error_code ec, std::size_t n) {
                               ++done;
                               if (ec || n != 4096) ++errors;
                             }));
      if (i == 0) {
        seen_in_place = xrtio::detail::reactor_test_access::backlog(rx);
        first_in_place = s.rt.stats().file_inline_reads > in_place0;
      }
    }
    // Runs after the gathered reads' flush (both this thread's, in order),
    // before their completions.
    asio::post(io, [&] {
      seen_after_flush = xrtio::detail::reactor_test_access::backlog(rx);
      here1 = s.rt.stats().file_inline_reads + s.rt.stats().file_gathered_reads;
    });
  });
  io.run();
  CHECK(done == reads);
  CHECK(errors == 0);
  // The control: runs the loop completes are counted until they begin.
  io.restart();
  std::atomic<int> ran{0};
  xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(io, [&](std::error_code, xrtio::run_result) { ++ran; }));
  // (stats().completed counts a run before its batch is posted: the count
  // is waited for.)
  CHECK(eventually([&] { return xrtio::detail::reactor_test_access::backlog(rx) == 1; }));
  io.run();
  CHECK(ran == 1);
  CHECK(xrtio::detail::reactor_test_access::backlog(rx) == 0);
  std::error_code ec;
  fs::remove(path, ec);
  if (here1 == here0) {
    MESSAGE("XRTIO-SKIP: no read was done on the submitting thread here (RWF_NOWAIT or io_uring refused?)");
    return;
  }
  MESSAGE((here1 - here0) << " of " << reads << " reads done or gathered on the submitting thread");
  if (first_in_place) CHECK(seen_in_place == 0);
  // Reads handed to the loop (a thread whose io_uring is refused, a page
  // not cached) are counted when the loop posts them, which may be before
  // or after the probe: judged only when every read stayed here.
  if (here1 - here0 != std::uint64_t(reads)) {
    MESSAGE("XRTIO-SKIP: " << (here1 - here0) << " of " << reads
                           << " reads stayed on the submitting thread here: the gathered reads' count not judged");
    return;
  }
  CHECK(seen_after_flush == 0);
}
