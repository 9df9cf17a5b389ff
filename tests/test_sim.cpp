#include <doctest/doctest.h>

#include "introspection.hpp"
#include "foundation_support.hpp"

// The simulated device: real kernel results, the latency model, fault
// injection, the ERT state machine, and argument checks at submission.

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "xrtio/context.hpp"
#include "xrtio/error.hpp"
#include "xrtio/run.hpp"
#include "xrtio/sim.hpp"

using namespace std::chrono_literals;
using xrtio::errc;
using xrtio::run_state;
namespace sim = xrtio::sim;
using clk = std::chrono::steady_clock;

namespace {

using ftest::contains;
using ftest::error_of;

using ftest::device_of;

template <class T>
xrtio::buffer upload(xrtio::context& ctx, const std::vector<T>& v) {
  auto b = ctx.alloc(v.size() * sizeof(T));
  b.write(std::span<const T>(v));
  return b;
}
template <class T>
std::vector<T> download(const xrtio::buffer& b, std::size_t n) {
  std::vector<T> v(n);
  b.read(std::span<T>(v));
  return v;
}

sim::device_config with_fault(sim::fault_rule r) {
  sim::device_config c;
  c.faults.push_back(std::move(r));
  return c;
}

// Two units whose idle one watches for 10 s (device_config::idle_poll): no
// run in these tests comes after the window closed.
sim::device_config watching_device() {
  sim::device_config c;
  c.compute_units = 2;
  c.idle_poll = 10s;
  return c;
}

// Polls until `pred` or `limit` passes.
template <class P>
bool eventually(P&& pred, std::chrono::milliseconds limit = 5000ms) {
  auto until = clk::now() + limit;
  while (!pred()) {
    if (clk::now() > until) return false;
    std::this_thread::sleep_for(200us);
  }
  return true;
}

// Runs vadd on 16 elements with fresh buffers; returns its handle.
xrtio::run_handle start_vadd(xrtio::context& ctx, xrtio::buffer* out = nullptr) {
  auto a = ctx.alloc(64), b = ctx.alloc(64), c = ctx.alloc(64);
  if (out) *out = c;
  return xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{16});
}

}  // namespace

// ---- builtin kernels compute real results ----------------------------------------

TEST_CASE("sim: vadd adds u32 vectors element-wise wrapping on overflow") {
  auto ctx = sim::open();
  constexpr std::uint32_t n = 1000;
  std::mt19937 rng(1);
  std::vector<std::uint32_t> a(n), b(n);
  for (auto& x : a) x = rng();
  for (auto& x : b) x = rng();
  a[0] = 0xffffffffu;
  b[0] = 2;
  auto ba = upload(ctx, a), bb = upload(ctx, b);
  auto bc = ctx.alloc(n * 4 + 16);
  std::vector<std::uint32_t> sentinel(4, 0xabababab);
  bc.write(std::span<const std::uint32_t>(sentinel), n * 4);
  auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(ba), xrtio::in(bb), xrtio::out(bc), n);
  auto r = h.wait(10s);
  CHECK(r.ok());
  CHECK(r.state == run_state::completed);
  auto c = download<std::uint32_t>(bc, n + 4);
  CHECK(c[0] == 1u);
  for (std::uint32_t i = 0; i < n; ++i) REQUIRE(c[i] == a[i] + b[i]);
  for (std::uint32_t i = n; i < n + 4; ++i) CHECK(c[i] == 0xababababu);  // only n elements written
}

TEST_CASE("sim: scale multiplies f32 by the factor") {
  auto ctx = sim::open();
  constexpr std::uint32_t n = 257;
  std::vector<float> in(n);
  for (std::uint32_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) * 0.5f - 20.0f;
  auto bi = upload(ctx, in);
  auto bo = ctx.alloc(n * 4);
  xrtio::start(ctx.kernel("scale"), xrtio::in(bi), xrtio::out(bo), 2.5f, n).wait(10s);
  auto out = download<float>(bo, n);
  for (std::uint32_t i = 0; i < n; ++i) REQUIRE(out[i] == in[i] * 2.5f);
}

TEST_CASE("sim: checksum is FNV-1a 64 of the first n bytes") {
  auto ctx = sim::open();
  std::vector<std::uint8_t> data(1000);
  std::mt19937 rng(7);
  for (auto& x : data) x = static_cast<std::uint8_t>(rng());
  auto fnv = [](const std::uint8_t* p, std::size_t n) {
    std::uint64_t h = 14695981039346656037ull;
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
  };
  auto in = upload(ctx, data);
  auto out = ctx.alloc(8);
  xrtio::start(ctx.kernel("checksum"), xrtio::in(in), xrtio::out(out), std::uint32_t{777}).wait(10s);
  CHECK(download<std::uint64_t>(out, 1)[0] == fnv(data.data(), 777));
  // Known vector: FNV-1a 64 of "a".
  auto one = upload(ctx, std::vector<std::uint8_t>{'a'});
  xrtio::start(ctx.kernel("checksum"), xrtio::in(one), xrtio::out(out), std::uint32_t{1}).wait(10s);
  CHECK(download<std::uint64_t>(out, 1)[0] == 0xaf63dc4c8601ec8cull);
  // n = 0: the offset basis.
  xrtio::start(ctx.kernel("checksum"), xrtio::in(one), xrtio::out(out), std::uint32_t{0}).wait(10s);
  CHECK(download<std::uint64_t>(out, 1)[0] == 0xcbf29ce484222325ull);
}

