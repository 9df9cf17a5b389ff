// xrtio-bench: xrtio's async_run against the ways people wait for kernel
// runs without it, on the simulated device (and XRT's no-op device when
// built with XRT). See docs/PERFORMANCE.md for the targets and results.
//
//   xrtio-bench [--quick] [--repeat N] [--window S] [--json FILE] [--plot FILE.png]
//               [--latencies US,US,..] [--in-flight C,C,..] [--contenders a,b,..]
//               [--no-xrt] [--xrt-delay-us US] [--mkxclbin PATH] [--spin-us US] [--max-poll-us US] [--no-predict]
//
// --spin-us / --max-poll-us set the xrtio runtime's spin_window and
// max_poll_interval (runtime_options) for experiments; defaults: the library's.
//
// Cells: every (contender, device latency L, runs in flight C). In each cell
// a fresh device (and runtime) is made, C workers each run the noop kernel
// in a loop; after a warm-up (every worker has completed a run), one
// measurement window of --window seconds counts completions, heap
// allocations (global operator new is replaced below), CPU time (process,
// and per thread role from /proc/self/task/*/schedstat), resume latency
// (run_result::device_completed to the moment the waiting code runs again)
// and resident memory. Each metric is the median over --repeat sweeps.
//
// Contenders:
//   xrtio            async_run + use_awaitable, C coroutines on one io_context thread
//   blocking-threads one thread per in-flight run in xrtio::start(k).wait(), at most 256 threads
//   pool-offload     coroutine on one io_context thread: post to a thread_pool, wait() there, post back
//   loop-poll        xrtio::start on the io_context thread; a re-posted poller checks
//                    run_handle::state() and resumes the waiting coroutines
//   raw-xrt          (XRT no-op device) C xrt::run objects, start() + state() polling on one thread
//   raw-xrt-wait     (XRT no-op device) one thread per in-flight run (capped), start() + wait()
//   xrtio            on the XRT no-op device as well ("xrtio@xrt" in the table)
//   xrtio-prepared   prepare() once, async_execute() per run, on the XRT no-op device ("xrtio-prepared@xrt")
#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <asio.hpp>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "xrtio/xrtio.hpp"
#if defined(XRTIO_BENCH_RAW_XRT) && defined(XRTIO_HAS_XRT)
#include <xrt/xrt_bo.h>
#include <xrt/xrt_device.h>
#include <xrt/xrt_kernel.h>

#include "xrtio/xrt.hpp"
#define BENCH_XRT 1
#else
#define BENCH_XRT 0
#endif

// ---- allocation counting ------------------------------------------------------
namespace {
std::atomic<std::uint64_t> g_allocs{0};
// XRTIO_BENCH_ALLOC_TRACE=N: print the stacks of the first N allocations made
// inside a measurement window (to find per-run allocations).
std::atomic<int> g_trace_left{0};
std::uint64_t g_trace_every = 1;  // XRTIO_BENCH_ALLOC_TRACE_EVERY=K: every K-th allocation only
std::atomic<std::uint64_t> g_trace_seen{0};
std::atomic<bool> g_trace_on{false};
thread_local bool t_in_trace = false;
void trace_alloc(std::size_t n) noexcept {
  if (!g_trace_on.load(std::memory_order_relaxed) || t_in_trace) return;
  if (g_trace_seen.fetch_add(1) % g_trace_every) return;
  if (g_trace_left.fetch_sub(1) <= 0) return;
  t_in_trace = true;
  void* frames[24];
  int k = backtrace(frames, 24);
  char head[64];
  int len = std::snprintf(head, sizeof head, "--- alloc %zu bytes\n", n);
  [[maybe_unused]] auto w = ::write(2, head, std::size_t(len));
  backtrace_symbols_fd(frames, k, 2);
  t_in_trace = false;
}
}  // namespace
void* operator new(std::size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  trace_alloc(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::aligned_alloc(static_cast<std::size_t>(a), (n + static_cast<std::size_t>(a) - 1) &
                                                                     ~(static_cast<std::size_t>(a) - 1)))
    return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

// ---- measurement state shared by all contenders ---------------------------------
std::atomic<std::uint64_t> g_completed{0};  // runs completed (any time)
std::atomic<std::uint64_t> g_errors{0};
std::atomic<bool> g_measuring{false};
std::atomic<bool> g_stop{false};
constexpr std::size_t sample_cap = std::size_t(1) << 22;
float* g_samples = nullptr;  // resume latencies (us) recorded in the window
std::atomic<std::size_t> g_nsamples{0};

// Handlers that may be writing g_samples. The controller clears g_measuring
// and then waits for this to reach zero before it reads the samples: a
// handler that saw g_measuring == true just before the store must not write
// into the array while it is sorted (an introsort over changing elements can
// run past the array's end). Both sides are seq_cst, so either the handler
// sees the cleared flag or the controller sees the handler counted.
std::atomic<int> g_recording{0};

inline void record(const xrtio::run_result& r) noexcept {
  g_completed.fetch_add(1, std::memory_order_relaxed);
  if (!g_measuring.load(std::memory_order_relaxed)) return;  // cheap early out
  if (r.device_completed == clk::time_point{}) return;       // the backend does not know
  g_recording.fetch_add(1, std::memory_order_seq_cst);
  if (g_measuring.load(std::memory_order_seq_cst)) {
    auto us = std::chrono::duration<float, std::micro>(clk::now() - r.device_completed).count();
    std::size_t i = g_nsamples.fetch_add(1, std::memory_order_relaxed);
    if (i < sample_cap) g_samples[i] = us;
  }
  g_recording.fetch_sub(1, std::memory_order_release);
}

// Ends the sampling window: after this returns no handler writes g_samples
// until the next window opens.
void stop_sampling() noexcept {
  g_measuring.store(false, std::memory_order_seq_cst);
  while (g_recording.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  std::atomic_thread_fence(std::memory_order_acquire);
}
inline void record_count_only() noexcept { g_completed.fetch_add(1, std::memory_order_relaxed); }

void set_thread_name(const char* n) { pthread_setname_np(pthread_self(), n); }
// Runs f with this thread renamed, so threads it creates inherit the name
// (how the CPU time of the device's and the reactor's threads is told apart).
template <class F>
auto named(const char* n, F&& f) {
  char old[32] = "main";
  pthread_getname_np(pthread_self(), old, sizeof old);
  set_thread_name(n);
  struct restore {
    const char* o;
    ~restore() { set_thread_name(o); }
  } r{old};
  return f();
}

// CPU time per thread role. Roles by name prefix: "c:" the contender's own
// threads, "l:dev" the simulated device, "l:rx" the xrtio reactor, rest other.
struct cpu_split {
  double app = 0, dev = 0, rx = 0, other = 0;
};
std::size_t read_small(const char* path, char* buf, std::size_t n) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  auto r = ::read(fd, buf, n - 1);
  ::close(fd);
  if (r < 0) r = 0;
  buf[r] = 0;
  return std::size_t(r);
}
cpu_split thread_cpu() {
  cpu_split s;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return s;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char path[320], buf[128], name[32];
    std::snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    if (!read_small(path, name, sizeof name)) continue;
    std::snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
    if (!read_small(path, buf, sizeof buf)) continue;
    double secs = double(std::strtoull(buf, nullptr, 10)) * 1e-9;
    if (!std::strncmp(name, "c:", 2)) s.app += secs;
    else if (!std::strncmp(name, "l:dev", 5)) s.dev += secs;
    else if (!std::strncmp(name, "l:rx", 4)) s.rx += secs;
    else s.other += secs;
  }
  ::closedir(d);
  return s;
}
double process_cpu() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}
double rss_bytes() {
  char buf[128];
  if (!read_small("/proc/self/statm", buf, sizeof buf)) return 0;
  unsigned long size = 0, res = 0;
  std::sscanf(buf, "%lu %lu", &size, &res);
  return double(res) * double(sysconf(_SC_PAGESIZE));
}
double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024.0;
}

