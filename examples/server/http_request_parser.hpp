// An HTTP/1.1 request read incrementally with Debian's http-parser
// (libhttp-parser-dev): the parser finds the message's boundaries, method,
// target, headers and body; this class keeps what the server needs and
// enforces its size limits.
#pragma once

#include <http_parser.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace server {

struct http_request {
  http_method method = HTTP_GET;
  std::string target;  ///< as sent, e.g. "/v1/matmul?m=2&n=2&k=2"
  std::string_view path;   ///< into target
  std::string_view query;  ///< into target, without '?'
  std::string deadline_header;  ///< X-Deadline-Ms, empty when absent
  std::string body;
  bool keep_alive = true;
};

class http_request_parser {
 public:
  enum class status {
    need_more,   ///< every byte given was consumed; the request is not complete yet
    complete,    ///< request() holds a whole request; bytes after it were not consumed
    bad_request, ///< malformed (error() says how): answer 400 and close
    too_large,   ///< body over max_body: answer 413 and close
  };
  struct result {
    status what;
    std::size_t consumed;
  };

  http_request_parser(std::size_t max_body, std::size_t max_head);
  http_request_parser(const http_request_parser&) = delete;
  http_request_parser& operator=(const http_request_parser&) = delete;

  /// Parses `n` more bytes of the connection's stream.
  result feed(const char* data, std::size_t n);
  /// Ready for the next request on the connection (keeps the strings'
  /// capacity, so a keep-alive connection stops allocating per request).
  void reset();
  /// True once some byte of the current request was parsed.
  bool started() const noexcept { return started_; }
  /// True once per request whose headers asked for "Expect: 100-continue"
  /// and announced a body: the caller then sends "100 Continue" before it
  /// reads on.
  bool take_continue() noexcept {
    bool due = continue_due_;
    continue_due_ = false;
    return due;
  }

  http_request& request() noexcept { return req_; }
  const std::string& error() const noexcept { return error_; }

 private:
  static int on_message_begin(http_parser* p);
  static int on_url(http_parser* p, const char* at, std::size_t n);
  static int on_header_field(http_parser* p, const char* at, std::size_t n);
  static int on_header_value(http_parser* p, const char* at, std::size_t n);
  static int on_headers_complete(http_parser* p);
  static int on_body(http_parser* p, const char* at, std::size_t n);
  static int on_message_complete(http_parser* p);
  bool charge_head(const char* at, std::size_t n);
  void end_header();

  http_parser parser_{};
  http_parser_settings settings_{};
  std::size_t max_body_, max_head_;
  std::size_t head_fed_ = 0;  // bytes of this request's head in earlier feed() calls
  const char* feed_begin_ = nullptr;  // the current feed()'s data
  bool headers_done_ = false;
  bool started_ = false, complete_ = false, too_large_ = false;
  bool in_value_ = false;
  bool expect_continue_ = false, continue_due_ = false;
  std::string field_, value_;
  std::string error_;
  http_request req_;
};

}  // namespace server
