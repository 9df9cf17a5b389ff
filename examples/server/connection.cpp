#include "connection.hpp"

#include <asio/experimental/as_tuple.hpp>
#include <charconv>

#include "server.hpp"

namespace server {
namespace {

constexpr auto as_tuple = asio::experimental::as_tuple(asio::use_awaitable);
constexpr std::size_t read_chunk = 16 * 1024;  // per connection: 16 MiB for 1024 connections
constexpr std::size_t max_head = 16 * 1024;

// X-Deadline-Ms, else ?deadline_ms=, else the default. nullopt: malformed.
std::optional<std::chrono::milliseconds> deadline_of(const http_request& r, std::chrono::milliseconds fallback) {
  std::string_view v = r.deadline_header;
  if (v.empty()) {
    auto q = query_param(r.query, "deadline_ms");
    if (!q) return fallback;
    v = *q;
  }
  long long ms = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
  if (ec != std::errc() || p != v.data() + v.size() || ms <= 0 || ms > 3'600'000) return std::nullopt;
  return std::chrono::milliseconds(ms);
}

}  // namespace

connection::connection(http_server& server, asio::ip::tcp::socket socket)
    : server_(server), socket_(std::move(socket)), parser_(server.opts().max_body, max_head), in_(read_chunk) {
  server_.counters().connection_opened();
}

connection::~connection() { server_.counters().connection_closed(); }

void connection::drain() {
  if (idle_) close();
}

void connection::close() {
  std::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

asio::awaitable<void> connection::serve(std::shared_ptr<connection> self) {
  auto& c = *self;
  // However the loop ends, an exception included (asio::detached would
  // swallow it), the connection closes and leaves the registry: shutdown's
  // count and the heap's idle trim (heap_idle_trim) rely on it.
  struct leave {
    connection& c;
    ~leave() {
      c.close();
      c.server_.forget(c.registry_entry);
    }
  } on_exit{c};
  asio::error_code ignored;
  c.socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
  for (;;) {
    c.parser_.reset();
    if (!co_await c.read_request()) break;
    c.request_start_ = std::chrono::steady_clock::now();
    auto a = co_await c.handle();
    if (a.client_gone) {
      c.server_.counters().disconnected();
      break;
    }
    bool close = !c.parser_.request().keep_alive || c.server_.draining();
    if (!co_await c.respond(a, close) || close) break;
  }
}

// Reads until the parser has a whole request (true), answering a malformed or
// oversized one itself (false, like the end of the stream or an error).
asio::awaitable<bool> connection::read_request() {
  for (;;) {
    if (in_begin_ == in_end_) {
      idle_ = !parser_.started();
      if (idle_ && server_.draining()) co_return false;
      auto [ec, n] = co_await socket_.async_read_some(asio::buffer(in_), as_tuple);
      idle_ = false;
      if (ec || n == 0) co_return false;
      in_begin_ = 0;
      in_end_ = n;
    }
    auto r = parser_.feed(in_.data() + in_begin_, in_end_ - in_begin_);
    in_begin_ += r.consumed;
    switch (r.what) {
      case http_request_parser::status::need_more:
        in_begin_ = in_end_;
        if (parser_.take_continue()) {
          static constexpr char interim[] = "HTTP/1.1 100 Continue\r\n\r\n";
          auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(interim, sizeof interim - 1), as_tuple);
          if (ec) co_return false;
        }
        continue;
      case http_request_parser::status::complete:
        co_return true;
      case http_request_parser::status::bad_request:
        co_await respond(text(400, "malformed request: " + parser_.error() + "\n"), true);
        co_return false;
      case http_request_parser::status::too_large:
        co_await respond(text(413, "request body over " + std::to_string(server_.opts().max_body) + " bytes\n"),
                         true);
        co_return false;
    }
  }
}

connection::answer connection::text(int status, std::string body) {
  body_ = std::move(body);
  return answer{status};
}

connection::answer connection::not_allowed(std::string_view allow, std::string body) {
  auto a = text(405, std::move(body));
  a.allow = allow;
  return a;
}

asio::awaitable<connection::answer> connection::handle() {
  auto& req = parser_.request();
  std::string_view path = req.path;
  if (path == "/healthz") {
    if (req.method != HTTP_GET) co_return not_allowed("GET", "GET /healthz\n");
    co_return text(200, "ok\n");
  }
  if (path == "/metrics") {
    if (req.method != HTTP_GET) co_return not_allowed("GET", "GET /metrics\n");
    body_ = server_.metrics();
    co_return answer{200, "text/plain; version=0.0.4"};
  }
  constexpr std::string_view prefix = "/v1/";
  if (path.starts_with(prefix) && path.size() > prefix.size()) {
    auto name = path.substr(prefix.size());
    if (req.method != HTTP_POST) co_return not_allowed("POST", "POST " + std::string(path) + "\n");
    co_return co_await run_kernel(name);
  }
  co_return text(404, "no such resource: " + std::string(path) + "\n");
}

asio::awaitable<connection::answer> connection::run_kernel(std::string_view name) {
  auto& req = parser_.request();
  auto deadline = deadline_of(req, server_.opts().deadline);
  if (!deadline) co_return text(400, "the deadline (X-Deadline-Ms or deadline_ms) must be 1..3600000 ms\n");
  auto made = kernel_job::make(server_.kernels(), server_.context(), name, req.query, req.body);
  if (auto* r = std::get_if<refusal>(&made)) {
    auto a = text(r->status, std::move(r->text));
    a.retry_after = r->retry_after;
    co_return a;
  }
  auto& job = std::get<kernel_job>(made);
  // The deadline counts from the request's arrival; what is left goes to the run.
  auto left = *deadline - (std::chrono::steady_clock::now() - request_start_);
  if (left <= std::chrono::nanoseconds::zero()) co_return text(504, "deadline passed before the run started\n");
  auto out = co_await server_.waiter().run(job, left, socket_, watch_, shared_from_this());
  if (out.client_gone) co_return answer{.client_gone = true};
  if (!out.ec) {
    job.read_result(body_);
    co_return answer{200, "application/octet-stream"};
  }
  if (out.ec == xrtio::errc::timed_out || out.ec == xrtio::errc::abort_failed)
    co_return text(504, "deadline of " + std::to_string(deadline->count()) + " ms passed: run aborted (" +
                            out.ec.message() + ")\n");
  if (out.ec == asio::error::operation_aborted || out.ec == xrtio::errc::shut_down)
    co_return text(503, "server shutting down: run cancelled\n");
  co_return text(500, "run failed: " + out.ec.message() + "\n");
}

asio::awaitable<bool> connection::respond(const answer& a, bool close) {
  format_head(head_, response_head{.status = a.status,
                                   .content_type = a.content_type,
                                   .content_length = body_.size(),
                                   .close = close,
                                   .retry_after = a.retry_after,
                                   .allow = a.allow});
  server_.counters().response(a.status);
  // A response to HEAD has the head only: its body would be read as the
  // start of the next response (curl: "Excess found").
  bool head_only = parser_.request().method == HTTP_HEAD;
  std::array<asio::const_buffer, 2> bufs{asio::buffer(head_), asio::buffer(body_.data(), head_only ? 0 : body_.size())};
  auto [ec, n] = co_await asio::async_write(socket_, bufs, as_tuple);
  (void)n;
  co_return !ec;
}

}  // namespace server