struct snapshot {
  clk::time_point t;
  std::uint64_t completed, allocs;
  double cpu;
  cpu_split threads;
};
snapshot take() {
  snapshot s;
  s.threads = thread_cpu();
  s.cpu = process_cpu();
  s.allocs = g_allocs.load();
  s.completed = g_completed.load();
  s.t = clk::now();
  return s;
}

struct result {
  std::string contender;
  double latency_us = 0;
  int in_flight = 0;
  int effective = 0;  // runs actually in flight (blocking-threads: capped by threads)
  double runs_per_s = 0, p50 = NAN, p99 = NAN, p999 = NAN, cpu_us = 0, app_cpu_us = 0, rx_cpu_us = 0, dev_cpu_us = 0,
         allocs = 0, rss_per_run = 0;
  std::uint64_t runs = 0, errors = 0;
};

struct bench_opts {
  double warm_s = 0.15, window_s = 1.0;
  xrtio::runtime_options rt;  // --spin-us, --max-poll-us
};
bench_opts g_opts;

// The controller (main thread): waits for the warm-up (every worker has
// completed at least one run, and warm_s passed), measures one window, stops.
result measure(int effective, std::size_t rss_before, int in_flight = -1) {
  auto t_start = clk::now();
  auto warm = std::chrono::duration<double>(g_opts.warm_s);
  while (clk::now() - t_start < warm ||
         (g_completed.load() < std::uint64_t(effective) && clk::now() - t_start < 10s))
    std::this_thread::sleep_for(2ms);
  g_nsamples.store(0);
  g_measuring.store(true);
  auto a = take();
  g_trace_on.store(g_trace_left.load() > 0);
  std::this_thread::sleep_for(std::chrono::duration<double>(g_opts.window_s));
  g_trace_on.store(false);
  auto b = take();
  stop_sampling();
  double rss = rss_bytes();
  g_stop.store(true);
  result r;
  r.effective = effective;
  r.runs = b.completed - a.completed;
  double n = double(std::max<std::uint64_t>(r.runs, 1));
  r.runs_per_s = double(r.runs) / std::chrono::duration<double>(b.t - a.t).count();
  r.cpu_us = (b.cpu - a.cpu) * 1e6 / n;
  r.app_cpu_us = (b.threads.app - a.threads.app) * 1e6 / n;
  r.rx_cpu_us = (b.threads.rx - a.threads.rx) * 1e6 / n;
  r.dev_cpu_us = (b.threads.dev - a.threads.dev) * 1e6 / n;
  r.allocs = double(b.allocs - a.allocs) / n;
  r.rss_per_run = (rss - double(rss_before)) / double(std::max(in_flight > 0 ? in_flight : effective, 1));
  std::size_t ns = std::min(g_nsamples.load(), sample_cap);
  if (ns) {
    std::sort(g_samples, g_samples + ns);
    auto at = [&](double p) { return double(g_samples[std::min(ns - 1, std::size_t(p * double(ns)))]); };
    r.p50 = at(0.5);
    r.p99 = at(0.99);
    r.p999 = at(0.999);
  }
  return r;
}

