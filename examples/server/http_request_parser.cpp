#include "http_request_parser.hpp"

#include <strings.h>

namespace server {

http_request_parser::http_request_parser(std::size_t max_body, std::size_t max_head)
    : max_body_(max_body), max_head_(max_head) {
  http_parser_settings_init(&settings_);
  settings_.on_message_begin = &on_message_begin;
  settings_.on_url = &on_url;
  settings_.on_header_field = &on_header_field;
  settings_.on_header_value = &on_header_value;
  settings_.on_headers_complete = &on_headers_complete;
  settings_.on_body = &on_body;
  settings_.on_message_complete = &on_message_complete;
  reset();
}

void http_request_parser::reset() {
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
  head_fed_ = 0;
  feed_begin_ = nullptr;
  headers_done_ = false;
  started_ = complete_ = too_large_ = in_value_ = false;
  expect_continue_ = continue_due_ = false;
  field_.clear();
  value_.clear();
  error_.clear();
  req_.method = HTTP_GET;  // a request refused before its headers ended has none of its own
  req_.target.clear();
  req_.path = req_.query = {};
  req_.deadline_header.clear();
  req_.body.clear();
  req_.keep_alive = true;
}

http_request_parser::result http_request_parser::feed(const char* data, std::size_t n) {
  feed_begin_ = data;
  std::size_t used = http_parser_execute(&parser_, &settings_, data, n);
  if (!headers_done_) head_fed_ += used;
  if (n > 0) started_ = true;
  auto err = HTTP_PARSER_ERRNO(&parser_);
  if (too_large_) return {status::too_large, used};
  // An Upgrade header is ignored (RFC 9110, 7.8): the message is complete at
  // its end and answered over HTTP/1.1, which is the fallback an h2c client
  // (curl --http2 over http) expects. CONNECT never gets here: its target has
  // no path, refused in on_headers_complete.
  if (complete_) return {status::complete, used};  // paused at the message's end (HPE_PAUSED)
  if (err != HPE_OK) {
    if (error_.empty()) error_ = std::string(http_errno_name(err)) + ": " + http_errno_description(err);
    return {status::bad_request, used};
  }
  return {status::need_more, used};
}

// The head's size is where the piece a callback sees ends in the stream of
// this request: the request line, names, values, separators and line ends
// before it. Counting only the pieces let 5,000 headers "ab:" (25,000 bytes
// of head, 10,000 of names) past a 16 KiB limit; http_parser's own count
// (nread) cannot help, it is 0 again by the time the headers are complete.
// The blank line that ends the head adds at most 4 bytes after the last
// piece.
bool http_request_parser::charge_head(const char* at, std::size_t n) {
  // A chunked body's trailers come through the same callbacks, after the
  // head; head_fed_ no longer counts then, and http_parser's own limit on
  // header bytes (80 KiB) bounds them.
  if (headers_done_) return true;
  std::size_t head = head_fed_ + static_cast<std::size_t>(at + n - feed_begin_);
  if (head <= max_head_) return true;
  error_ = "request line and headers exceed " + std::to_string(max_head_) + " bytes";
  return false;
}

int http_request_parser::on_message_begin(http_parser* p) {
  static_cast<http_request_parser*>(p->data)->started_ = true;
  return 0;
}

int http_request_parser::on_url(http_parser* p, const char* at, std::size_t n) {
  auto* self = static_cast<http_request_parser*>(p->data);
  if (!self->charge_head(at, n)) return 1;
  self->req_.target.append(at, n);
  return 0;
}

// A header's name and value may each arrive in several pieces; a name
// piece after a value piece starts the next header.
int http_request_parser::on_header_field(http_parser* p, const char* at, std::size_t n) {
  auto* self = static_cast<http_request_parser*>(p->data);
  if (!self->charge_head(at, n)) return 1;
  if (self->in_value_) self->end_header();
  self->field_.append(at, n);
  return 0;
}

int http_request_parser::on_header_value(http_parser* p, const char* at, std::size_t n) {
  auto* self = static_cast<http_request_parser*>(p->data);
  if (!self->charge_head(at, n)) return 1;
  self->in_value_ = true;
  self->value_.append(at, n);
  return 0;
}

void http_request_parser::end_header() {
  if (::strcasecmp(field_.c_str(), "X-Deadline-Ms") == 0) req_.deadline_header = value_;
  if (::strcasecmp(field_.c_str(), "Expect") == 0) {
    std::string_view v(value_);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);  // http_parser keeps trailing blanks
    if (v.size() == 12 && ::strncasecmp(v.data(), "100-continue", 12) == 0) expect_continue_ = true;
  }
  field_.clear();
  value_.clear();
  in_value_ = false;
}

int http_request_parser::on_headers_complete(http_parser* p) {
  auto* self = static_cast<http_request_parser*>(p->data);
  self->headers_done_ = true;
  if (self->in_value_) self->end_header();
  auto& req = self->req_;
  req.method = static_cast<http_method>(p->method);
  req.keep_alive = http_should_keep_alive(p) != 0;
  http_parser_url url;
  http_parser_url_init(&url);
  // Failures return -1: http_parser reads 1 as "this message has no body"
  // (and 2 as an upgrade), not as an error, so a target without a path was
  // answered 404 and its body parsed as the next request.
  if (http_parser_parse_url(req.target.data(), req.target.size(), p->method == HTTP_CONNECT, &url) != 0 ||
      !(url.field_set & (1 << UF_PATH))) {
    self->error_ = "malformed request target";
    return -1;
  }
  std::string_view t(req.target);
  req.path = t.substr(url.field_data[UF_PATH].off, url.field_data[UF_PATH].len);
  if (url.field_set & (1 << UF_QUERY)) req.query = t.substr(url.field_data[UF_QUERY].off, url.field_data[UF_QUERY].len);
  // A declared length over the limit is refused before any of the body is read.
  if ((p->flags & F_CONTENTLENGTH) && p->content_length > self->max_body_) {
    self->too_large_ = true;
    return -1;
  }
  if ((p->flags & F_CONTENTLENGTH) && p->content_length > 0) req.body.reserve(p->content_length);
  // A client that asked to be told before it sends its body (curl does for
  // bodies over 1 MiB) otherwise waits a second for an answer that never
  // comes. HTTP/1.0 has no interim responses.
  bool body_follows = (p->flags & F_CHUNKED) || ((p->flags & F_CONTENTLENGTH) && p->content_length > 0);
  self->continue_due_ = self->expect_continue_ && body_follows && (p->http_major > 1 || (p->http_major == 1 && p->http_minor >= 1));
  return 0;
}

int http_request_parser::on_body(http_parser* p, const char* at, std::size_t n) {
  auto* self = static_cast<http_request_parser*>(p->data);
  if (self->req_.body.size() + n > self->max_body_) {  // chunked bodies have no declared length
    self->too_large_ = true;
    return 1;
  }
  self->req_.body.append(at, n);
  return 0;
}

// Pausing stops the parser right after this message, so the bytes of a
// pipelined next request stay unconsumed until reset().
int http_request_parser::on_message_complete(http_parser* p) {
  auto* self = static_cast<http_request_parser*>(p->data);
  self->complete_ = true;
  http_parser_pause(p, 1);
  return 0;
}

}  // namespace server
