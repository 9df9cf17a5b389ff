// How a request waits for its kernel run: the two servers differ only here.
//  - xrtio (the default): co_await async_run with the request's deadline,
//    while watching the client's socket; a client that goes away cancels the
//    run through async_run's cancellation slot (the device run is aborted).
//  - baseline (--baseline): what users write without xrtio: the run is
//    started and waited for with the blocking start()+wait() on a thread pool,
//    and the connection's coroutine awaits that pool task. A disconnect cannot
//    interrupt a blocked wait(): the run goes on until it ends or its deadline.
//  - no run (--no-run): the kernel is not run at all; the request is answered
//    with its output buffer as allocated. What is left is the cost and the
//    latency of the HTTP stack and the buffers, which both servers share.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <system_error>

#include "kernel_job.hpp"

namespace server {

/// Per connection: watches the client's socket while its run is in flight
/// (run_waiter::run). Owned by the connection; a wait's handler may run
/// after the run it watched, so each watch has its own generation.
struct disconnect_watch {
  asio::cancellation_signal cancel_run;  ///< bound to the run's cancellation slot
  std::uint64_t generation = 0;          ///< of the watch in progress (0: none)
  std::uint64_t issued = 0;              ///< generations handed out
  bool gone = false;                     ///< this watch saw the client leave
};

struct run_outcome {
  std::error_code ec;         ///< empty: completed
  bool client_gone = false;   ///< the client disconnected while the run was in flight
};

class run_waiter {
 public:
  /// `pool_threads` > 0 makes the baseline waiter (a pool of that many
  /// threads); `no_run`, one that runs nothing.
  run_waiter(unsigned pool_threads, bool no_run);
  ~run_waiter();
  run_waiter(const run_waiter&) = delete;
  run_waiter& operator=(const run_waiter&) = delete;

  /// Runs `job` with `timeout`; on the caller's executor (the connection's
  /// strand). `owner` keeps `client` and `watch` alive for a late wait handler.
  asio::awaitable<run_outcome> run(const kernel_job& job, std::chrono::nanoseconds timeout, asio::ip::tcp::socket& client,
                                   disconnect_watch& watch, std::shared_ptr<void> owner);

  /// Ends the baseline's pool after its tasks (every one bounded by its deadline).
  void join();

 private:
  asio::awaitable<run_outcome> run_async(const kernel_job& job, std::chrono::nanoseconds timeout,
                                         asio::ip::tcp::socket& client, disconnect_watch& watch,
                                         std::shared_ptr<void> owner);
  asio::awaitable<run_outcome> run_nothing();
  asio::awaitable<run_outcome> run_blocking(const kernel_job& job, std::chrono::nanoseconds timeout);
  std::unique_ptr<asio::thread_pool> pool_;
  bool no_run_ = false;
};

}  // namespace server