TEST_CASE("sim: matmul multiplies row-major f32 matrices like a reference loop") {
  auto ctx = sim::open();
  constexpr std::uint32_t m = 7, n = 5, k = 9;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> a(m * k), b(k * n);
  for (auto& x : a) x = d(rng);
  for (auto& x : b) x = d(rng);
  auto ba = upload(ctx, a), bb = upload(ctx, b);
  auto bc = ctx.alloc(m * n * 4);
  xrtio::start(ctx.kernel("matmul"), xrtio::in(ba), xrtio::in(bb), xrtio::out(bc), m, n, k).wait(10s);
  auto c = download<float>(bc, m * n);
  for (std::uint32_t i = 0; i < m; ++i)
    for (std::uint32_t j = 0; j < n; ++j) {
      double ref = 0;
      for (std::uint32_t p = 0; p < k; ++p) ref += double(a[i * k + p]) * double(b[p * n + j]);
      CHECK(c[i * n + j] == doctest::Approx(ref).epsilon(1e-4));
    }
}

TEST_CASE("sim: matmul with dimensions whose sizes overflow 64 bits ends in ERROR, reading nothing") {
  // m * k * 4 = 2^64 wrapped to 0 and passed the buffer check: the kernel
  // then read far past 4-byte buffers (SIGSEGV; a helper's audit).
  auto ctx = sim::open();
  auto a = ctx.alloc(4), b = ctx.alloc(4), c = ctx.alloc(4);
  constexpr std::uint32_t big = 1u << 31;
  auto r = xrtio::start(ctx.kernel("matmul"), xrtio::in(a), xrtio::in(b), xrtio::out(c), big, big, big);
  std::error_code ec;
  auto res = r.wait(10s, ec);
  CHECK(res.state == run_state::error);
  CHECK(ec == xrtio::errc::run_error);
}

TEST_CASE("sim: noop completes") {
  auto ctx = sim::open();
  auto r = xrtio::start(ctx.kernel("noop")).wait(10s);
  CHECK(r.state == run_state::completed);
  CHECK(device_of(ctx).stats().completed == 1);
  CHECK(device_of(ctx).stats().started == 1);
}

TEST_CASE("sim: a kernel whose n does not fit its buffers ends in ERROR without touching memory") {
  auto ctx = sim::open();
  auto a = ctx.alloc(64), b = ctx.alloc(64), c = ctx.alloc(64);
  auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{17});
  auto msg = error_of([&] { h.wait(10s); }, errc::run_error);
  CHECK_CONTAINS(msg, "vadd");
  CHECK_CONTAINS(msg, "ERROR");
  CHECK(h.result().state == run_state::error);
  CHECK(device_of(ctx).stats().failed == 1);
}

TEST_CASE("sim: a user kernel sees its arguments and run number and a throwing kernel ends in ERROR") {
  sim::device_config cfg;
  std::atomic<std::uint64_t> seen_number{0};
  std::atomic<unsigned> seen_args{0};
  cfg.kernels.push_back(sim::kernel_def{
      "fill",
      {{"out", xrtio::backend::arg_kind::buffer, 0, 0}, {"value", xrtio::backend::arg_kind::scalar, 2, 0}},
      [&](sim::kernel_call& c) {
        seen_number = c.run_number();
        seen_args = c.arg_count();
        auto v = c.scalar<std::uint16_t>(1);
        for (auto& x : c.buffer_as<std::uint16_t>(0)) x = v;
        if (v == 0xdead) (void)c.scalar<std::uint32_t>(1);  // wrong width: throws argument_kind
      }});
  auto ctx = sim::open(cfg);
  auto out = ctx.alloc(32);
  xrtio::start(ctx.kernel("fill"), out, std::uint16_t{0x1234}).wait(10s);
  CHECK(seen_number == 1);
  CHECK(seen_args == 2);
  for (auto x : download<std::uint16_t>(out, 16)) CHECK(x == 0x1234);
  auto h = xrtio::start(ctx.kernel("fill"), out, std::uint16_t{0xdead});
  error_of([&] { h.wait(10s); }, errc::run_error);
  CHECK(seen_number == 2);
}

// ---- latency model -------------------------------------------------------------

TEST_CASE("sim: a fixed 20 ms latency run is first seen final no earlier than 20 ms after it started") {
  sim::device_config cfg;
  cfg.latency.fixed = 20ms;
  auto ctx = sim::open(cfg);
  xrtio::buffer c;
  auto t0 = clk::now();
  auto h = start_vadd(ctx, &c);
  // Polled until final: the first read that sees it final comes after the
  // device finished, so no earlier than the latency after submission. A
  // lower bound holds however slowly the host runs (no skipped check).
  int non_final_reads = 0;
  while (!xrtio::is_final(h.state())) {
    ++non_final_reads;
    std::this_thread::sleep_for(200us);
  }
  auto first_final = clk::now();
  auto r = h.wait(10s);
  CHECK(first_final - r.submitted >= 20ms);
  CHECK(non_final_reads >= 1);  // the state read right after start() was not final
  CHECK(r.ok());
  CHECK(clk::now() - t0 >= 20ms);
  CHECK(r.device_completed - r.submitted >= 20ms);
  CHECK(r.submitted <= r.device_completed);
  CHECK(r.device_completed <= r.observed);
}

TEST_CASE("sim: per-byte latency scales with the bytes of the buffer arguments") {
  sim::device_config cfg;
  cfg.latency.ns_per_byte = 10000.0;  // 3 x 1024 bytes: ~30 ms
  auto ctx = sim::open(cfg);
  auto a = ctx.alloc(1024), b = ctx.alloc(1024), c = ctx.alloc(1024);
  auto r = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{1}).wait(10s);
  CHECK(r.device_completed - r.submitted >= 30ms);
  auto quick = xrtio::start(ctx.kernel("noop")).wait(10s);  // no buffers: no per-byte time
  CHECK(quick.ok());
}