void reset_cell() {
  g_completed.store(0);
  g_errors.store(0);
  g_measuring.store(false);
  g_stop.store(false);
  g_nsamples.store(0);
  malloc_trim(0);
}

// A device + (for the async contenders) a runtime bound to it.
struct sim_setup {
  std::unique_ptr<xrtio::runtime> rt;
  xrtio::context ctx;
  xrtio::kernel k;
  sim_setup(std::chrono::nanoseconds latency, bool with_runtime) {
    xrtio::sim::device_config cfg;
    cfg.latency.fixed = latency;
    ctx = named("l:dev", [&] { return xrtio::sim::open(cfg); });
    if (with_runtime) {
      rt = named("l:rx", [] { return std::make_unique<xrtio::runtime>(g_opts.rt); });
      ctx.bind(*rt);
    }
    k = ctx.kernel("noop");
  }
};

// ---- xrtio: async_run + use_awaitable ---------------------------------------------
template <class... Args>
asio::awaitable<void> xrtio_worker(xrtio::kernel k, Args... args) {
  while (!g_stop.load(std::memory_order_relaxed)) {
    try {
      auto r = co_await xrtio::async_run(k, args..., asio::use_awaitable);
      record(r);
    } catch (const std::exception&) {
      g_errors.fetch_add(1);
    }
  }
}

template <class... Args>
result run_xrtio_on(const xrtio::kernel& k, int c, std::size_t rss0, Args... args) {
  asio::io_context io(1);
  for (int w = 0; w < c; ++w) asio::co_spawn(io, xrtio_worker(k, args...), asio::detached);
  std::thread t([&] {
    set_thread_name("c:io");
    io.run();
  });
  auto r = measure(c, rss0);
  t.join();
  return r;
}

result run_xrtio(std::chrono::nanoseconds lat, int c) {
  auto rss0 = std::size_t(rss_bytes());
  sim_setup s(lat, true);
  return run_xrtio_on(s.k, c, rss0);
}

// ---- blocking-threads: one thread per run, blocking in wait() -------------------------
constexpr int max_threads = 256;
result run_blocking(std::chrono::nanoseconds lat, int c) {
  auto rss0 = std::size_t(rss_bytes());
  sim_setup s(lat, false);
  int n = std::min(c, max_threads);
  std::vector<std::thread> ts;
  ts.reserve(std::size_t(n));
  for (int i = 0; i < n; ++i)
    ts.emplace_back([k = s.k] {
      set_thread_name("c:blk");
      while (!g_stop.load(std::memory_order_relaxed)) {
        try {
          auto h = xrtio::start(k);
          record(h.wait());
        } catch (const std::exception&) {
          g_errors.fetch_add(1);
        }
      }
    });
  auto r = measure(n, rss0);
  for (auto& t : ts) t.join();
  return r;
}

// ---- pool-offload: post to a pool, block there, post back ---------------------------------
int pool_size() { return int(std::min(64u, 2 * std::max(1u, std::thread::hardware_concurrency()))); }
thread_local bool t_on_pool = false;

asio::awaitable<void> pool_worker(xrtio::kernel k, asio::thread_pool* pool) {
  auto home = co_await asio::this_coro::executor;
  while (!g_stop.load(std::memory_order_relaxed)) {
    // bind_executor: without it the post's completion is dispatched back to
    // the coroutine's own executor and wait() would block the io thread.
    co_await asio::post(pool->get_executor(), asio::bind_executor(*pool, asio::use_awaitable));
    std::optional<xrtio::run_result> r;
    if (!pool->get_executor().running_in_this_thread()) g_errors.fetch_add(1);  // the contender is broken
    // Name the pool thread for the CPU split if the start-up posts missed it
    // (on a loaded host one pool thread can take two of them).
    if (!t_on_pool) {
      set_thread_name("c:pool");
      t_on_pool = true;
    }
    if (!g_stop.load(std::memory_order_relaxed)) {
      try {
        r = xrtio::start(k).wait();
      } catch (const std::exception&) {
        g_errors.fetch_add(1);
      }
    }
    co_await asio::post(home, asio::use_awaitable);
    if (r) record(*r);
  }
}

result run_pool(std::chrono::nanoseconds lat, int c) {
  auto rss0 = std::size_t(rss_bytes());
  sim_setup s(lat, false);
  asio::thread_pool pool(static_cast<std::size_t>(pool_size()));
  for (int i = 0; i < pool_size(); ++i)
    asio::post(pool, [] {
      set_thread_name("c:pool");
      t_on_pool = true;
      std::this_thread::sleep_for(20ms);  // so that each pool thread takes one
    });
  asio::io_context io(1);
  for (int w = 0; w < c; ++w) asio::co_spawn(io, pool_worker(s.k, &pool), asio::detached);
  std::thread t([&] {
    set_thread_name("c:io");
    io.run();
  });
  auto r = measure(std::min(c, pool_size()), rss0, c);
  r.effective = c;
  t.join();
  pool.join();
  return r;
}

