// xrtio::context: a device with its program; allocates and imports buffers
// (charged to its budget first: docs/DESIGN.md, invariant 7) and makes kernels.
#include "xrtio/context.hpp"

#include <string>

#include "memory/native_call.hpp"
#include "reactor/ring_registrations.hpp"
#include "xrtio/error.hpp"

namespace xrtio {

namespace {
// A default-constructed or moved-from context has no state: refused, never dereferenced.
void require(const std::shared_ptr<detail::context_state>& s, const char* what) {
  if (!s) throw error(errc::invalid_size, std::string(what) + " on an empty context (default-constructed or moved-from)");
}
}  // namespace

context::context(std::shared_ptr<backend::native_device> device, std::optional<memory_budget> budget)
    : state_(std::make_shared<detail::context_state>()) {
  if (!device) throw error(errc::backend_failure, "context: null device");
  state_->device = std::move(device);
  state_->budget = std::move(budget);
}

std::optional<memory_budget> context::budget() const {
  require(state_, "context::budget");
  return state_->budget;
}

buffer context::wrap(std::unique_ptr<backend::native_buffer> native, std::size_t size, memory_reservation charge,
                     bool imported) {
  // Everything that can throw comes first; a failure destroys the native
  // buffer here, before the charge goes (invariant 7). The charge used to
  // be in the record when the tracker's allocation failed, and the record
  // went first, releasing it while the memory was still held (test
  // "context: an allocation failing while a buffer's record is made...").
  std::shared_ptr<detail::buffer_state> s;
  try {
    s = std::make_shared<detail::buffer_state>();
    s->tracker = std::make_shared<detail::access_tracker>(size);
    // Made now, not by the buffer's first transfer through a ring: that one
    // may come in a server's steady state, which allocates nothing
    // (docs/DESIGN.md, "File I/O", "Registered files and fixed buffers").
    if (native && native->pinnable_host_memory())
      s->rings.store(new detail::ring_registrations, std::memory_order_release);
  } catch (...) {
    native.reset();
    throw;
  }
  s->context = state_;
  s->charge = std::move(charge);
  s->native = std::move(native);
  s->size = size;
  s->imported = imported;
  return buffer(std::move(s));
}

buffer context::alloc(std::size_t size, buffer_options options) {
  require(state_, "context::alloc");
  if (size == 0) throw error(errc::invalid_size, "context::alloc: size 0");
  // Charge first, allocate second (invariant 7): a failed allocation drops
  // the charge, a successful one hands it to the buffer, which releases it
  // only after the native buffer is destroyed.
  memory_reservation charge;
  if (state_->budget) charge = state_->budget->reserve(size);
  std::unique_ptr<backend::native_buffer> native;
  detail::native_call("context::alloc", [&] { native = state_->device->alloc(size, options.kind, options.group_id); });
  return wrap(std::move(native), size, std::move(charge), false);
}

buffer context::import_user_memory(void* ptr, std::size_t size) {
  require(state_, "context::import_user_memory");
  if (size == 0) throw error(errc::invalid_size, "context::import_user_memory: size 0");
  if (!ptr) throw error(errc::invalid_size, "context::import_user_memory: null pointer");
  std::unique_ptr<backend::native_buffer> native;
  detail::native_call("context::import_user_memory", [&] { native = state_->device->import_user_memory(ptr, size); });
  return wrap(std::move(native), size, {}, true);
}

buffer context::import_dmabuf(int fd, std::size_t size) {
  require(state_, "context::import_dmabuf");
  if (size == 0) throw error(errc::invalid_size, "context::import_dmabuf: size 0");
  if (fd < 0) throw error(errc::invalid_size, "context::import_dmabuf: bad fd " + std::to_string(fd));
  std::unique_ptr<backend::native_buffer> native;
  detail::native_call("context::import_dmabuf", [&] { native = state_->device->import_dmabuf(fd, size); });
  return wrap(std::move(native), size, {}, true);
}

xrtio::kernel context::kernel(const std::string& name) {
  require(state_, "context::kernel");
  std::lock_guard lock(state_->kernels_mutex);
  auto it = state_->kernels.find(name);
  if (it == state_->kernels.end())
    it = state_->kernels.emplace(name, state_->device->kernel(name)).first;  // throws unknown_kernel
  return xrtio::kernel(state_, it->second);
}

}  // namespace xrtio
