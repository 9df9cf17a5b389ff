#include "http_response.hpp"

#include <charconv>

namespace server {

std::string_view reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Content Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

void format_head(std::string& out, const response_head& h) {
  char num[24];
  out.assign("HTTP/1.1 ");
  out.append(num, std::to_chars(num, num + sizeof num, h.status).ptr);
  out += ' ';
  out += reason_phrase(h.status);
  out += "\r\nContent-Type: ";
  out += h.content_type;
  out += "\r\nContent-Length: ";
  out.append(num, std::to_chars(num, num + sizeof num, h.content_length).ptr);
  if (h.retry_after) out += "\r\nRetry-After: 1";
  if (!h.allow.empty()) {
    out += "\r\nAllow: ";
    out += h.allow;
  }
  if (h.close) out += "\r\nConnection: close";
  out += "\r\n\r\n";
}

}  // namespace server
