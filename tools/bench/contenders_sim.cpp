// The contenders on the simulated device: xrtio (async_run), blocking-threads,
// pool-offload and loop-poll.
#include <algorithm>
#include <asio.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "contender_common.hpp"
#include "contenders.hpp"

using namespace std::chrono_literals;

namespace bench {
namespace {

// A device + (for the async contenders) a runtime bound to it.
struct sim_setup {
  std::unique_ptr<xrtio::runtime> rt;
  xrtio::context ctx;
  xrtio::kernel k;
  sim_setup(std::chrono::nanoseconds latency, bool with_runtime, bool inloop = false) {
    xrtio::sim::device_config cfg;
    cfg.latency.fixed = latency;
    if (g_opts.sim_idle_poll) cfg.idle_poll = *g_opts.sim_idle_poll;
    ctx = named("l:dev", [&] { return xrtio::sim::open(cfg); });
    if (with_runtime) {
      rt = named("l:rx", [&] { return std::make_unique<xrtio::runtime>(runtime_options_for(inloop)); });
      ctx.bind(*rt);
    }
    k = ctx.kernel("noop");
  }
};

}  // namespace

// ---- xrtio: async_run + use_awaitable ---------------------------------------------
result run_xrtio(std::chrono::nanoseconds lat, int c) {
  auto rss0 = std::size_t(rss_bytes());
  sim_setup s(lat, true);
  auto r = run_xrtio_on(s.k, c, rss0);
  // What the spin trials did (runtime_options::spin_trials), for experiments.
  if (std::getenv("XRTIO_BENCH_SPIN_TRIALS")) {
    auto st = s.rt->stats();
    std::fprintf(stderr, "spin trials: L=%lld us C=%d trials %llu switches %llu spinning at the end %d\n",
                 static_cast<long long>(lat.count() / 1000), c, static_cast<unsigned long long>(st.spin_trials),
                 static_cast<unsigned long long>(st.spin_switches), int(st.spinning));
  }
  return r;
}

result run_xrtio_inloop(std::chrono::nanoseconds lat, int c) {
  auto rss0 = std::size_t(rss_bytes());
  sim_setup s(lat, true, true);
  return run_xrtio_inloop_on(*s.rt, s.k, c, rss0);
}

// ---- blocking-threads: one thread per run, blocking in wait() -------------------------
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

namespace {
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
}  // namespace

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
  auto r = measure_on_io_thread(io, std::min(c, pool_size()), rss0, c);
  r.effective = c;
  pool.join();
  return r;
}

// ---- loop-poll: the io_context thread polls run states itself -------------------------------
namespace {
struct poll_set_base {
  virtual ~poll_set_base() = default;
};
// The pending runs and their coroutines' handlers; a re-posted scan() resumes
// those whose run is final.
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
}  // namespace

result run_loop_poll(std::chrono::nanoseconds lat, int c) {
  auto rss0 = std::size_t(rss_bytes());
  sim_setup s(lat, false);
  loop_poll_state st;
  st.c = std::size_t(c);
  for (int w = 0; w < c; ++w) asio::co_spawn(st.io, loop_poll_worker(s.k, &st), asio::detached);
  return measure_on_io_thread(st.io, c, rss0);
}

}  // namespace bench
