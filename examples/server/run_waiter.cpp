#include "run_waiter.hpp"

#include <sys/socket.h>

#include <cerrno>

#include <asio/experimental/as_tuple.hpp>

namespace server {
namespace {

constexpr auto as_tuple = asio::experimental::as_tuple(asio::use_awaitable);

// Waits for the client's socket to turn readable; then a peek tells a
// departed client (end of stream or an error: the run is cancelled, terminal
// cancellation through async_run's slot, which aborts it on the device) from
// bytes of a pipelined next request (not a disconnect: the watch ends) and
// from a stale readiness report with nothing to read (the reactor can report
// readiness it saw earlier: it waits again). A plain completion handler, not
// a coroutine raced with the run: the race cost two coroutine frames, a
// parallel group and a resumption per request (docs/SERVER.md).
struct watch_handler {
  asio::ip::tcp::socket& s;
  disconnect_watch& w;
  std::uint64_t generation;
  std::shared_ptr<void> owner;  // the connection: s and w outlive this handler

  void operator()(const asio::error_code& ec) {
    if (w.generation != generation) return;  // the run ended (the wait was cancelled then)
    if (ec) return leave();                    // the socket was closed (shutdown's grace period is over)
    char c;
    auto n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return;  // a pipelined request: not a disconnect
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      s.async_wait(asio::ip::tcp::socket::wait_read, std::move(*this));
      return;
    }
    leave();  // end of stream, ECONNRESET and the like
  }
  void leave() {
    w.gone = true;
    w.cancel_run.emit(asio::cancellation_type::terminal);
  }
};


}  // namespace

run_waiter::run_waiter(unsigned pool_threads, bool no_run) : no_run_(no_run) {
  if (pool_threads > 0) pool_ = std::make_unique<asio::thread_pool>(pool_threads);
}

run_waiter::~run_waiter() { join(); }

void run_waiter::join() {
  if (pool_) pool_->join();
}

asio::awaitable<run_outcome> run_waiter::run(const kernel_job& job, std::chrono::nanoseconds timeout,
                                             asio::ip::tcp::socket& client, disconnect_watch& watch,
                                             std::shared_ptr<void> owner) {
  if (no_run_) return run_nothing();
  if (pool_) return run_blocking(job, timeout);
  return run_async(job, timeout, client, watch, std::move(owner));
}

// The run, with the socket watched meanwhile: a departed client cancels the
// run; a finished run cancels the watch.
asio::awaitable<run_outcome> run_waiter::run_async(const kernel_job& job, std::chrono::nanoseconds timeout,
                                                   asio::ip::tcp::socket& client, disconnect_watch& watch,
                                                   std::shared_ptr<void> owner) {
  watch.gone = false;
  auto generation = watch.generation = ++watch.issued;
  client.async_wait(asio::ip::tcp::socket::wait_read, watch_handler{client, watch, generation, std::move(owner)});
  auto [ec, result] = co_await job.with_arguments([&](const xrtio::kernel& k, auto&&... args) {
    return xrtio::async_run(k, std::forward<decltype(args)>(args)..., xrtio::run_options{.timeout = timeout},
                            asio::bind_cancellation_slot(watch.cancel_run.slot(), as_tuple));
  });
  (void)result;
  watch.generation = 0;  // a handler still queued is now stale
  if (watch.gone) co_return run_outcome{asio::error::operation_aborted, true};
  std::error_code ignored;
  client.cancel(ignored);  // the watch's wait: its handler runs later, aborted
  co_return run_outcome{ec, false};
}

asio::awaitable<run_outcome> run_waiter::run_nothing() { co_return run_outcome{}; }

asio::awaitable<run_outcome> run_waiter::run_blocking(const kernel_job& job, std::chrono::nanoseconds timeout) {
  co_return co_await asio::co_spawn(
      pool_->get_executor(),
      [&job, timeout]() -> asio::awaitable<run_outcome> {
        std::error_code ec;
        try {
          auto h = job.with_arguments([&](const xrtio::kernel& k, auto&&... args) {
            return xrtio::start(k, std::forward<decltype(args)>(args)..., xrtio::run_options{.timeout = timeout});
          });
          h.wait(timeout, ec);
        } catch (const xrtio::error& e) {
          ec = e.code();
        }
        co_return run_outcome{ec, false};
      },
      asio::use_awaitable);
}

}  // namespace server
