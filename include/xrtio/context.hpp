// A device with its loaded program, the buffers it allocates and the budget
// it charges them to.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "xrtio/backend/backend.hpp"
#include "xrtio/buffer.hpp"
#include "xrtio/detail/access.hpp"
#include "xrtio/detail/context_state.hpp"
#include "xrtio/memory_budget.hpp"

namespace xrtio {

class kernel;
class runtime;


struct buffer_options {
  backend::buffer_kind kind = backend::buffer_kind::normal;
  int group_id = 0;  ///< memory bank, e.g. kernel.group_id(i)
};

/// Cheap-to-copy handle to a device and its program. Buffers and in-flight
/// runs keep the context alive.
class context {
 public:
  context() = default;
  /// Wraps an opened backend device (see sim::open and xrt_backend::open).
  explicit context(std::shared_ptr<backend::native_device> device,
                   std::optional<memory_budget> budget = std::nullopt);

  /// An owned allocation, charged to the budget (before the native allocation).
  /// Errors: errc::invalid_size (0 bytes), errc::budget_exceeded,
  /// errc::backend_failure.
  buffer alloc(std::size_t size, buffer_options options = {});

  /// Wraps caller-owned host memory without copying and without a budget
  /// charge. The caller's obligations: `ptr` stays valid, unmoved and
  /// otherwise untouched until the last handle of the returned buffer and
  /// every run using it are gone; the device may require page alignment.
  /// Errors: errc::invalid_size, errc::not_supported, errc::backend_failure.
  buffer import_user_memory(void* ptr, std::size_t size);

  /// Wraps a dma-buf exported by another driver, without a budget charge.
  /// The caller keeps the exporter's memory alive until the buffer and every
  /// run using it are gone, and synchronizes access by other engines.
  /// Errors: errc::invalid_size, errc::not_supported, errc::backend_failure.
  buffer import_dmabuf(int fd, std::size_t size);

  /// The kernel called `name`. Errors: errc::unknown_kernel.
  xrtio::kernel kernel(const std::string& name);

  std::optional<memory_budget> budget() const;

  /// Runs of this context's kernels complete through `rt` (unless
  /// run_options::runtime says otherwise). Not thread-safe against runs being
  /// started concurrently; bind once, before use.
  void bind(runtime& rt);
  backend::native_device& native() const noexcept { return *state_->device; }
  explicit operator bool() const noexcept { return state_ != nullptr; }
  friend bool operator==(const context& a, const context& b) noexcept { return a.state_ == b.state_; }

 private:
  friend class xrtio::kernel;
  friend struct detail::access;
  buffer wrap(std::unique_ptr<backend::native_buffer> native, std::size_t size, memory_reservation charge,
              bool imported);
  std::shared_ptr<detail::context_state> state_;
};

/// A kernel of a context's program: its argument metadata and the native
/// kernel that makes runs. Cheap to copy.
class kernel {
 public:
  kernel() = default;
  const std::string& name() const noexcept { return native_->name(); }
  const std::vector<backend::arg_desc>& args() const noexcept { return native_->args(); }
  /// Memory bank of buffer argument `index`. Errors: errc::out_of_range.
  int group_id(unsigned index) const;
  xrtio::context context() const;
  backend::native_kernel& native() const noexcept { return *native_; }
  /// False for a default-constructed or moved-from kernel.
  explicit operator bool() const noexcept { return native_ != nullptr; }

 private:
  friend class xrtio::context;
  friend struct detail::access;
  kernel(std::shared_ptr<detail::context_state> c, std::shared_ptr<backend::native_kernel> k)
      : context_(std::move(c)), native_(std::move(k)) {}
  std::shared_ptr<detail::context_state> context_;
  std::shared_ptr<backend::native_kernel> native_;
};

}  // namespace xrtio