TEST_CASE("sim: a run due sooner wakes a compute unit sleeping until a later run's due time") {
  // One compute unit asleep until the 3 s run is due; a run with no buffers
  // (no per-byte time) submitted after it must wake that unit, not wait 3 s.
  sim::device_config cfg;
  cfg.compute_units = 1;
  cfg.latency.ns_per_byte = 1'000'000.0;  // 3 x 1024 bytes: ~3 s
  auto ctx = sim::open(cfg);
  auto a = ctx.alloc(1024), b = ctx.alloc(1024), c = ctx.alloc(1024);
  auto slow = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{1});
  std::this_thread::sleep_for(5ms);  // let the unit go to sleep until the slow run's due time
  auto quick = xrtio::start(ctx.kernel("noop")).wait(10s);
  CHECK(quick.ok());
  CHECK_FALSE(xrtio::is_final(slow.state()));
}  // the handle's destructor aborts the slow run

TEST_CASE("sim: a burst of runs on busy compute units all complete, each after its latency") {
  // Submissions that find every unit awake do not signal them; the units
  // must still drain the queue by themselves.
  sim::device_config cfg;
  cfg.compute_units = 2;
  cfg.latency.fixed = 200us;
  auto ctx = sim::open(cfg);
  auto k = ctx.kernel("noop");
  std::vector<xrtio::run_handle> hs;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 50; ++i) hs.push_back(xrtio::start(k));
    if (round % 3 == 0) std::this_thread::sleep_for(300us);
  }
  for (auto& h : hs) {
    auto r = h.wait(10s);
    REQUIRE(r.ok());
    CHECK(r.device_completed - r.submitted >= 200us);
  }
  CHECK(device_of(ctx).stats().completed == 1000);
}

TEST_CASE("sim: queued runs wake one compute unit each, not every unit") {
  // Runs 3 ms apart, 15 ms each: several queued at once. Two idle units that
  // both slept until the earliest run was due woke together for each run,
  // and the one that found it taken went back to sleep: two wake-ups per run
  // or more (thread switches and a contended device mutex, the host CPU a
  // simulated run costs: docs/SERVER.md). Now one waits for the run, the
  // other stands by for the next one. Measured (20 runs): old rule 39-42,
  // and 36-40 beside four busy loops; this rule 20-22, and 20-21 beside
  // them. At 1 ms apart, 5 ms each, one loaded run gave 35: a late sleep
  // there is a large part of the spacing.
  sim::device_config cfg;
  cfg.compute_units = 2;
  cfg.latency.fixed = 15ms;
  auto ctx = sim::open(cfg);
  auto k = ctx.kernel("noop");
  constexpr int runs = 20;
  std::vector<xrtio::run_handle> hs;
  for (int i = 0; i < runs; ++i) {
    hs.push_back(xrtio::start(k));
    std::this_thread::sleep_for(3ms);
  }
  for (auto& h : hs) REQUIRE(h.wait(10s).ok());
  auto woke = device_of(ctx).stats().wakeups;
  INFO("wake-ups: " << woke);
  CHECK(woke <= runs + runs / 2);
}

TEST_CASE("sim: runs submitted from four threads while the units sleep and wake all complete, none left behind") {
  // Submissions without fault rules enter a lock-free inbox and wake a unit
  // only when none would look at the queue in time (sim_device.cpp,
  // drain()). A run pushed as the last unit decides to sleep, with nothing
  // submitted after it, would wait for ever: each burst here ends with the
  // submitters idle until every run of the burst is final, so such a run
  // fails its wait. Latencies 0-60 us put the units to sleep and wake them
  // between and within bursts; a slow kernel now and then holds a unit.
  sim::device_config cfg;
  cfg.compute_units = 2;
  cfg.latency.jitter = 60us;
  std::atomic<int> slow_runs{0};
  cfg.kernels.push_back({"slow", {}, [&](sim::kernel_call&) {
                           slow_runs.fetch_add(1);
                           std::this_thread::sleep_for(300us);
                         }});
  auto ctx = sim::open(cfg);
  auto noop = ctx.kernel("noop"), slow = ctx.kernel("slow");
  constexpr int threads = 4, bursts = 60, per_burst = 40;
  std::atomic<int> late{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      std::vector<xrtio::run_handle> hs;
      for (int b = 0; b < bursts; ++b) {
        hs.clear();
        for (int i = 0; i < per_burst; ++i) hs.push_back(xrtio::start((i + b + t) % 97 == 0 ? slow : noop));
        for (auto& h : hs)
          if (!h.wait(5s).ok()) late.fetch_add(1);
        if (b % 4 == t) std::this_thread::sleep_for(200us);  // let the units fall asleep
      }
    });
  for (auto& t : ts) t.join();
  CHECK(late.load() == 0);
  auto st = device_of(ctx).stats();
  CHECK(st.started == std::uint64_t(threads * bursts * per_burst));
  CHECK(st.completed == st.started);
  CHECK(slow_runs.load() > 0);
}

TEST_CASE("sim: a run submitted as soon as the last one is seen final is not left in the inbox") {
  // The submitter polls state() (no device mutex) and submits the next run
  // the moment it sees the last one final, while the unit that ended it is
  // on its way to sleep: the window where a submitter sees the unit awake
  // and does not wake it, so the unit must see the run (drain()). A run
  // left behind is never final: the poll gives up after 2 s.
  sim::device_config cfg;
  cfg.compute_units = 1;
  auto ctx = sim::open(cfg);
  auto k = ctx.kernel("noop");
  int stuck = 0;
  auto end = clk::now() + 2s;  // about 100,000 runs here; fewer under the sanitizers and qemu
  for (int i = 0; i < 200000 && stuck == 0 && clk::now() < end; ++i) {
    auto h = xrtio::start(k);
    auto give_up = clk::now() + 2s;
    while (!xrtio::is_final(h.state()))
      if (clk::now() > give_up) {
        ++stuck;
        break;
      }
  }
  CHECK(stuck == 0);
}

