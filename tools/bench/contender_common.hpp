// What the contender files share: the thread that runs a cell's io_context
// while the controller measures, and xrtio's async_run worker.
#pragma once

#include <asio.hpp>
#include <exception>
#include <thread>

#include "measurement.hpp"
#include "process_usage.hpp"
#include "xrtio/xrtio.hpp"

namespace bench {

// Runs io on one thread named "c:io" while the controller measures one window.
inline result measure_on_io_thread(asio::io_context& io, int effective, std::size_t rss_before,
                                   int in_flight = -1) {
  std::thread t([&] {
    set_thread_name("c:io");
    io.run();
  });
  auto r = measure(effective, rss_before, in_flight);
  t.join();
  return r;
}

// xrtio: async_run + use_awaitable in a loop until the window ends.
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

// c xrtio workers on one io_context thread.
template <class... Args>
result run_xrtio_on(const xrtio::kernel& k, int c, std::size_t rss0, Args... args) {
  asio::io_context io(1);
  for (int w = 0; w < c; ++w) asio::co_spawn(io, xrtio_worker(k, args...), asio::detached);
  return measure_on_io_thread(io, c, rss0);
}

// The runtime options of the xrtio contenders; in-loop ones have no thread.
inline xrtio::runtime_options runtime_options_for(bool inloop) {
  auto o = g_opts.rt;
  o.reactor_thread = !inloop;
  return o;
}

// xrtio-inloop: c xrtio workers on one io_context thread that drives the
// runtime itself (xrtio::run) instead of io.run().
template <class... Args>
result run_xrtio_inloop_on(xrtio::runtime& rt, const xrtio::kernel& k, int c, std::size_t rss0, Args... args) {
  asio::io_context io(1);
  for (int w = 0; w < c; ++w) asio::co_spawn(io, xrtio_worker(k, args...), asio::detached);
  std::thread t([&] {
    set_thread_name("c:io");
    xrtio::run(io, rt);
  });
  auto r = measure(c, rss0);
  t.join();
  return r;
}

}  // namespace bench
