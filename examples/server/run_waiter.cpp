#include "run_waiter.hpp"

#include <sys/socket.h>

#include <cerrno>

#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>

namespace server {
namespace {

using namespace asio::experimental::awaitable_operators;
constexpr auto as_tuple = asio::experimental::as_tuple(asio::use_awaitable);

// Completes when the client has gone away: its socket turned readable and a
// peek finds the end of the stream or an error (or the server closed the
// socket at the end of its shutdown grace). Bytes of a pipelined next request
// are not a disconnect: then it waits until cancelled (the run finished).
asio::awaitable<void> client_gone(asio::ip::tcp::socket& s) {
  for (;;) {
    auto [ec] = co_await s.async_wait(asio::ip::tcp::socket::wait_read, as_tuple);
    if (ec) co_return;  // cancelled (the run won the race) or the socket was closed
    char c;
    auto n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) co_return;  // end of stream
    if (n > 0) break;       // a pipelined request: not a disconnect
    // The reactor may report readiness it saw earlier (edge-triggered epoll):
    // nothing to read yet is not a disconnect, so wait again.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
    co_return;  // ECONNRESET and the like
  }
  asio::steady_timer forever(s.get_executor(), asio::steady_timer::time_point::max());
  co_await forever.async_wait(as_tuple);
}

asio::awaitable<std::error_code> start_run(const kernel_job& job, std::chrono::nanoseconds timeout) {
  auto [ec, result] = co_await job.with_arguments([&](const xrtio::kernel& k, auto&&... args) {
    return xrtio::async_run(k, std::forward<decltype(args)>(args)..., xrtio::run_options{.timeout = timeout},
                            as_tuple);
  });
  (void)result;
  co_return ec;
}

}  // namespace

run_waiter::run_waiter(unsigned pool_threads, bool no_run) : no_run_(no_run) {
  if (pool_threads > 0) pool_ = std::make_unique<asio::thread_pool>(pool_threads);
}

run_waiter::~run_waiter() { join(); }

void run_waiter::join() {
  if (pool_) pool_->join();
}

asio::awaitable<run_outcome> run_waiter::run(const kernel_job& job, std::chrono::nanoseconds timeout,
                                             asio::ip::tcp::socket& client) {
  if (no_run_) return run_nothing();
  if (pool_) return run_blocking(job, timeout);
  return run_async(job, timeout, client);
}

// The first to finish wins; the other is cancelled: a finished run cancels
// the socket watch, a departed client cancels the run (terminal cancellation
// through the awaitable's slot: async_run aborts it on the device).
asio::awaitable<run_outcome> run_waiter::run_async(const kernel_job& job, std::chrono::nanoseconds timeout,
                                                   asio::ip::tcp::socket& client) {
  auto first = co_await (start_run(job, timeout) || client_gone(client));
  if (first.index() == 0) co_return run_outcome{std::get<0>(first), false};
  co_return run_outcome{asio::error::operation_aborted, true};
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