TEST_CASE("sim: an idle unit that watches (idle_poll) takes each next run without any unit being woken") {
  // One unit watches for submissions while nothing is queued; the other
  // sleeps. A submitter sees the watcher awake and outside a kernel, leaves
  // the run in the inbox and wakes no one; the watcher takes it. The window
  // is 10 s so that no run here arrives after it closed (then the watcher
  // sleeps and the next submission wakes it, as with idle_poll = 0).
  auto cfg = watching_device();
  auto began = clk::now();
  {
    auto ctx = sim::open(cfg);
    auto k = ctx.kernel("noop");
    constexpr int runs = 200;
    for (int i = 0; i < runs; ++i) {
      REQUIRE(xrtio::start(k).wait(5s).ok());
      if (i % 20 == 0) std::this_thread::sleep_for(1ms);  // the units go idle in between
    }
    auto st = device_of(ctx).stats();
    MESSAGE("idle_poll 10 s, " << runs << " runs one after another: " << st.idle_catches << " taken by the watcher, "
                               << st.wakeups << " wake-ups");
    CHECK(st.completed == std::uint64_t(runs));
    CHECK(st.idle_catches > 0);  // the others came while the unit was on its way back to the watch
    CHECK(st.wakeups == 0);
  }
  // The watch ends when the device stops, not when its window does.
  CHECK(clk::now() - began < 5s);
}

TEST_CASE("sim: a device whose units watch (idle_poll) stops at once, whenever it is destroyed") {
  // The destructor notifies each unit after it sets stopping_; a watcher
  // holds no mutex and waits on no condition variable, so it sees the stop
  // by an atomic flag and must then go back to the loop's test, not to
  // sleep: there the notification had already gone and the unit slept for
  // good (the bench hung in ~sim_device_impl's join). Devices made and
  // destroyed in a row, some idle, some just after a run.
  auto cfg = watching_device();
  auto began = clk::now();
  for (int i = 0; i < 100; ++i) {
    auto ctx = sim::open(cfg);
    if (i % 2) REQUIRE(xrtio::start(ctx.kernel("noop")).wait(5s).ok());
    if (i % 3 == 0) std::this_thread::sleep_for(200us);  // the watch under way
  }
  CHECK(clk::now() - began < 20s);  // a stuck unit would hold its device's destructor for good
}

TEST_CASE("sim: a run submitted the moment the last one is seen final wakes no unit while one watches") {
  // A loop that polls its run's state and submits the next at once (the
  // bench's loop-poll, in-loop mode) used to find the unit that ended the
  // run still marked in a kernel: it took the device mutex and woke the
  // other unit. The unit is now out of the kernel before the state is
  // published, so the submitter sees it awake (watching, here, for 10 s)
  // and leaves the run in the inbox. A lone wake-up in 2000 runs was seen
  // once with this order (CI rehearsal of 2026-12-06, cause not found; the
  // old order showed the same in one run of three), so each attempt is a
  // fresh device and one attempt of three must see none: a unit woken per
  // run, or every few runs, fails all three.
  auto cfg = watching_device();
  constexpr int runs = 2000;
  constexpr int attempts = 3;
  std::uint64_t fewest = std::numeric_limits<std::uint64_t>::max();
  for (int a = 0; a < attempts && fewest != 0; ++a) {
    auto ctx = sim::open(cfg);
    auto k = ctx.kernel("noop");
    for (int i = 0; i < runs; ++i) {
      auto h = xrtio::start(k);
      auto give_up = clk::now() + 5s;
      while (!xrtio::is_final(h.state()))
        if (clk::now() > give_up) FAIL("run " << i << " not final after 5 s");
      REQUIRE(h.state() == run_state::completed);
    }
    auto st = device_of(ctx).stats();
    MESSAGE("attempt " << a + 1 << ": " << runs << " runs polled and resubmitted: " << st.wakeups
                       << " unit wake-ups, " << st.idle_catches << " taken by the watcher");
    fewest = std::min(fewest, st.wakeups);
  }
  CHECK(fewest == 0);
}

TEST_CASE("sim: a watching unit takes runs that fault rules send straight to the queue") {
  // With fault rules a submission goes to the queue under the device mutex,
  // not through the inbox; the watcher sees their count move.
  // A watcher that looked at the inbox only would leave each run until its
  // window (10 s) closed: the waits here give up after 5 s.
  auto cfg = watching_device();
  cfg.faults.push_back({"", 1000000, sim::fault::fail, {}, {}});  // never reached: only makes the submissions locked
  auto ctx = sim::open(cfg);
  auto k = ctx.kernel("noop");
  for (int i = 0; i < 50; ++i) REQUIRE(xrtio::start(k).wait(5s).ok());
  auto st = device_of(ctx).stats();
  CHECK(st.idle_catches > 0);
  CHECK(st.wakeups == 0);
}

TEST_CASE("sim: with idle_poll = 0 an idle unit sleeps and the next submission wakes it") {
  sim::device_config cfg;
  cfg.compute_units = 1;
  cfg.idle_poll = 0ns;
  auto ctx = sim::open(cfg);
  auto k = ctx.kernel("noop");
  for (int i = 0; i < 20; ++i) {
    REQUIRE(xrtio::start(k).wait(5s).ok());
    std::this_thread::sleep_for(1ms);  // the unit is asleep before the next submission
  }
  auto st = device_of(ctx).stats();
  CHECK(st.idle_catches == 0);
  CHECK(st.wakeups >= 19u);  // the first submission may come before the unit first sleeps
}

