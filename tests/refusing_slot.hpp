// A completion handler whose cancellation slot cannot take a handler, for
// the initiating calls' error path (test_file_io, test_file_gather).
#pragma once

#include <asio/io_context.hpp>
#include <cstddef>
#include <memory>
#include <new>
#include <system_error>

namespace {
// A cancellation slot of the handler's own that cannot take a handler (as
// asio::cancellation_slot throws std::bad_alloc when it cannot get memory).
struct refusing_slot {
  bool is_connected() const noexcept { return true; }
  template <class H, class... A>
  H& emplace(A&&...) {
    throw std::bad_alloc();
  }
  void clear() noexcept {}
};

struct slot_refused_handler {
  std::shared_ptr<int> state;
  bool* ran;
  using executor_type = asio::io_context::executor_type;
  executor_type ex;
  executor_type get_executor() const noexcept { return ex; }
  using cancellation_slot_type = refusing_slot;
  refusing_slot get_cancellation_slot() const noexcept { return {}; }
  void operator()(std::error_code, std::size_t) { *ran = true; }
};
}  // namespace
