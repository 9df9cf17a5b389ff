// The reactor's sleeps and wake-ups with XRT's no-op device completing every
// run at once (completion delay 0, its own process: the delay is one per
// process). Runs that finish as soon as they start make the reactor take
// every path between its passes in quick turns: spinning, dozing on the
// handlers' backlog, sleeping idle, and being woken by submitters.
#include <doctest/doctest.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include "xrtio/async_run.hpp"
#include "xrtio/runtime.hpp"
#include "xrtio/xrt.hpp"

using namespace std::chrono_literals;
namespace xb = xrtio::xrt_backend;

namespace {

xrtio::context open_instant_vadd() {
  static const std::string path = [] {
    char dir[] = "/tmp/xrtio-test-wakeups-XXXXXX";
    REQUIRE(::mkdtemp(dir) != nullptr);
    std::string out = std::string(dir) + "/vadd.xclbin";
    std::string cmd = std::string(XRTIO_MKXCLBIN) + " --vadd -o '" + out + "'";
    REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "xrtio-mkxclbin failed: " << cmd);
    return out;
  }();
  xb::use_noop_device(0us);
  return xb::open({.xclbin_path = path});
}

}  // namespace

// A doze's wait can take a notify that a submitter sent to a sleep which
// then ended before its wait (it saw the submitter's run). The loop must
// then forget that a notify is on its way, or every later submitter skips
// its notify and the next idle sleep lasts for ever. With 4096 runs kept in
// flight from one io thread the reactor dozes on the handlers' backlog,
// sleeps idle and is woken by submissions over and over. Before the fix
// (reactor::doze clears wake_pending_) this stalled within 3 s in most runs
// under TSan (the bench's xrtio@xrt C = 4096 cell hung in 13 of 15); the
// plain build rarely loses that race.
TEST_CASE("xrt wake-ups: 4096 runs kept in flight from one io thread through dozes and idle sleeps never stall") {
  auto ctx = open_instant_vadd();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096), b = ctx.alloc(4096), c = ctx.alloc(4096);
  xrtio::runtime rt;
  asio::io_context io(1);
  constexpr int in_flight = 4096;
  std::atomic<bool> stop{false};
  std::atomic<long> done{0}, failed{0};
  std::function<void()> start_one = [&] {
    xrtio::async_run(k, xrtio::in(a), xrtio::in(b), xrtio::in(c), std::uint32_t{4},
                     xrtio::run_options{.runtime = &rt},
                     asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result r) {
                       if (ec || !r.ok()) failed.fetch_add(1);
                       done.fetch_add(1, std::memory_order_relaxed);
                       if (!stop.load(std::memory_order_relaxed)) start_one();
                     }));
  };
  asio::post(io, [&] {
    for (int i = 0; i < in_flight; ++i) start_one();
  });
  std::atomic<bool> finished{false};
  std::thread t([&] {
    io.run();
    finished = true;
  });
  // Runs are resubmitted for 3 s, then every worker ends. No completion for
  // 10 s with runs outstanding, at any point, is the lost wake-up.
  auto begin = std::chrono::steady_clock::now();
  long last = -1;
  auto last_progress = begin;
  bool stalled = false;
  while (!finished.load()) {
    auto now = std::chrono::steady_clock::now();
    if (now - begin > 3s) stop = true;
    long d = done.load();
    if (d != last) {
      last = d;
      last_progress = now;
    } else if (now - last_progress > 10s) {
      stalled = true;
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  CHECK_MESSAGE(!stalled, "no run completed for 10 s with runs outstanding, after " << done.load() << " runs");
  if (stalled) {
    stop = true;
    io.stop();
  }
  t.join();
  CHECK(failed.load() == 0);
  auto st = rt.stats();
  CHECK(st.dozes > 0);  // the case is about dozes: it must have had some
  CHECK(st.sleeps > 0);
  MESSAGE(done.load() << " runs, " << st.dozes << " dozes, " << st.sleeps << " sleeps");
}
