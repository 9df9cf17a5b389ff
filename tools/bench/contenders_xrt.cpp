// The contenders on XRT's no-op device: raw-xrt, raw-xrt-wait, xrtio@xrt and
// xrtio-prepared@xrt, and the device's set-up (delay, synthesized xclbin).
#include "contenders.hpp"

#if BENCH_XRT
#include <unistd.h>
#include <xrt/xrt_bo.h>
#include <xrt/xrt_device.h>
#include <xrt/xrt_kernel.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "contender_common.hpp"
#include "xrtio/xrt.hpp"

namespace bench {
namespace {

std::string g_xclbin;

// The no-op device, the vadd kernel and its three buffers, for the raw contenders.
struct raw_setup {
  std::optional<xrt::device> dev;
  std::optional<xrt::kernel> krn;
  std::vector<xrt::bo> bos;
  raw_setup() {
    named("l:dev", [&] {
      dev.emplace(0u);
      auto uuid = dev->load_xclbin(g_xclbin);
      krn.emplace(*dev, uuid, "vadd");
      for (int i = 0; i < 3; ++i) bos.emplace_back(*dev, 4096, krn->group_id(i));
      return 0;
    });
  }
  // A run of vadd with its arguments set once.
  xrt::run make_run() const {
    xrt::run r(*krn);
    r.set_arg(0, bos[0]);
    r.set_arg(1, bos[1]);
    r.set_arg(2, bos[2]);
    r.set_arg(3, 4u);
    return r;
  }
};

bool is_done(ert_cmd_state s) {
  return s == ERT_CMD_STATE_COMPLETED || s == ERT_CMD_STATE_ERROR || s == ERT_CMD_STATE_ABORT;
}

// raw-xrt's loop: start every run, then poll their states, restarting each
// completed one until the window ends (then letting each finish).
void poll_raw_runs(std::vector<xrt::run>& runs) {
  for (auto& r : runs) r.start();
  std::vector<char> live(runs.size(), 1);
  std::size_t n_live = runs.size();
  while (n_live) {
    bool stop = g_stop.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (!live[i]) continue;
      auto s = runs[i].state();
      if (!is_done(s)) continue;
      if (s == ERT_CMD_STATE_COMPLETED) record_count_only();
      else g_errors.fetch_add(1);
      if (stop) {
        live[i] = 0;
        --n_live;
      } else {
        runs[i].start();
      }
    }
  }
}

// raw-xrt-wait's thread: start() + wait() on its own run until the window ends.
void start_and_wait_loop(xrt::run& r) {
  while (!g_stop.load(std::memory_order_relaxed)) {
    try {
      r.start();
      // wait(ms) returns the state; never wait(0): that blocks without a timeout.
      auto s = r.wait(std::chrono::milliseconds(1000));
      if (s == ERT_CMD_STATE_COMPLETED) record_count_only();
      else g_errors.fetch_add(1);
    } catch (const std::exception&) {
      g_errors.fetch_add(1);  // reported with the cell's errors
    }
  }
}

// xrtio on the same device, same kernel and arguments (all read-only: the
// no-op device writes nothing), its threads named for the CPU split.
struct xrtio_xrt_setup {
  bool inloop = false;
  xrtio::context ctx = named("l:dev", [] { return xrtio::xrt_backend::open({.xclbin_path = g_xclbin}); });
  std::unique_ptr<xrtio::runtime> rt =
      named("l:rx", [this] { return std::make_unique<xrtio::runtime>(runtime_options_for(inloop)); });
  xrtio::kernel k = (ctx.bind(*rt), ctx.kernel("vadd"));
  xrtio::buffer a = ctx.alloc(4096), b = ctx.alloc(4096), o = ctx.alloc(4096);
};

// xrtio-prepared@xrt: xrtio with arguments bound once (prepare +
// async_execute), the fair comparison with raw-xrt's pre-bound runs.
asio::awaitable<void> prepared_worker(xrtio::prepared_run p) {
  while (!g_stop.load(std::memory_order_relaxed)) {
    try {
      record(co_await xrtio::async_execute(p, asio::use_awaitable));
    } catch (const std::exception&) {
      g_errors.fetch_add(1);
    }
  }
}

std::string self_dir() {
  char b[4096];
  auto n = ::readlink("/proc/self/exe", b, sizeof b - 1);
  if (n <= 0) return ".";
  b[n] = 0;
  std::string s(b);
  return s.substr(0, s.rfind('/'));
}

// The built xrtio-mkxclbin (its path compiled in), else the one beside this program.
std::string default_mkxclbin() {
  std::string path;
#ifdef XRTIO_MKXCLBIN
  path = XRTIO_MKXCLBIN;
  if (::access(path.c_str(), X_OK) == 0) return path;
#endif
  return self_dir() + "/xrtio-mkxclbin";
}

}  // namespace

