// Device buffers with shared ownership and checked access (docs/DESIGN.md,
// invariants 2, 6, 7, 8).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <type_traits>

#include "xrtio/backend/backend.hpp"
#include "xrtio/detail/access.hpp"
#include "xrtio/detail/buffer_state.hpp"
#include "xrtio/memory_budget.hpp"

namespace xrtio {

using backend::sync_direction;


/// A handle to device memory: cheap to copy, shared ownership. The native
/// allocation, its context, a view's parent and the budget charge live until
/// the last handle and every in-flight use are gone.
///
/// Host operations (write, read, sync) take exclusive access to their range
/// for their duration and fail with errc::range_in_use while a run holds an
/// overlapping range (errc::range_retained if that run was retained after a
/// refused abort). map() is the raw escape hatch and is not tracked.
class buffer {
 public:
  buffer() noexcept = default;

  std::size_t size() const noexcept { return state_ ? state_->size : 0; }
  /// Offset of this view within its root allocation (0 for a root).
  std::size_t offset() const noexcept { return state_ ? state_->offset : 0; }
  bool is_view() const noexcept { return state_ && state_->parent != nullptr; }
  bool is_imported() const noexcept { return state_ && state_->imported; }
  explicit operator bool() const noexcept { return state_ != nullptr; }

  /// A view of [offset, offset + size) of this buffer, sharing the root's
  /// tracker; ranges are absolute. Errors: errc::invalid_size (size 0 or
  /// offset + size overflows), errc::out_of_range (past the end).
  buffer sub(std::size_t size, std::size_t offset) const;

  /// Copies `src` into the buffer at `offset`, then syncs that range to the
  /// device. Errors: errc::invalid_size, errc::out_of_range, errc::range_in_use,
  /// errc::range_retained, errc::backend_failure.
  void write(std::span<const std::byte> src, std::size_t offset = 0);
  /// Syncs [offset, offset + dst.size()) from the device, then copies it out.
  /// Errors as write().
  void read(std::span<std::byte> dst, std::size_t offset = 0) const;

  template <class T>
    requires std::is_trivially_copyable_v<T>
  void write(std::span<const T> src, std::size_t offset = 0) {
    write(std::as_bytes(src), offset);
  }
  template <class T>
    requires std::is_trivially_copyable_v<T>
  void read(std::span<T> dst, std::size_t offset = 0) const {
    read(std::as_writable_bytes(dst), offset);
  }

  /// Cache maintenance for [offset, offset + size); size 0 means "to the end".
  /// Errors as write().
  void sync(sync_direction dir, std::size_t size = 0, std::size_t offset = 0) const;

  /// The host mapping of this buffer. Untracked: the caller must not touch it
  /// while a run uses the range.
  std::span<std::byte> map() const;

  friend bool operator==(const buffer& a, const buffer& b) noexcept { return a.state_ == b.state_; }

 private:
  friend class context;
  friend struct detail::access;
  explicit buffer(std::shared_ptr<detail::buffer_state> s) noexcept : state_(std::move(s)) {}
  std::shared_ptr<detail::buffer_state> state_;
};

}  // namespace xrtio