TEST_CASE("sim: device::lose() ends runs queued without fault rules with device_lost") {
  // These runs went through the submission inbox, not the locked path that
  // fault rules take (sim_device.cpp): lose() must drain it.
  sim::device_config cfg;
  cfg.latency.fixed = 10s;
  auto ctx = sim::open(cfg);
  std::vector<xrtio::run_handle> hs;
  for (int i = 0; i < 20; ++i) hs.push_back(xrtio::start(ctx.kernel("noop")));
  device_of(ctx).lose();
  for (auto& h : hs) {
    std::error_code ec;
    auto r = h.wait(2s, ec);
    CHECK(ec == errc::device_lost);
    CHECK(r.state == run_state::no_response);
  }
  error_of([&] { xrtio::start(ctx.kernel("noop")); }, errc::device_lost);
  CHECK(device_of(ctx).stats().started == 20);
}

TEST_CASE("sim: runs queued while one unit is held in a kernel complete on the other") {
  // The unit that takes the held run leaves the queue to a unit that comes
  // back for it (standing by, or woken): nothing waits for the held kernel.
  sim::device_config cfg;
  cfg.compute_units = 2;
  cfg.latency.fixed = 2ms;
  std::atomic<bool> open{false};
  cfg.kernels.push_back({"held", {}, [&](sim::kernel_call& c) {
                           while (!open.load() && !c.stop_requested()) std::this_thread::sleep_for(100us);
                         }});
  auto ctx = sim::open(cfg);
  auto held = xrtio::start(ctx.kernel("held"));
  std::vector<xrtio::run_handle> hs;
  for (int i = 0; i < 10; ++i) hs.push_back(xrtio::start(ctx.kernel("noop")));
  for (auto& h : hs) CHECK(h.wait(10s).ok());
  CHECK_FALSE(xrtio::is_final(held.state()));
  open = true;
  CHECK(held.wait(10s).ok());
}

// ---- fault injection ---------------------------------------------------------------

TEST_CASE("sim: fault::fail ends the run in ERROR: wait throws run_error and the kernel did not run") {
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::fail}));
  auto a = upload(ctx, std::vector<std::uint32_t>(16, 1));
  auto c = ctx.alloc(64);
  auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(a), xrtio::out(c), std::uint32_t{16});
  std::error_code ec;
  auto r = h.wait(10s, ec);
  CHECK(ec == errc::run_error);
  CHECK(r.state == run_state::error);
  CHECK(h.result().state == run_state::error);
  CHECK(h.state() == run_state::error);
  error_of([&] { h.wait(); }, errc::run_error);  // asking again reports the same final state
  for (auto x : download<std::uint32_t>(c, 16)) CHECK(x == 0u);
  CHECK(device_of(ctx).stats().failed == 1);
  // Other kernels are unaffected.
  CHECK(xrtio::start(ctx.kernel("noop")).wait(10s).ok());
}

TEST_CASE("sim: faults hit only the run number they name") {
  auto ctx = sim::open(with_fault({.kernel = "", .run_number = 2, .what = sim::fault::fail}));
  CHECK(xrtio::start(ctx.kernel("noop")).wait(10s).ok());
  error_of([&] { xrtio::start(ctx.kernel("noop")).wait(10s); }, errc::run_error);
  CHECK(xrtio::start(ctx.kernel("noop")).wait(10s).ok());
  auto s = device_of(ctx).stats();
  CHECK(s.started == 3);
  CHECK(s.completed == 2);
  CHECK(s.failed == 1);
}

TEST_CASE("sim: faults hit only the kernel they name and add_fault and fault_selector apply to later runs") {
  sim::device_config cfg;
  cfg.faults.push_back({.kernel = "scale", .what = sim::fault::fail});
  cfg.fault_selector = [](std::string_view kernel, std::uint64_t n) {
    sim::fault_rule r;
    if (kernel == "noop" && n == 3) r.what = sim::fault::fail;
    return r;
  };
  auto ctx = sim::open(cfg);
  CHECK(start_vadd(ctx).wait(10s).ok());                  // run 1
  CHECK(xrtio::start(ctx.kernel("noop")).wait(10s).ok());  // run 2
  error_of([&] { xrtio::start(ctx.kernel("noop")).wait(10s); }, errc::run_error);  // run 3: selector
  device_of(ctx).add_fault({.kernel = "noop", .what = sim::fault::fail});
  error_of([&] { xrtio::start(ctx.kernel("noop")).wait(10s); }, errc::run_error);
  CHECK(start_vadd(ctx).wait(10s).ok());
  auto in = ctx.alloc(64), out = ctx.alloc(64);
  error_of([&] { xrtio::start(ctx.kernel("scale"), xrtio::in(in), xrtio::out(out), 1.0f, std::uint32_t{16}).wait(10s); },
           errc::run_error);
}

TEST_CASE("sim: fault::hang keeps the run RUNNING until a timeout aborts it (timed_out and state ABORT)") {
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::hang}));
  auto h = start_vadd(ctx);
  CHECK(eventually([&] { return h.state() == run_state::running; }));
  auto t0 = clk::now();
  auto msg = error_of([&] { h.wait(20ms); }, errc::timed_out);
  CHECK(clk::now() - t0 >= 20ms);
  CHECK_CONTAINS(msg, "vadd");
  CHECK_CONTAINS(msg, "outlived wait()'s timeout (20000 us)");
  CHECK(h.result().state == run_state::abort);
  CHECK(h.state() == run_state::abort);
  CHECK(device_of(ctx).stats().aborted == 1);
}

TEST_CASE("sim: a timed hang completes by itself after its duration with real results") {
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::hang, .duration = 10ms}));
  auto a = upload(ctx, std::vector<std::uint32_t>(16, 3));
  auto c = ctx.alloc(64);
  auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(a), xrtio::out(c), std::uint32_t{16});
  CHECK(h.wait(10s).ok());
  for (auto x : download<std::uint32_t>(c, 16)) CHECK(x == 6u);
}