// raw-xrt: C xrt::run objects (arguments set once), start() and state()
// polling in one loop on one thread.
result run_raw_xrt(int c) {
  auto rss0 = std::size_t(rss_bytes());
  std::vector<xrt::run> runs;
  raw_setup x;
  runs.reserve(std::size_t(c));
  for (int i = 0; i < c; ++i) runs.push_back(x.make_run());
  std::thread t([&] {
    set_thread_name("c:io");
    poll_raw_runs(runs);
  });
  auto r = measure(c, rss0);
  t.join();
  return r;
}

// raw-xrt-wait: what a user without xrtio writes first: one thread per
// in-flight run (capped like blocking-threads), each start() + wait() on its
// own xrt::run with its arguments set once.
result run_raw_xrt_wait(int c) {
  auto rss0 = std::size_t(rss_bytes());
  raw_setup x;
  int n = std::min(c, max_threads);
  std::vector<std::thread> ts;
  ts.reserve(std::size_t(n));
  // XRT 2.13 with its no-op driver is not safe against xrt::run objects
  // destroyed while another thread starts a run (start() threw "no such bo
  // handle" from xclExecBuf), nor against runs destroyed from many threads
  // at once (the kernel's destructor then threw the same from xclFreeBO):
  // issue 9's crashes, both seen in core dumps. So the runs are made and
  // destroyed here, on one thread, before and after the cell; the threads
  // only start and wait.
  std::vector<xrt::run> runs;
  runs.reserve(std::size_t(n));
  for (int i = 0; i < n; ++i) runs.push_back(x.make_run());
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&runs, i] {
      set_thread_name("c:blk");
      start_and_wait_loop(runs[std::size_t(i)]);
    });
  auto r = measure(n, rss0);
  for (auto& t : ts) t.join();
  runs.clear();  // one thread, after every start ended
  return r;
}

result run_xrtio_xrt(int c) {
  auto rss0 = std::size_t(rss_bytes());
  xrtio_xrt_setup x;
  return run_xrtio_on(x.k, c, rss0, xrtio::in(x.a), xrtio::in(x.b), xrtio::in(x.o), std::uint32_t{4});
}

// xrtio-inloop@xrt: the same, driven by the io thread (xrtio::run).
result run_xrtio_inloop_xrt(int c) {
  auto rss0 = std::size_t(rss_bytes());
  xrtio_xrt_setup x{true};
  return run_xrtio_inloop_on(*x.rt, x.k, c, rss0, xrtio::in(x.a), xrtio::in(x.b), xrtio::in(x.o), std::uint32_t{4});
}

result run_prepared_xrt(int c) {
  auto rss0 = std::size_t(rss_bytes());
  xrtio_xrt_setup x;
  asio::io_context io(1);
  for (int w = 0; w < c; ++w)
    asio::co_spawn(
        io, prepared_worker(xrtio::prepare(x.k, xrtio::in(x.a), xrtio::in(x.b), xrtio::in(x.o), std::uint32_t{4})),
        asio::detached);
  return measure_on_io_thread(io, c, rss0);
}

bool prepare_xrt(long delay_us, std::string mkxclbin) {
  try {
    xrtio::xrt_backend::use_noop_device(std::chrono::microseconds(delay_us));
    if (mkxclbin.empty()) mkxclbin = default_mkxclbin();
    char dir[] = "/tmp/xrtio-bench-XXXXXX";
    if (!::mkdtemp(dir)) throw std::runtime_error("mkdtemp");
    g_xclbin = std::string(dir) + "/vadd.xclbin";
    std::string cmd = "'" + mkxclbin + "' --vadd -o '" + g_xclbin + "' >/dev/null";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("xrtio-mkxclbin failed: " + cmd);
    return true;
  } catch (const std::exception& e) {
    std::printf("XRT contenders skipped: %s\n", e.what());
    return false;
  }
}

}  // namespace bench

#else  // no XRT: the XRT contenders are not built

namespace bench {
bool prepare_xrt(long, std::string) { return false; }
}  // namespace bench

#endif
