#include "xrtio/buffer.hpp"

#include <cstring>
#include <string>

#include "xrtio/context.hpp"
#include "xrtio/error.hpp"

namespace xrtio {

namespace detail {
buffer_state::~buffer_state() = default;
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
    if (st == detail::acquire_status::retained) throw error(errc::range_retained, "host access: " + why);
    if (st != detail::acquire_status::acquired) throw error(errc::range_in_use, "host access: " + why);
  }
  ~host_lease() { req_.tracker->release(req_.id); }
  host_lease(const host_lease&) = delete;
  host_lease& operator=(const host_lease&) = delete;

 private:
  detail::access_request req_;
};

template <class F>
void native_call(const char* what, F&& f) {
  try {
    f();
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    throw error(errc::backend_failure, std::string(what) + ": " + e.what());
  }
}
}  // namespace

buffer buffer::sub(std::size_t size, std::size_t offset) const {
  require(*this, "buffer::sub");
  check_range("buffer::sub", state_->size, size, offset);
  auto s = std::make_shared<detail::buffer_state>();
  s->context = state_->context;
  s->parent = state_;
  s->tracker = state_->tracker;
  native_call("buffer::sub", [&] { s->native = state_->native->sub(size, offset); });
  s->offset = state_->offset + offset;  // cannot overflow: within the root
  s->size = size;
  s->imported = state_->imported;
  return buffer(std::move(s));
}

void buffer::write(std::span<const std::byte> src, std::size_t offset) {
  require(*this, "buffer::write");
  check_range("buffer::write", state_->size, src.size(), offset);
  host_lease lease(*state_->tracker, state_->offset + offset, state_->offset + offset + src.size());
  native_call("buffer::write", [&] {
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
  native_call("buffer::read", [&] {
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
  native_call("buffer::sync", [&] { state_->native->sync(dir, size, offset); });
}

std::span<std::byte> buffer::map() const {
  require(*this, "buffer::map");
  std::byte* p = nullptr;
  native_call("buffer::map", [&] { p = state_->native->map(); });
  if (!p) throw error(errc::not_supported, "buffer::map: buffer has no host mapping");
  return {p, state_->size};
}

// ---- context ---------------------------------------------------------------

context::context(std::shared_ptr<backend::native_device> device, std::optional<memory_budget> budget)
    : state_(std::make_shared<detail::context_state>()) {
  if (!device) throw error(errc::backend_failure, "context: null device");
  state_->device = std::move(device);
  state_->budget = std::move(budget);
}

std::optional<memory_budget> context::budget() const { return state_->budget; }

buffer context::wrap(std::unique_ptr<backend::native_buffer> native, std::size_t size, memory_reservation charge,
                     bool imported) {
  auto s = std::make_shared<detail::buffer_state>();
  s->context = state_;
  s->charge = std::move(charge);
  s->tracker = std::make_shared<detail::access_tracker>();
  s->native = std::move(native);
  s->size = size;
  s->imported = imported;
  return buffer(std::move(s));
}

buffer context::alloc(std::size_t size, buffer_options options) {
  if (size == 0) throw error(errc::invalid_size, "context::alloc: size 0");
  // Charge first, allocate second (invariant 7): a failed allocation drops
  // the charge, a successful one hands it to the buffer, which releases it
  // only after the native buffer is destroyed.
  memory_reservation charge;
  if (state_->budget) charge = state_->budget->reserve(size);
  std::unique_ptr<backend::native_buffer> native;
  native_call("context::alloc", [&] { native = state_->device->alloc(size, options.kind, options.group_id); });
  return wrap(std::move(native), size, std::move(charge), false);
}

buffer context::import_user_memory(void* ptr, std::size_t size) {
  if (size == 0) throw error(errc::invalid_size, "context::import_user_memory: size 0");
  if (!ptr) throw error(errc::invalid_size, "context::import_user_memory: null pointer");
  std::unique_ptr<backend::native_buffer> native;
  native_call("context::import_user_memory", [&] { native = state_->device->import_user_memory(ptr, size); });
  return wrap(std::move(native), size, {}, true);
}

buffer context::import_dmabuf(int fd, std::size_t size) {
  if (size == 0) throw error(errc::invalid_size, "context::import_dmabuf: size 0");
  if (fd < 0) throw error(errc::invalid_size, "context::import_dmabuf: bad fd " + std::to_string(fd));
  std::unique_ptr<backend::native_buffer> native;
  native_call("context::import_dmabuf", [&] { native = state_->device->import_dmabuf(fd, size); });
  return wrap(std::move(native), size, {}, true);
}

xrtio::kernel context::kernel(const std::string& name) {
  std::lock_guard lock(state_->kernels_mutex);
  auto it = state_->kernels.find(name);
  if (it == state_->kernels.end())
    it = state_->kernels.emplace(name, state_->device->kernel(name)).first;  // throws unknown_kernel
  return xrtio::kernel(state_, it->second);
}

int kernel::group_id(unsigned index) const {
  const auto& a = args();
  if (index >= a.size())
    throw error(errc::out_of_range, "kernel " + name() + ": group_id(" + std::to_string(index) + ") but it has " +
                                        std::to_string(a.size()) + " arguments");
  return a[index].group_id;
}

xrtio::context kernel::context() const {
  xrtio::context c;
  return c.state_ = context_, c;
}

}  // namespace xrtio