TEST_CASE("sim: fault::refuse_abort makes a timed-out wait fail with abort_failed and retain the run") {
  auto before = xrtio::retained_runs();
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::refuse_abort, .duration = 250ms}));
  auto h = start_vadd(ctx);
  CHECK(eventually([&] { return h.state() == run_state::running; }));
  auto msg = error_of([&] { h.wait(5ms); }, errc::abort_failed);
  CHECK_CONTAINS(msg, "retained");
  CHECK(xrtio::retained_runs() == before + 1);
  CHECK(device_of(ctx).stats().abort_refused == 1);
  CHECK_FALSE(xrtio::is_final(h.result().state));
  // Once the device finishes the run, reaping lets it go.
  CHECK(eventually([&] {
    xrtio::reap_retained();
    return xrtio::retained_runs() == before;
  }));
}

TEST_CASE("sim: fault::refuse_abort refuses the abort of a run still queued for a compute unit") {
  // One unit, held by a kernel that waits for a gate: the refusing run stays
  // QUEUED. Its abort is refused all the same, so that a short deadline
  // fails the same way whether or not a unit picked the run up first.
  auto before = xrtio::retained_runs();
  std::atomic<bool> open{false};
  sim::device_config cfg;
  cfg.compute_units = 1;
  cfg.kernels.push_back({"held", {}, [&](sim::kernel_call&) {
                           while (!open.load()) std::this_thread::sleep_for(100us);
                         }});
  cfg.faults.push_back({.kernel = "vadd", .what = sim::fault::refuse_abort, .duration = 50ms});
  auto ctx = sim::open(cfg);
  auto first = xrtio::start(ctx.kernel("held"));
  CHECK(eventually([&] { return first.state() == run_state::running; }));
  auto h = start_vadd(ctx);
  CHECK(h.state() == run_state::queued);
  error_of([&] { h.wait(5ms); }, errc::abort_failed);
  CHECK(device_of(ctx).stats().abort_refused == 1);
  CHECK(xrtio::retained_runs() == before + 1);
  open = true;  // the unit is free: the retained run runs, then ends
  CHECK(first.wait(10s).ok());
  CHECK(eventually([&] {
    xrtio::reap_retained();
    return xrtio::retained_runs() == before;
  }));
}

TEST_CASE("sim: fault::slow_abort takes abort_delay and then the abort succeeds (timed_out)") {
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::slow_abort, .abort_delay = 30ms}));
  auto h = start_vadd(ctx);
  CHECK(eventually([&] { return h.state() == run_state::running; }));
  auto t0 = clk::now();
  error_of([&] { h.wait(1ms); }, errc::timed_out);
  CHECK(clk::now() - t0 >= 30ms);
  CHECK(h.result().state == run_state::abort);
  CHECK(device_of(ctx).stats().aborted == 1);
  CHECK(device_of(ctx).stats().abort_refused == 0);
}

TEST_CASE("sim: fault::slow_abort takes abort_delay also while the run waits out its latency (queued)") {
  auto cfg = with_fault({.kernel = "vadd", .what = sim::fault::slow_abort, .abort_delay = 30ms});
  cfg.latency.fixed = 10s;
  auto ctx = sim::open(cfg);
  auto h = start_vadd(ctx);
  CHECK(h.state() == run_state::queued);
  auto t0 = clk::now();
  error_of([&] { h.wait(1ms); }, errc::timed_out);
  CHECK(clk::now() - t0 >= 30ms);  // before, the abort of a queued run was at once
  CHECK(h.result().state == run_state::abort);
  CHECK(device_of(ctx).stats().aborted == 1);
}

TEST_CASE("sim: fault::device_lost ends the run and every in-flight run with device_lost and later starts fail") {
  sim::device_config cfg;
  cfg.faults.push_back({.kernel = "vadd", .what = sim::fault::device_lost});
  cfg.faults.push_back({.kernel = "scale", .what = sim::fault::hang});
  auto ctx = sim::open(cfg);
  auto in = ctx.alloc(64), out = ctx.alloc(64);
  auto hung = xrtio::start(ctx.kernel("scale"), xrtio::in(in), xrtio::out(out), 1.0f, std::uint32_t{16});
  auto lost = start_vadd(ctx);
  std::error_code ec;
  auto r = lost.wait(10s, ec);
  CHECK(ec == errc::device_lost);
  CHECK(r.state == run_state::no_response);
  r = hung.wait(10s, ec);
  CHECK(ec == errc::device_lost);
  CHECK(r.state == run_state::no_response);
  lost.wait(1s, ec);
  CHECK(ec == errc::device_lost);  // asking again gives the same answer
  auto msg = error_of([&] { xrtio::start(ctx.kernel("noop")); }, errc::device_lost);
  CHECK_CONTAINS(msg, "noop");
  error_of([&] { ctx.alloc(64); }, errc::device_lost);
  // The failed start left no lease behind.
  CHECK(xtest::tracker(in).active_count() == 0);
}

TEST_CASE("sim: device::lose() ends in-flight runs with device_lost") {
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::hang}));
  auto h = start_vadd(ctx);
  CHECK(eventually([&] { return h.state() == run_state::running; }));
  device_of(ctx).lose();
  error_of([&] { h.wait(10s); }, errc::device_lost);
  error_of([&] { start_vadd(ctx); }, errc::device_lost);
}

// ---- ERT state machine ---------------------------------------------------------------

