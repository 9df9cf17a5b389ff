// xrtio-server: HTTP/1.1 keep-alive on Asio coroutines. One io_context and
// one xrtio runtime. By default one thread runs both (in-loop mode); with N
// io threads each connection gets a strand and the runtime its reactor
// thread (docs/SERVER.md says why).
#pragma once

#include <asio.hpp>
#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "heap_idle_trim.hpp"
#include "kernel_job.hpp"
#include "options.hpp"
#include "run_waiter.hpp"
#include "server_metrics.hpp"

namespace server {

class connection;

class http_server {
 public:
  /// Binds 127.0.0.1:opts.port; throws std::system_error when it cannot.
  http_server(const options& opts, xrtio::context ctx, kernel_set kernels, xrtio::runtime& rt);
  ~http_server();

  std::uint16_t port() const { return port_; }
  /// Serves until SIGINT or SIGTERM, then shuts down gracefully: stops
  /// accepting, closes idle connections, lets requests in flight finish for
  /// the grace period, then closes the rest (which cancels their runs).
  void run();

  // What connections use.
  const options& opts() const noexcept { return opts_; }
  xrtio::context& context() noexcept { return ctx_; }
  const kernel_set& kernels() const noexcept { return kernels_; }
  run_waiter& waiter() noexcept { return waiter_; }
  server_counters& counters() noexcept { return counters_; }
  std::string metrics() const;
  bool draining() const noexcept { return draining_.load(std::memory_order_acquire); }
  void forget(std::list<std::weak_ptr<connection>>::iterator it);

 private:
  asio::awaitable<void> accept_loop();
  asio::any_io_executor connection_executor();
  void serve(asio::ip::tcp::socket socket);
  asio::awaitable<void> shutdown_on_signal();
  template <class F>
  void for_each_connection(F f);

  options opts_;
  xrtio::context ctx_;
  kernel_set kernels_;
  xrtio::runtime& rt_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::signal_set signals_;
  std::uint16_t port_ = 0;
  run_waiter waiter_;
  server_counters counters_;
  heap_idle_trim idle_trim_;
  std::atomic<bool> draining_{false};
  std::mutex connections_mutex_;  // taken once per connection opened or closed, and at shutdown
  std::list<std::weak_ptr<connection>> connections_;
};

}  // namespace server
