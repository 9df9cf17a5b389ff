// Test helper: a small blocking HTTP/1.1 client on an Asio socket, one
// keep-alive connection to 127.0.0.1, responses parsed by http-parser.
#pragma once

#include <http_parser.h>
#include <poll.h>

#include <asio.hpp>
#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>

namespace stest {

struct http_response {
  int status = 0;
  std::string body;
  std::string retry_after;  ///< the Retry-After header, if any
  bool closed = false;      ///< the server closed the connection instead of answering
  std::string allow;        ///< the Allow header (405)
};

class http_client {
 public:
  explicit http_client(unsigned short port) : socket_(io_) {
    socket_.connect({asio::ip::address_v4::loopback(), port});
  }

  /// Sends a request (with Content-Length when body or method is POST).
  void send(std::string_view method, std::string_view target, std::string_view body = {},
            std::string_view extra_headers = {}) {
    std::string req = std::string(method) + " " + std::string(target) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    req += extra_headers;
    if (method == "POST") req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    req += "\r\n";
    req += body;
    send_raw(req);
  }
  void send_raw(std::string_view bytes) { asio::write(socket_, asio::buffer(bytes.data(), bytes.size())); }

  /// Reads one whole response (the socket blocks; the server answers every request in bounded time).
  /// `to_head`: the response to a HEAD request, which has no body whatever its Content-Length.
  http_response receive(bool to_head = false) {
    http_response r;
    http_parser p;
    http_parser_init(&p, HTTP_RESPONSE);
    struct state {
      http_response* r;
      std::string field;
      bool done = false;
      bool to_head = false;
    } st{&r, {}, false, to_head};
    p.data = &st;
    http_parser_settings s;
    http_parser_settings_init(&s);
    s.on_header_field = [](http_parser* q, const char* at, size_t n) {
      static_cast<state*>(q->data)->field.assign(at, n);
      return 0;
    };
    s.on_header_value = [](http_parser* q, const char* at, size_t n) {
      auto* x = static_cast<state*>(q->data);
      if (x->field == "Retry-After") x->r->retry_after.assign(at, n);
      if (x->field == "Allow") x->r->allow.assign(at, n);
      return 0;
    };
    s.on_headers_complete = [](http_parser* q) { return static_cast<state*>(q->data)->to_head ? 1 : 0; };
    s.on_body = [](http_parser* q, const char* at, size_t n) {
      static_cast<state*>(q->data)->r->body.append(at, n);
      return 0;
    };
    s.on_message_complete = [](http_parser* q) {
      static_cast<state*>(q->data)->done = true;
      http_parser_pause(q, 1);
      return 0;
    };
    while (!st.done) {
      if (pending_.empty()) {
        char buf[65536];
        asio::error_code ec;
        auto n = socket_.read_some(asio::buffer(buf), ec);
        if (ec) {
          r.closed = true;
          return r;
        }
        pending_.assign(buf, n);
      }
      auto used = http_parser_execute(&p, &s, pending_.data(), pending_.size());
      if (!st.done && HTTP_PARSER_ERRNO(&p) != HPE_OK) throw std::runtime_error("bad response from the server");
      pending_.erase(0, used);
    }
    r.status = static_cast<int>(p.status_code);
    return r;
  }

  http_response call(std::string_view method, std::string_view target, std::string_view body = {},
                     std::string_view extra_headers = {}) {
    send(method, target, body, extra_headers);
    return receive();
  }

  void close() {
    asio::error_code ec;
    socket_.close(ec);
  }

  /// True when bytes of a response are here or arrive within `wait`: a test
  /// that expects an answer the server might never send checks this first
  /// instead of blocking in receive() for good.
  bool readable_within(std::chrono::milliseconds wait) {
    if (!pending_.empty()) return true;
    pollfd pfd{socket_.native_handle(), POLLIN, 0};
    return ::poll(&pfd, 1, static_cast<int>(wait.count())) == 1;
  }

 private:
  asio::io_context io_;
  asio::ip::tcp::socket socket_;
  std::string pending_;
};

}  // namespace stest