TEST_CASE("sim: a run goes queued then running then completed") {
  // Each state is held by a gate, not a latency window a loaded host could
  // miss: the one compute unit is busy with a "blocker" run until the test
  // opens the first gate (the run stays QUEUED), then the "held" run's
  // kernel keeps it RUNNING until the second gate opens.
  std::atomic<bool> unblock{false}, finish{false}, blocking{false};
  auto wait_for_gate = [](std::atomic<bool>& gate, sim::kernel_call& c) {
    while (!gate.load() && !c.stop_requested()) std::this_thread::sleep_for(100us);
  };
  sim::device_config cfg;
  cfg.compute_units = 1;
  cfg.kernels.push_back({"blocker", {}, [&](sim::kernel_call& c) {
                           blocking = true;
                           wait_for_gate(unblock, c);
                         }});
  cfg.kernels.push_back({"held", {}, [&](sim::kernel_call& c) { wait_for_gate(finish, c); }});
  auto ctx = sim::open(cfg);
  auto blocker = xrtio::start(ctx.kernel("blocker"));
  REQUIRE(eventually([&] { return blocking.load(); }, 20000ms));
  auto h = xrtio::start(ctx.kernel("held"));
  std::vector<run_state> seen{h.state()};
  auto record_until = [&](auto done) {
    auto until = clk::now() + 20s;
    while (!done(seen.back()) && clk::now() < until) {
      auto s = h.state();
      if (s != seen.back()) seen.push_back(s);
      std::this_thread::sleep_for(100us);
    }
  };
  CHECK(h.state() == run_state::queued);  // still: the unit is busy
  unblock = true;
  record_until([](run_state s) { return s != run_state::queued; });
  CHECK(h.state() == run_state::running);  // still: the kernel holds it
  finish = true;
  record_until([](run_state s) { return xrtio::is_final(s); });
  REQUIRE(seen.size() == 3);
  CHECK(seen[0] == run_state::queued);
  CHECK(seen[1] == run_state::running);
  CHECK(seen[2] == run_state::completed);
  CHECK(h.wait(1s).ok());
  CHECK(blocker.wait(1s).ok());
}

TEST_CASE("sim: aborting a queued run (long latency) ends it in ABORT without running the kernel") {
  sim::device_config cfg;
  cfg.latency.fixed = 10s;
  auto ctx = sim::open(cfg);
  xrtio::buffer c;
  auto h = start_vadd(ctx, &c);
  CHECK(h.state() == run_state::queued);
  auto t0 = clk::now();
  error_of([&] { h.wait(2ms); }, errc::timed_out);
  CHECK(clk::now() - t0 < 5s);  // the abort did not wait for the latency
  CHECK(h.result().state == run_state::abort);
  auto s = device_of(ctx).stats();
  CHECK(s.aborted == 1);
  CHECK(s.completed == 0);
  CHECK_NOTHROW(c.write(std::span<const std::uint32_t>(std::vector<std::uint32_t>(16, 1))));
}

TEST_CASE("sim: aborting a run still in the submission inbox ends it in ABORT and it never runs later") {
  // The one unit sleeps until the noop run is due (300 ms); the vadd run,
  // due later (300 ms + 192 bytes x 1 ms), finds it asleep until an earlier
  // time, so its submission leaves it in the inbox without waking the unit.
  // The abort must take it out of the inbox (abort_run drains first): ended
  // in place instead, the unit later drained it into the queue and ran it,
  // a run already released, ending it a second time (in ERROR: its
  // arguments were gone). That failed with the drain removed.
  sim::device_config cfg;
  cfg.compute_units = 1;
  cfg.latency.fixed = 300ms;
  cfg.latency.ns_per_byte = 1'000'000.0;
  auto ctx = sim::open(cfg);
  auto first = xrtio::start(ctx.kernel("noop"));
  std::this_thread::sleep_for(20ms);  // the unit goes to sleep until the noop run is due
  auto h = start_vadd(ctx);
  error_of([&] { h.wait(1ms); }, errc::timed_out);
  CHECK(h.result().state == run_state::abort);
  CHECK(first.wait(10s).ok());
  std::this_thread::sleep_for(400ms);  // past the vadd run's due time
  CHECK(h.state() == run_state::abort);
  auto s = device_of(ctx).stats();
  CHECK(s.aborted == 1);
  CHECK(s.completed == 1);
  CHECK(s.failed == 0);  // a released run executed later: its kernel sees no buffers and fails
}

TEST_CASE("sim: aborting a running hung run ends it in ABORT") {
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::hang}));
  auto h = start_vadd(ctx);
  CHECK(eventually([&] { return h.state() == run_state::running; }));
  error_of([&] { h.wait(1ms); }, errc::timed_out);
  CHECK(h.state() == run_state::abort);
  CHECK(device_of(ctx).stats().aborted == 1);
}

TEST_CASE("sim: a pooled native run is reused for later runs of the same kernel") {
  auto ctx = sim::open();
  for (int i = 0; i < 50; ++i) {
    xrtio::buffer c;
    auto h = start_vadd(ctx, &c);
    REQUIRE(h.wait(10s).ok());
  }
  CHECK(device_of(ctx).stats().completed == 50);
}

TEST_CASE("sim: the event fd becomes readable when a run reaches a final state") {
  auto ctx = sim::open();
  int fd = ctx.native().event_fd();
  REQUIRE(fd >= 0);
  ctx.native().consume_event();
  auto h = start_vadd(ctx);
  pollfd p{fd, POLLIN, 0};
  CHECK(::poll(&p, 1, 5000) == 1);
  CHECK((p.revents & POLLIN) != 0);
  ctx.native().consume_event();
  p.revents = 0;
  CHECK(::poll(&p, 1, 0) == 0);
  CHECK(h.wait(1s).ok());
  sim::device_config no_fd;
  no_fd.event_fd = false;
  CHECK(sim::open(no_fd).native().event_fd() == -1);
}

// ---- device configuration and argument checks ------------------------------------------

TEST_CASE("sim: a device with 0 compute units or a kernel of 65 arguments is refused") {
  sim::device_config zero;
  zero.compute_units = 0;
  error_of([&] { sim::make_device(zero); }, errc::invalid_size);
  sim::device_config wide;
  sim::kernel_def k{"wide", {}, {}};
  for (int i = 0; i < 65; ++i) k.args.push_back({"s" + std::to_string(i), xrtio::backend::arg_kind::scalar, 4, 0});
  wide.kernels.push_back(k);
  auto msg = error_of([&] { sim::make_device(wide); }, errc::too_many_arguments);
  CHECK_CONTAINS(msg, "65");
  sim::device_config odd;
  odd.kernels.push_back({"odd", {{"s", xrtio::backend::arg_kind::scalar, 16, 0}}, {}});
  error_of([&] { sim::make_device(odd); }, errc::invalid_size);
}