// ---- loop-poll: the io_context thread polls run states itself -------------------------------
struct poll_set_base {
  virtual ~poll_set_base() = default;
};
template <class H>
struct poll_set final : poll_set_base {
  struct entry {
    xrtio::run_handle* h;
    std::optional<H> handler;
  };
  asio::io_context& io;
  std::vector<entry> pending;
  bool polling = false;
  explicit poll_set(asio::io_context& i, std::size_t c) : io(i) { pending.reserve(c + 1); }
  void add(xrtio::run_handle* h, H&& handler) {
    pending.push_back({h, std::move(handler)});
    if (!polling) {
      polling = true;
      asio::post(io, [this] { scan(); });
    }
  }
  void scan() {
    for (std::size_t i = 0; i < pending.size();) {
      if (!xrtio::is_final(pending[i].h->state())) {
        ++i;
        continue;
      }
      H handler(std::move(*pending[i].handler));
      if (i + 1 != pending.size()) {
        pending[i].h = pending.back().h;
        pending[i].handler.reset();
        pending[i].handler.emplace(std::move(*pending.back().handler));
      }
      pending.pop_back();
      std::move(handler)();  // resumes the coroutine, which may add() again (at the end)
    }
    if (pending.empty()) polling = false;
    else asio::post(io, [this] { scan(); });
  }
};
struct loop_poll_state {
  asio::io_context io{1};
  std::unique_ptr<poll_set_base> set;
  std::size_t c = 0;
};

asio::awaitable<void> loop_poll_worker(xrtio::kernel k, loop_poll_state* st) {
  while (!g_stop.load(std::memory_order_relaxed)) {
    try {
      auto h = xrtio::start(k);
      co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
          [&](auto handler) {
            using H = decltype(handler);
            if (!st->set) st->set = std::make_unique<poll_set<H>>(st->io, st->c);
            static_cast<poll_set<H>*>(st->set.get())->add(&h, std::move(handler));
          },
          asio::use_awaitable);
      record(h.wait());  // final already: returns at once
    } catch (const std::exception&) {
      g_errors.fetch_add(1);
    }
  }
}

result run_loop_poll(std::chrono::nanoseconds lat, int c) {
  auto rss0 = std::size_t(rss_bytes());
  sim_setup s(lat, false);
  loop_poll_state st;
  st.c = std::size_t(c);
  for (int w = 0; w < c; ++w) asio::co_spawn(st.io, loop_poll_worker(s.k, &st), asio::detached);
  std::thread t([&] {
    set_thread_name("c:io");
    st.io.run();
  });
  auto r = measure(c, rss0);
  t.join();
  return r;
}

// ---- XRT no-op device ---------------------------------------------------------------
bool is_xrt_contender(const std::string& n) {
  return n == "raw-xrt" || n == "raw-xrt-wait" || n == "xrtio@xrt" || n == "xrtio-prepared@xrt";
}
#if BENCH_XRT
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
};

