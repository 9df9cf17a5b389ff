// Buffer handles: views, host reads and writes under exclusive leases,
// syncs and the raw mapping (docs/DESIGN.md, invariants 6 and 8).
#include "xrtio/buffer.hpp"

#include <cstring>
#include <string>

#include "xrtio/context.hpp"
#include "memory/native_call.hpp"
#include "reactor/ring_registrations.hpp"
#include "xrtio/error.hpp"

namespace xrtio {

namespace detail {
buffer_state::~buffer_state() {
  // Before `native` frees the memory: a ring must not keep the old pages
  // pinned, nor read into them for other memory later at the same address.
  delete rings.load(std::memory_order_acquire);
}
}

namespace {
// Validates [offset, offset + size) within a buffer of `capacity` bytes.
void check_range(const char* what, std::size_t capacity, std::size_t size, std::size_t offset) {
  if (size == 0) throw error(errc::invalid_size, std::string(what) + ": size 0 at offset " + std::to_string(offset));
  if (offset > SIZE_MAX - size)
    throw error(errc::invalid_size, std::string(what) + ": offset " + std::to_string(offset) + " + size " +
                                        std::to_string(size) + " overflows");
  if (offset + size > capacity)
    throw error(errc::out_of_range, std::string(what) + ": range [" + std::to_string(offset) + ", " +
                                        std::to_string(offset + size) + ") exceeds the buffer's " +
                                        std::to_string(capacity) + " bytes");
}

void require(const buffer& b, const char* what) {
  if (!b) throw error(errc::invalid_size, std::string(what) + ": empty buffer handle");
}

// Exclusive host access to an absolute range for the duration of a scope.
class host_lease {
 public:
  host_lease(detail::access_tracker& t, std::size_t begin, std::size_t end) {
    req_.tracker = &t;
    req_.begin = begin;
    req_.end = end;
    req_.mode = detail::access_mode::write;
    std::string why;
    auto st = detail::access_tracker::acquire({&req_, 1}, detail::holder_kind::host, &why);
    if (st != detail::acquire_status::acquired) throw error(detail::acquire_error(st), "host access: " + why);
  }
  ~host_lease() { req_.tracker->release(req_.id); }
  host_lease(const host_lease&) = delete;
  host_lease& operator=(const host_lease&) = delete;

 private:
  detail::access_request req_;
};

}  // namespace

buffer buffer::sub(std::size_t size, std::size_t offset) const {
  require(*this, "buffer::sub");
  check_range("buffer::sub", state_->size, size, offset);
  auto s = std::make_shared<detail::buffer_state>();
  s->context = state_->context;
  s->parent = state_;
  s->tracker = state_->tracker;
  detail::native_call("buffer::sub", [&] { s->native = state_->native->sub(size, offset); });
  s->offset = state_->offset + offset;  // cannot overflow: within the root
  s->size = size;
  s->imported = state_->imported;
  return buffer(std::move(s));
}

void buffer::write(std::span<const std::byte> src, std::size_t offset) {
  require(*this, "buffer::write");
  check_range("buffer::write", state_->size, src.size(), offset);
  host_lease lease(*state_->tracker, state_->offset + offset, state_->offset + offset + src.size());
  detail::native_call("buffer::write", [&] {
    std::byte* p = state_->native->map();
    if (!p) throw error(errc::not_supported, "buffer::write: buffer has no host mapping");
    std::memcpy(p + offset, src.data(), src.size());
    state_->native->sync(sync_direction::to_device, src.size(), offset);
  });
}

void buffer::read(std::span<std::byte> dst, std::size_t offset) const {
  require(*this, "buffer::read");
  check_range("buffer::read", state_->size, dst.size(), offset);
  host_lease lease(*state_->tracker, state_->offset + offset, state_->offset + offset + dst.size());
  detail::native_call("buffer::read", [&] {
    state_->native->sync(sync_direction::from_device, dst.size(), offset);
    const std::byte* p = state_->native->map();
    if (!p) throw error(errc::not_supported, "buffer::read: buffer has no host mapping");
    std::memcpy(dst.data(), p + offset, dst.size());
  });
}

void buffer::sync(sync_direction dir, std::size_t size, std::size_t offset) const {
  require(*this, "buffer::sync");
  if (size == 0 && offset < state_->size) size = state_->size - offset;
  check_range("buffer::sync", state_->size, size, offset);
  host_lease lease(*state_->tracker, state_->offset + offset, state_->offset + offset + size);
  detail::native_call("buffer::sync", [&] { state_->native->sync(dir, size, offset); });
}

std::span<std::byte> buffer::map() const {
  require(*this, "buffer::map");
  std::byte* p = nullptr;
  detail::native_call("buffer::map", [&] { p = state_->native->map(); });
  if (!p) throw error(errc::not_supported, "buffer::map: buffer has no host mapping");
  return {p, state_->size};
}

}  // namespace xrtio