TEST_CASE("run arguments: an unknown kernel fails with unknown_kernel naming it and what is loaded") {
  auto ctx = sim::open();
  auto msg = error_of([&] { ctx.kernel("vsub"); }, errc::unknown_kernel);
  CHECK_CONTAINS(msg, "vsub");
  CHECK_CONTAINS(msg, "vadd");
  auto k = ctx.kernel("vadd");
  CHECK(k.name() == "vadd");
  CHECK(k.args().size() == 4);
  CHECK(k.context() == ctx);
  CHECK(k.group_id(0) == 0);
  error_of([&] { k.group_id(4); }, errc::out_of_range);
}

TEST_CASE("run arguments: more than 64 arguments fail with too_many_arguments") {
  auto ctx = sim::open();
  auto k = ctx.kernel("vadd");
  auto msg = error_of(
      [&] {
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          return xrtio::start(k, (void(I), std::uint32_t{0})...);
        }(std::make_index_sequence<65>{});
      },
      errc::too_many_arguments);
  CHECK_CONTAINS(msg, "65");
  CHECK_CONTAINS(msg, "64");
  CHECK(device_of(ctx).stats().started == 0);
}

TEST_CASE("run arguments: a wrong argument count fails with argument_count") {
  auto ctx = sim::open();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(64);
  auto msg = error_of([&] { xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(ctx.alloc(64))); },
                      errc::argument_count);
  CHECK_CONTAINS(msg, "takes 4");
  CHECK_CONTAINS(msg, "3 given");
  error_of([&] { xrtio::start(ctx.kernel("noop"), std::uint32_t{1}); }, errc::argument_count);
  CHECK(xtest::tracker(a).active_count() == 0);
  CHECK(device_of(ctx).stats().started == 0);
}

TEST_CASE("run arguments: a scalar for a buffer or a buffer for a scalar or a wrong scalar size fail with "
          "argument_kind") {
  auto ctx = sim::open();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(64), b = ctx.alloc(64), c = ctx.alloc(64);
  auto msg = error_of([&] { xrtio::start(k, std::uint32_t{1}, xrtio::in(b), xrtio::out(c), std::uint32_t{16}); },
                      errc::argument_kind);
  CHECK_CONTAINS(msg, "argument 0 (a)");
  CHECK_CONTAINS(msg, "4-byte scalar was given");
  msg = error_of([&] { xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(c), c); }, errc::argument_kind);
  CHECK_CONTAINS(msg, "argument 3 (n)");
  CHECK_CONTAINS(msg, "buffer was given");
  msg = error_of([&] { xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint64_t{16}); },
                 errc::argument_kind);
  CHECK_CONTAINS(msg, "4-byte scalar");
  CHECK_CONTAINS(msg, "8 bytes were given");
  error_of([&] { xrtio::start(ctx.kernel("scale"), xrtio::in(a), xrtio::out(c), 2.0, std::uint32_t{16}); },
           errc::argument_kind);  // a double for a float
  error_of([&] { xrtio::start(k, xrtio::buffer{}, xrtio::in(b), xrtio::out(c), std::uint32_t{16}); },
           errc::invalid_size);
  CHECK(xtest::tracker(a).active_count() == 0);
  CHECK(xtest::tracker(c).active_count() == 0);
  CHECK(device_of(ctx).stats().started == 0);
}

TEST_CASE("run arguments: a buffer of another context fails with foreign_context unless cross_context") {
  auto ctx = sim::open(), other = sim::open();
  auto k = ctx.kernel("vadd");
  auto a = upload(ctx, std::vector<std::uint32_t>(16, 4));
  auto foreign = other.alloc(64);
  auto msg = error_of([&] { xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(foreign), std::uint32_t{16}); },
                      errc::foreign_context);
  CHECK_CONTAINS(msg, "argument 2 (c)");
  CHECK_CONTAINS(msg, "cross_context");
  CHECK(device_of(ctx).stats().started == 0);
  auto h = xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(foreign), std::uint32_t{16},
                        xrtio::run_options{.cross_context = true});
  CHECK(h.wait(10s).ok());
  for (auto x : download<std::uint32_t>(foreign, 16)) CHECK(x == 8u);
}

namespace {
// A device of another backend, for device_of's refusal.
struct not_sim_device final : xrtio::backend::native_device {
  std::string name() const override { return "not-sim"; }
  std::unique_ptr<xrtio::backend::native_buffer> alloc(std::size_t, xrtio::backend::buffer_kind, int) override {
    return nullptr;
  }
  std::unique_ptr<xrtio::backend::native_buffer> import_user_memory(void*, std::size_t) override { return nullptr; }
  std::unique_ptr<xrtio::backend::native_buffer> import_dmabuf(int, std::size_t) override { return nullptr; }
  std::shared_ptr<xrtio::backend::native_kernel> kernel(const std::string&) override { return nullptr; }
  std::vector<std::string> kernel_names() const override { return {}; }
};
}  // namespace

TEST_CASE("sim: device_of reaches a sim context's device and refuses others with not_supported") {
  auto ctx = sim::open();
  CHECK(&sim::device_of(ctx) == &ctx.native());
  auto msg = error_of([] { (void)sim::device_of(xrtio::context()); }, errc::not_supported);
  CHECK_CONTAINS(msg, "empty context");
  xrtio::context other(std::make_shared<not_sim_device>());
  msg = error_of([&] { (void)sim::device_of(other); }, errc::not_supported);
  CHECK_CONTAINS(msg, "not-sim");
}
