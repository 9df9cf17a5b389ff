// The head of an HTTP/1.1 response.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace server {

struct response_head {
  int status = 200;
  std::string_view content_type = "application/octet-stream";
  std::size_t content_length = 0;
  bool close = false;        ///< Connection: close (the server closes after it)
  bool retry_after = false;  ///< Retry-After: 1 (503 on a full budget)
  std::string_view allow;    ///< Allow: the methods a 405's resource takes (RFC 9110 asks for it)
};

/// Replaces `out` with the status line and headers, ending in the blank line.
void format_head(std::string& out, const response_head& h);

std::string_view reason_phrase(int status);

}  // namespace server