// raw-xrt: C xrt::run objects (arguments set once), start() and state()
// polling in one loop on one thread.
result run_raw_xrt(int c) {
  auto rss0 = std::size_t(rss_bytes());
  std::vector<xrt::run> runs;
  raw_setup x;
  auto& krn = x.krn;
  auto& bos = x.bos;
  runs.reserve(std::size_t(c));
  for (int i = 0; i < c; ++i) {
    auto& r = runs.emplace_back(*krn);
    r.set_arg(0, bos[0]);
    r.set_arg(1, bos[1]);
    r.set_arg(2, bos[2]);
    r.set_arg(3, 4u);
  }
  std::thread t([&] {
    set_thread_name("c:io");
    for (auto& r : runs) r.start();
    std::vector<char> live(runs.size(), 1);
    std::size_t n_live = runs.size();
    while (n_live) {
      bool stop = g_stop.load(std::memory_order_relaxed);
      for (std::size_t i = 0; i < runs.size(); ++i) {
        if (!live[i]) continue;
        auto s = runs[i].state();
        if (s == ERT_CMD_STATE_COMPLETED || s == ERT_CMD_STATE_ERROR || s == ERT_CMD_STATE_ABORT) {
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
  });
  auto r = measure(c, rss0);
  t.join();
  return r;
}

// xrtio on the same device, same kernel and arguments (all read-only: the
// no-op device writes nothing), its threads named for the CPU split.
struct xrtio_xrt_setup {
  xrtio::context ctx = named("l:dev", [] { return xrtio::xrt_backend::open({.xclbin_path = g_xclbin}); });
  std::unique_ptr<xrtio::runtime> rt = named("l:rx", [] { return std::make_unique<xrtio::runtime>(g_opts.rt); });
  xrtio::kernel k = (ctx.bind(*rt), ctx.kernel("vadd"));
  xrtio::buffer a = ctx.alloc(4096), b = ctx.alloc(4096), o = ctx.alloc(4096);
};

result run_xrtio_xrt(int c) {
  auto rss0 = std::size_t(rss_bytes());
  xrtio_xrt_setup x;
  return run_xrtio_on(x.k, c, rss0, xrtio::in(x.a), xrtio::in(x.b), xrtio::in(x.o), std::uint32_t{4});
}

// raw-xrt-wait: what a user without xrtio writes first: one thread per
// in-flight run (capped like blocking-threads), each start() + wait() on its
// own xrt::run with its arguments set once.
result run_raw_xrt_wait(int c) {
  auto rss0 = std::size_t(rss_bytes());
  raw_setup x;
  auto& krn = x.krn;
  auto& bos = x.bos;
  int n = std::min(c, max_threads);
  std::vector<std::thread> ts;
  ts.reserve(std::size_t(n));
  // XRT 2.13's no-op driver is not safe against one thread destroying an
  // xrt::run (xclFreeBO) while another starts one (xclExecBuf): start()
  // threw "no such bo handle" and, uncaught in this thread, ended the
  // process (issue 9's crash, seen in a core dump). So every thread keeps
  // its run until all have stopped starting theirs.
  std::barrier done_starting(n);
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&] {
      set_thread_name("c:blk");
      {
        xrt::run r(*krn);
        r.set_arg(0, bos[0]);
        r.set_arg(1, bos[1]);
        r.set_arg(2, bos[2]);
        r.set_arg(3, 4u);
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
        done_starting.arrive_and_wait();
      }
    });
  auto r = measure(n, rss0);
  for (auto& t : ts) t.join();
  return r;
}

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
result run_prepared_xrt(int c) {
  auto rss0 = std::size_t(rss_bytes());
  xrtio_xrt_setup x;
  asio::io_context io(1);
  for (int w = 0; w < c; ++w)
    asio::co_spawn(
        io, prepared_worker(xrtio::prepare(x.k, xrtio::in(x.a), xrtio::in(x.b), xrtio::in(x.o), std::uint32_t{4})),
        asio::detached);
  std::thread t([&] {
    set_thread_name("c:io");
    io.run();
  });
  auto r = measure(c, rss0);
  t.join();
  return r;
}
#endif

// ---- idle wake-ups ----------------------------------------------------------------
double idle_wakeups_per_s(double secs) {
  auto rt = named("l:rx", [] { return std::make_unique<xrtio::runtime>(); });
  auto ctx = named("l:dev", [] { return xrtio::sim::open(); });
  ctx.bind(*rt);
  asio::io_context io;
  for (int i = 0; i < 100; ++i)
    asio::co_spawn(io, xrtio::async_run(ctx.kernel("noop"), asio::use_awaitable), asio::detached);
  io.run();
  std::this_thread::sleep_for(50ms);  // past the spin window
  auto s0 = rt->stats();
  std::this_thread::sleep_for(std::chrono::duration<double>(secs));
  auto s1 = rt->stats();
  return double((s1.wakeups - s0.wakeups) + (s1.sleeps - s0.sleeps)) / secs;
}

// ---- driver -------------------------------------------------------------------------
double median(std::vector<double> v) {
  std::vector<double> f;
  for (double x : v)
    if (!std::isnan(x)) f.push_back(x);
  if (f.empty()) return NAN;
  std::sort(f.begin(), f.end());
  return f.size() % 2 ? f[f.size() / 2] : 0.5 * (f[f.size() / 2 - 1] + f[f.size() / 2]);
}

struct cell {
  std::string contender;
  long latency_us;
  int c;
  std::vector<result> reps;
  result med;
};

result median_of(const std::vector<result>& v) {
  result m = v.front();
  auto med = [&](double result::*f) {
    std::vector<double> x;
    for (auto& r : v) x.push_back(r.*f);
    return median(x);
  };
  m.runs_per_s = med(&result::runs_per_s);
  m.p50 = med(&result::p50);
  m.p99 = med(&result::p99);
  m.p999 = med(&result::p999);
  m.cpu_us = med(&result::cpu_us);
  m.app_cpu_us = med(&result::app_cpu_us);
  m.rx_cpu_us = med(&result::rx_cpu_us);
  m.dev_cpu_us = med(&result::dev_cpu_us);
  m.allocs = med(&result::allocs);
  m.rss_per_run = med(&result::rss_per_run);
  m.errors = 0;
  for (auto& r : v) m.errors += r.errors;
  return m;
}

std::vector<long> parse_list(const char* s) {
  std::vector<long> v;
  for (const char* p = s; *p;) {
    char* e;
    v.push_back(std::strtol(p, &e, 10));
    p = *e == ',' ? e + 1 : e;
    if (e == p && *p) break;
  }
  return v;
}
std::vector<std::string> parse_names(const char* s) {
  std::vector<std::string> v;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || !*p) {
      if (!cur.empty()) v.push_back(cur);
      cur.clear();
      if (!*p) break;
    } else {
      cur += *p;
    }
  }
  return v;
}

std::string cpu_model() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "?";
  char line[512];
  std::string m = "?";
  while (std::fgets(line, sizeof line, f))
    if (!std::strncmp(line, "model name", 10)) {
      const char* c = std::strchr(line, ':');
      m = c ? c + 2 : line;
      while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
      break;
    }
  std::fclose(f);
  return m;
}

