// One client connection: reads requests with the http-parser, routes them,
// runs kernels through the server's run_waiter and writes the responses, on
// the connection's strand, until the client closes, an error, or shutdown.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "http_request_parser.hpp"
#include "http_response.hpp"
#include "run_waiter.hpp"

namespace server {

class http_server;

class connection : public std::enable_shared_from_this<connection> {
 public:
  connection(http_server& server, asio::ip::tcp::socket socket);
  ~connection();

  /// Serves requests until the connection ends.
  static asio::awaitable<void> serve(std::shared_ptr<connection> self);
  /// Shutdown began (posted to the strand): an idle connection closes now, a
  /// busy one after its response.
  void drain();
  /// The grace period is over (posted to the strand): close, cancelling a run in flight.
  void close();
  asio::any_io_executor socket_executor() { return socket_.get_executor(); }

  std::list<std::weak_ptr<connection>>::iterator registry_entry;

 private:
  struct answer {
    int status = 200;
    std::string_view content_type = "text/plain";
    bool retry_after = false;
    bool client_gone = false;  ///< no response: the client left
    std::string_view allow;    ///< 405: the methods the resource takes
  };
  asio::awaitable<bool> read_request();
  asio::awaitable<answer> handle();
  asio::awaitable<answer> run_kernel(std::string_view name);
  asio::awaitable<bool> respond(const answer& a, bool close);
  answer text(int status, std::string body);
  answer not_allowed(std::string_view allow, std::string body);

  http_server& server_;
  asio::ip::tcp::socket socket_;
  http_request_parser parser_;
  std::vector<char> in_;
  std::size_t in_begin_ = 0, in_end_ = 0;
  std::string head_, body_;
  disconnect_watch watch_;
  std::chrono::steady_clock::time_point request_start_{};
  bool idle_ = false;  ///< waiting for the first byte of a request
};

}  // namespace server
