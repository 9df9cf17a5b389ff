#include "server.hpp"

#include <asio/experimental/as_tuple.hpp>
#include <cstdio>

#include "connection.hpp"
#include "xrtio/inloop.hpp"

namespace server {
namespace {
constexpr auto as_tuple = asio::experimental::as_tuple(asio::use_awaitable);
// While draining, how often the shutdown checks whether every connection closed.
constexpr auto drain_check = std::chrono::milliseconds(5);
// After a failed accept (out of file descriptors, say), before the next.
constexpr auto accept_error_pause = std::chrono::milliseconds(10);
}  // namespace

http_server::http_server(const options& opts, xrtio::context ctx, kernel_set kernels, xrtio::runtime& rt)
    : opts_(opts),
      ctx_(std::move(ctx)),
      kernels_(std::move(kernels)),
      rt_(rt),
      io_(static_cast<int>(opts.threads)),
      acceptor_(io_),
      signals_(io_, SIGINT, SIGTERM),
      waiter_(opts.baseline ? opts.pool_threads : 0, opts.no_run),
      idle_trim_(io_, opts.idle_trim) {
  asio::ip::tcp::endpoint ep(asio::ip::address_v4::loopback(), opts.port);
  acceptor_.open(ep.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(ep);
  acceptor_.listen(asio::socket_base::max_listen_connections);
  // accept_loop drains the backlog with synchronous accepts: they must not block.
  acceptor_.non_blocking(true);
  port_ = acceptor_.local_endpoint().port();
}

http_server::~http_server() = default;

std::string http_server::metrics() const {
  return metrics_page(rt_, *ctx_.budget(), counters_, idle_trim_.trims());
}

void http_server::forget(std::list<std::weak_ptr<connection>>::iterator it) {
  std::lock_guard lock(connections_mutex_);
  connections_.erase(it);
  if (connections_.empty()) idle_trim_.idle();
}

template <class F>
void http_server::for_each_connection(F f) {
  std::lock_guard lock(connections_mutex_);
  for (auto& w : connections_)
    if (auto c = w.lock()) asio::post(c->socket_executor(), [c, f] { f(*c); });
}

asio::awaitable<void> http_server::accept_loop() {
  bool accept_failing = false;  // reported once per run of failures
  // Made before any failure: the first timer of an io_context creates its
  // timer service, which is not something to do while out of descriptors.
  asio::steady_timer pause(io_);
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(connection_executor(), as_tuple);
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (ec) {  // e.g. EMFILE: pause, so that a lasting error does not spin
      if (!accept_failing)
        std::fprintf(stderr, "xrtio-server: accept failed: %s (retrying every %lld ms)\n", ec.message().c_str(),
                     static_cast<long long>(accept_error_pause.count()));
      accept_failing = true;
      pause.expires_after(accept_error_pause);
      co_await pause.async_wait(as_tuple);
      continue;
    }
    accept_failing = false;
    serve(std::move(socket));
    // Take every connection already waiting before going back to the
    // io_context's queue: one accept per trip through a queue that holds
    // every busy connection's handlers made 1024 new connections wait up to
    // seconds for their first request (docs/SERVER.md, "Load test").
    for (;;) {
      std::error_code more_ec;
      asio::ip::tcp::socket more(connection_executor());
      acceptor_.accept(more, more_ec);
      if (more_ec) break;  // would_block: the queue is empty (or an error the next async_accept reports)
      serve(std::move(more));
    }
  }
}

// With several io threads each connection's socket gets its own strand: its
// handlers never run concurrently, whichever thread picks them up. One
// thread runs every handler in order anyway: a strand would only add its
// lock and queue to each handler.
asio::any_io_executor http_server::connection_executor() {
  if (opts_.threads > 1) return asio::make_strand(io_);
  return io_.get_executor();
}

void http_server::serve(asio::ip::tcp::socket socket) {
  auto c = std::make_shared<connection>(*this, std::move(socket));
  {
    std::lock_guard lock(connections_mutex_);
    idle_trim_.busy();
    c->registry_entry = connections_.insert(connections_.end(), c);
  }
  auto ex = c->socket_executor();
  asio::co_spawn(ex, connection::serve(std::move(c)), asio::detached);
}

asio::awaitable<void> http_server::shutdown_on_signal() {
  auto [ec, sig] = co_await signals_.async_wait(as_tuple);
  if (ec) co_return;
  std::fprintf(stderr, "xrtio-server: signal %d: shutting down (grace %lld ms)\n", sig,
               static_cast<long long>(opts_.grace.count()));
  draining_.store(true, std::memory_order_release);
  idle_trim_.stop();
  std::error_code ignored;
  acceptor_.close(ignored);
  for_each_connection([](connection& c) { c.drain(); });
  // Requests in flight may finish within the grace period; then every
  // connection left is closed, which cancels its run (run_waiter).
  asio::steady_timer t(io_);
  auto until = std::chrono::steady_clock::now() + opts_.grace;
  while (counters_.connections() > 0 && std::chrono::steady_clock::now() < until) {
    t.expires_after(drain_check);
    co_await t.async_wait(as_tuple);
  }
  if (counters_.connections() > 0) {
    std::fprintf(stderr, "xrtio-server: grace period over: closing %lld connections\n",
                 static_cast<long long>(counters_.connections()));
    for_each_connection([](connection& c) { c.close(); });
  }
}

void http_server::run() {
  asio::co_spawn(io_, accept_loop(), asio::detached);
  asio::co_spawn(io_, shutdown_on_signal(), asio::detached);
  if (opts_.inloop) {
    // One thread: io's handlers and, between them, the runtime's reactor
    // passes (docs/SERVER.md, "Threading").
    xrtio::run(io_, rt_);
    waiter_.join();
    return;
  }
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < opts_.threads; ++i) threads.emplace_back([this] { io_.run(); });
  io_.run();
  for (auto& t : threads) t.join();
  waiter_.join();
}

}  // namespace server