std::string fmt(double v, const char* f) {
  if (std::isnan(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string jnum(double v) {
  if (std::isnan(v) || std::isinf(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

void print_row(const cell& c) {
  auto& m = c.med;
  std::printf("%-18s %5ld %7d %7d %11s %9s %9s %9s %8s %7s %7s %7s %8s %8s%s\n", c.contender.c_str(), c.latency_us, c.c,
              m.effective, fmt(m.runs_per_s, "%.0f").c_str(), fmt(m.p50, "%.1f").c_str(), fmt(m.p99, "%.1f").c_str(),
              fmt(m.p999, "%.1f").c_str(), fmt(m.cpu_us, "%.2f").c_str(), fmt(m.app_cpu_us, "%.2f").c_str(),
              fmt(m.rx_cpu_us, "%.2f").c_str(), fmt(m.dev_cpu_us, "%.2f").c_str(), fmt(m.allocs, "%.3f").c_str(),
              fmt(m.rss_per_run, "%.0f").c_str(), m.errors ? "  ERRORS" : "");
  std::fflush(stdout);
}
void print_header() {
  std::printf("%-18s %5s %7s %7s %11s %9s %9s %9s %8s %7s %7s %7s %8s %8s\n", "contender", "L us", "C", "eff.C",
              "runs/s", "p50 us", "p99 us", "p99.9 us", "cpu/run", "app", "reactor", "device", "allocs", "B/run");
}

bool have_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

void write_plot(const std::string& png, const std::vector<cell>& cells, const std::vector<long>& lats,
                const std::vector<std::string>& names) {
  if (!have_gnuplot()) {
    std::printf("--plot: gnuplot not found (Debian package gnuplot-nox): %s not written\n", png.c_str());
    return;
  }
  std::string dat = png + ".dat", gp = png + ".gp";
  FILE* d = std::fopen(dat.c_str(), "w");
  if (!d) return;
  // One gnuplot data block per (latency, contender), separated by two blank lines.
  std::vector<std::pair<long, std::string>> blocks;
  std::vector<bool> has_p99;
  for (long l : lats)
    for (auto& n : names) {
      bool any = false, p99 = false;
      for (auto& c : cells)
        if (c.latency_us == l && c.contender == n && !c.reps.empty()) {
          std::fprintf(d, "%d %s %s\n", c.c, jnum(c.med.runs_per_s).c_str(),
                       std::isnan(c.med.p99) ? "NaN" : jnum(c.med.p99).c_str());
          any = true;
          p99 = p99 || !std::isnan(c.med.p99);
        }
      if (!any) continue;
      std::fprintf(d, "\n\n");
      blocks.emplace_back(l, n);
      has_p99.push_back(p99);
    }
  std::fclose(d);
  FILE* g = std::fopen(gp.c_str(), "w");
  if (!g) return;
  int cols = int(lats.size());
  std::fprintf(g,
               "set terminal pngcairo size %d,900 font ',10'\nset output '%s'\n"
               "set multiplot layout 2,%d title 'xrtio-bench: throughput and completion-to-resume p99 vs runs in "
               "flight (medians)'\n"
               "set termoption noenhanced\nset logscale x 4\nset logscale y\nset grid\nset key top left font ',8'\nset datafile missing 'NaN'\n"
               "set xlabel 'runs in flight C'\n",
               std::max(700, 480 * cols), png.c_str(), cols);
  const char* styles[] = {"lc rgb '#d62728' lw 2 pt 7", "lc rgb '#1f77b4' lw 2 pt 5", "lc rgb '#2ca02c' lw 2 pt 9",
                          "lc rgb '#9467bd' lw 2 pt 11", "lc rgb '#ff7f0e' lw 2 pt 13", "lc rgb '#8c564b' lw 2 pt 3"};
  for (int row = 0; row < 2; ++row)
    for (int li = 0; li < cols; ++li) {
      long l = lats[std::size_t(li)];
      if (l >= 0)
        std::fprintf(g, "set title 'sim, L = %ld us: %s'\n", l, row == 0 ? "runs per second" : "resume p99");
      else
        std::fprintf(g, "set title 'XRT no-op device (delay %ld us): %s'\n", -1 - l,
                     row == 0 ? "runs per second" : "resume p99");
      std::fprintf(g, "set ylabel '%s'\nplot ", row == 0 ? "runs/s" : "p99 us");
      bool first = true;
      for (std::size_t b = 0; b < blocks.size(); ++b) {
        if (blocks[b].first != lats[std::size_t(li)] || (row == 1 && !has_p99[b])) continue;
        std::size_t ni = std::size_t(std::find(names.begin(), names.end(), blocks[b].second) - names.begin());
        std::fprintf(g, "%s'%s' index %zu using 1:%d with linespoints %s title '%s'", first ? "" : ", ", dat.c_str(), b,
                     row == 0 ? 2 : 3, styles[ni % 6], blocks[b].second.c_str());
        first = false;
      }
      if (first) std::fprintf(g, "NaN notitle");
      std::fprintf(g, "\n");
    }
  std::fprintf(g, "unset multiplot\n");
  std::fclose(g);
  std::string cmd = "gnuplot '" + gp + "'";
  if (std::system(cmd.c_str()) == 0) std::printf("plot written: %s\n", png.c_str());
  else std::printf("--plot: gnuplot failed (%s)\n", gp.c_str());
}

std::string self_dir() {
  char b[4096];
  auto n = ::readlink("/proc/self/exe", b, sizeof b - 1);
  if (n <= 0) return ".";
  b[n] = 0;
  std::string s(b);
  return s.substr(0, s.rfind('/'));
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, no_xrt = false;
  int repeat = -1;
  double window = -1;
  std::string json, plot, mkxclbin;
  std::vector<long> lats, cs;
  std::vector<std::string> contenders;
  long xrt_delay_us = 0;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* n) { return !std::strcmp(argv[i], n) && i + 1 < argc; };
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--no-xrt")) no_xrt = true;
    else if (arg("--repeat")) repeat = std::atoi(argv[++i]);
    else if (arg("--window")) window = std::atof(argv[++i]);
    else if (arg("--json")) json = argv[++i];
    else if (arg("--plot")) plot = argv[++i];
    else if (arg("--latencies")) lats = parse_list(argv[++i]);
    else if (arg("--in-flight")) cs = parse_list(argv[++i]);
    else if (arg("--contenders")) contenders = parse_names(argv[++i]);
    else if (arg("--xrt-delay-us")) xrt_delay_us = std::atol(argv[++i]);
    else if (arg("--mkxclbin")) mkxclbin = argv[++i];
    else if (arg("--spin-us")) g_opts.rt.spin_window = std::chrono::microseconds(std::atol(argv[++i]));
    else if (!std::strcmp(argv[i], "--no-predict")) g_opts.rt.predict_completions = false;
    else if (arg("--max-poll-us")) g_opts.rt.max_poll_interval = std::chrono::microseconds(std::atol(argv[++i]));
    else {
      std::fprintf(stderr,
                   "usage: xrtio-bench [--quick] [--repeat N] [--window SECONDS] [--json FILE] [--plot FILE.png]\n"
                   "                   [--latencies US,..] [--in-flight C,..] [--contenders NAME,..]\n"
                   "                   [--no-xrt] [--xrt-delay-us US] [--mkxclbin PATH] [--spin-us US] [--max-poll-us US] [--no-predict]\n"
                   "contenders: xrtio blocking-threads pool-offload loop-poll raw-xrt raw-xrt-wait xrtio@xrt xrtio-prepared@xrt\n");
      return 2;
    }
  }
  if (lats.empty()) lats = quick ? std::vector<long>{0, 50} : std::vector<long>{0, 10, 50, 1000};
  if (cs.empty()) cs = quick ? std::vector<long>{1, 4096} : std::vector<long>{1, 64, 4096, 65536};
  if (repeat < 1) repeat = 3;  // medians of 3, quick or not
  g_opts.window_s = window > 0 ? window : quick ? 0.2 : 0.6;
  g_opts.warm_s = quick ? 0.05 : 0.15;
  if (contenders.empty())
    contenders = {"xrtio", "blocking-threads", "pool-offload", "loop-poll", "raw-xrt", "raw-xrt-wait", "xrtio@xrt", "xrtio-prepared@xrt"};
  auto wants = [&](const char* n) { return std::find(contenders.begin(), contenders.end(), n) != contenders.end(); };
  g_samples = static_cast<float*>(std::malloc(sample_cap * sizeof(float)));
  set_thread_name("main");
  if (const char* t = std::getenv("XRTIO_BENCH_ALLOC_TRACE")) {
    void* f[2];
    backtrace(f, 2);  // loads libgcc before any traced allocation
    g_trace_left.store(std::atoi(t));
    if (const char* e = std::getenv("XRTIO_BENCH_ALLOC_TRACE_EVERY")) g_trace_every = std::max(1, std::atoi(e));
  }

  bool xrt = false;
#if BENCH_XRT
  if (!no_xrt && (wants("raw-xrt") || wants("raw-xrt-wait") || wants("xrtio@xrt") || wants("xrtio-prepared@xrt"))) {
    try {
      xrtio::xrt_backend::use_noop_device(std::chrono::microseconds(xrt_delay_us));
      if (mkxclbin.empty()) {
#ifdef XRTIO_MKXCLBIN
        mkxclbin = XRTIO_MKXCLBIN;
        if (::access(mkxclbin.c_str(), X_OK) != 0)
#endif
          mkxclbin = self_dir() + "/xrtio-mkxclbin";
      }
      char dir[] = "/tmp/xrtio-bench-XXXXXX";
      if (!::mkdtemp(dir)) throw std::runtime_error("mkdtemp");
      g_xclbin = std::string(dir) + "/vadd.xclbin";
      std::string cmd = "'" + mkxclbin + "' --vadd -o '" + g_xclbin + "' >/dev/null";
      if (std::system(cmd.c_str()) != 0) throw std::runtime_error("xrtio-mkxclbin failed: " + cmd);
      xrt = true;
    } catch (const std::exception& e) {
      std::printf("XRT contenders skipped: %s\n", e.what());
    }
  }
#else
  (void)no_xrt;
  (void)xrt_delay_us;
#endif

  unsigned ncores = std::thread::hardware_concurrency();
  std::printf("xrtio-bench: %s sweep, %u cores (%s), window %.2f s per cell, median of %d repetitions\n",
              quick ? "quick" : "full", ncores, cpu_model().c_str(), g_opts.window_s, repeat);
  std::printf("blocking-threads: at most %d threads; pool-offload: thread_pool of %d threads; sim device: 2 compute units\n",
              max_threads, pool_size());
  if (xrt) std::printf("XRT no-op device: completion delay %ld us, kernel vadd (3 read-only buffers + scalar)\n", xrt_delay_us);
  std::printf("cpu/run: process CPU us per run; app / reactor / device: the contender's own threads, the xrtio\n"
              "reactor thread, the simulated device's threads (us per run); allocs: operator new calls per run;\n"
              "B/run: resident memory growth per in-flight run; p50/p99/p99.9: device completion -> code resumed\n\n");

  // The cells, in sweep order.
  std::vector<cell> cells;
  for (long l : lats)
    for (long c : cs)
      for (auto& n : contenders) {
        if (is_xrt_contender(n)) continue;
        if (!wants(n.c_str())) continue;
        cells.push_back({n, l, int(c), {}, {}});
      }
  if (xrt) {
    // The no-op delay is one per process: these cells have latency_us = the delay.
    for (long c : cs) {
      if (c > 4096) continue;  // one xrt::run (command buffer) per in-flight run
      for (auto& n : contenders)
        if (is_xrt_contender(n)) cells.push_back({n, xrt_delay_us, int(c), {}, {}});
    }
  }
  for (int rep = 0; rep < repeat; ++rep) {
    for (auto& c : cells) {
      reset_cell();
      auto lat = std::chrono::microseconds(c.latency_us);
      result r;
      try {
        if (c.contender == "xrtio") r = run_xrtio(lat, c.c);
        else if (c.contender == "blocking-threads") r = run_blocking(lat, c.c);
        else if (c.contender == "pool-offload") r = run_pool(lat, c.c);
        else if (c.contender == "loop-poll") r = run_loop_poll(lat, c.c);
#if BENCH_XRT
        else if (c.contender == "raw-xrt") r = run_raw_xrt(c.c);
        else if (c.contender == "xrtio@xrt") r = run_xrtio_xrt(c.c);
        else if (c.contender == "raw-xrt-wait") r = run_raw_xrt_wait(c.c);
        else if (c.contender == "xrtio-prepared@xrt") r = run_prepared_xrt(c.c);
#endif
        else continue;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s L=%ld C=%d: %s\n", c.contender.c_str(), c.latency_us, c.c, e.what());
        r.errors = 1;
      }
      r.contender = c.contender;
      r.latency_us = double(c.latency_us);
      r.in_flight = c.c;
      r.errors += g_errors.load();
      c.reps.push_back(r);
    }
    std::fprintf(stderr, "repetition %d/%d done\n", rep + 1, repeat);
  }
  print_header();
  long last_l = -1;
  for (auto& c : cells) {
    if (c.reps.empty()) continue;
    c.med = median_of(c.reps);
    if (c.latency_us != last_l && last_l != -1) std::printf("\n");
    last_l = c.latency_us;
    print_row(c);
  }

  auto find = [&](const std::string& n, long l, int cc) -> const cell* {
    for (auto& c : cells)
      if (c.contender == n && c.latency_us == l && c.c == cc && !c.reps.empty()) return &c;
    return nullptr;
  };
  std::printf("\nratios (medians):\n");
  for (long l : lats)
    for (long cc : cs) {
      auto* x = find("xrtio", l, int(cc));
      if (!x) continue;
      for (auto& n : contenders) {
        if (n == "xrtio" || is_xrt_contender(n)) continue;
        if (auto* o = find(n, l, int(cc)); o && o->med.runs_per_s > 0)
          std::printf("  L=%4ld us C=%5ld  xrtio / %-16s throughput %7.2fx\n", l, cc, n.c_str(),
                      x->med.runs_per_s / o->med.runs_per_s);
      }
    }
  if (xrt)
    for (long cc : cs)
      for (const char* xn : {"xrtio@xrt", "xrtio-prepared@xrt"})
        for (const char* on : {"raw-xrt", "raw-xrt-wait"})
          if (auto *x = find(xn, xrt_delay_us, int(cc)), *o = find(on, xrt_delay_us, int(cc)); x && o)
            std::printf("  XRT no-op (%ld us) C=%5ld  %-18s / %-12s throughput %.3fx\n", xrt_delay_us, cc, xn, on,
                        x->med.runs_per_s / std::max(1.0, o->med.runs_per_s));

  std::vector<double> idle;
  for (int i = 0; i < std::min(repeat, 3); ++i) idle.push_back(idle_wakeups_per_s(quick ? 0.5 : 1.0));
  double idle_w = median(idle);
  std::printf("\nidle reactor wake-ups + sleeps per second (runtime::stats()): %.1f\n", idle_w);
  std::printf("peak RSS of the process: %.1f MiB\n", peak_rss_bytes() / 1048576.0);

  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json.c_str());
      return 1;
    }
    std::fprintf(f, "[\n");
    for (auto& c : cells) {
      if (c.reps.empty()) continue;
      auto& m = c.med;
      std::fprintf(f,
                   "  {\"contender\": \"%s\", \"latency_us\": %ld, \"in_flight\": %d, \"runs_per_s\": %s, "
                   "\"resume_p50_us\": %s, \"resume_p99_us\": %s, \"resume_p999_us\": %s, \"cpu_us_per_run\": %s, "
                   "\"allocs_per_run\": %s, \"effective_in_flight\": %d, \"app_cpu_us_per_run\": %s, "
                   "\"reactor_cpu_us_per_run\": %s, \"device_cpu_us_per_run\": %s, \"rss_bytes_per_in_flight\": %s, "
                   "\"repetitions\": %zu, \"errors\": %llu},\n",
                   c.contender.c_str(), c.latency_us, c.c, jnum(m.runs_per_s).c_str(), jnum(m.p50).c_str(),
                   jnum(m.p99).c_str(), jnum(m.p999).c_str(), jnum(m.cpu_us).c_str(), jnum(m.allocs).c_str(),
                   m.effective, jnum(m.app_cpu_us).c_str(), jnum(m.rx_cpu_us).c_str(), jnum(m.dev_cpu_us).c_str(),
                   jnum(m.rss_per_run).c_str(), c.reps.size(), static_cast<unsigned long long>(m.errors));
    }
    std::fprintf(f, "  {\"idle_wakeups_per_s\": %s}\n]\n", jnum(idle_w).c_str());
    std::fclose(f);
    std::printf("json written: %s\n", json.c_str());
  }
  if (!plot.empty()) {
    std::vector<long> plot_lats = lats;
    std::vector<std::string> names;
    for (auto& n : contenders)
      if (!is_xrt_contender(n)) names.push_back(n);
    if (xrt) {
      plot_lats.push_back(xrt_delay_us);
      for (auto& n : contenders)
        if (is_xrt_contender(n)) names.push_back(n);
      // XRT cells share latency_us with a sim latency possibly: plot them in their own panel
      for (auto& c : cells)
        if (is_xrt_contender(c.contender)) c.latency_us = -1 - c.latency_us;
      plot_lats.back() = -1 - xrt_delay_us;
    }
    write_plot(plot, cells, plot_lats, names);
  }
  return 0;
}
