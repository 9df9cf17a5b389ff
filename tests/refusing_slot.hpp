// A completion handler whose cancellation slot cannot take a handler, for
// the initiating calls' error path (test_file_io, test_file_gather).
#pragma once

#include <asio/io_context.hpp>
#include <atomic>
#include <cstddef>
#include <memory>
#include <new>
#include <system_error>

namespace {
// A cancellation slot of the handler's own that cannot take a handler (as
// asio::cancellation_slot throws std::bad_alloc when it cannot get memory).
// If `count` is set, it notes the count's value in `seen` when asked (a
// test's view of what the initiating call had done by then).
struct refusing_slot {
  const std::atomic<unsigned>* count = nullptr;
  unsigned* seen = nullptr;
  bool is_connected() const noexcept { return true; }
  template <class H, class... A>
  H& emplace(A&&...) {
    if (count) *seen = count->load();
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
  refusing_slot slot{};
  using cancellation_slot_type = refusing_slot;
  refusing_slot get_cancellation_slot() const noexcept { return slot; }
  void operator()(std::error_code, std::size_t) { *ran = true; }
};
}  // namespace
