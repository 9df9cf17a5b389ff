// Per execution context, the runs whose handlers will run there: destroying
// the context (an io_context with runs pending) destroys their handlers
// without invoking them, while the reactor keeps their leases and native runs
// until the device lets go (docs/DESIGN.md, invariants 1 and 2).
#pragma once

#include <asio/execution_context.hpp>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace xrtio::detail {

class run_op_base;

/// Per execution context: the runs whose handlers will run there, so that
/// destroying the context (io_context with a run pending) destroys their
/// handlers without invoking them, while the reactor keeps their leases and
/// native runs until the device lets go (invariant 2).
struct completion_registry {
  std::mutex mutex;
  std::condition_variable idle;
  run_op_base* head = nullptr;
  unsigned posting = 0;
  bool shut_down = false;

  void add(run_op_base* op) noexcept;
  void remove(run_op_base* op) noexcept;
};

class completion_service : public asio::execution_context::service {
 public:
  using key_type = completion_service;
  static inline asio::execution_context::id id;
  explicit completion_service(asio::execution_context& ctx)
      : asio::execution_context::service(ctx), registry_(std::make_shared<completion_registry>()) {}
  const std::shared_ptr<completion_registry>& registry() const noexcept { return registry_; }

 private:
  void shutdown() override;
  std::shared_ptr<completion_registry> registry_;
};

}  // namespace xrtio::detail
