// The simulated device's native run (sim_run in sim_types.hpp): argument
// checks and storage, start, the bounded wait, abort and release, and the
// kernel_call view a kernel callable computes through.
#include <cstring>
#include <string>

#include "sim_types.hpp"
#include "xrtio/error.hpp"

namespace xrtio::sim::detail {

sim_run::sim_run(sim_kernel* k, sim_device_impl* d) : kernel_(k), device_(d) {}

void sim_run::set_arg(unsigned index, backend::native_buffer& b) {
  auto& defs = kernel_->args();
  if (index >= defs.size() || defs[index].kind != backend::arg_kind::buffer)
    throw error(errc::argument_kind, "sim kernel " + kernel_->name() + ": argument " + std::to_string(index) +
                                         " is not a buffer");
  auto* sb = dynamic_cast<sim_buffer*>(&b);
  if (!sb) throw error(errc::foreign_context, "sim kernel " + kernel_->name() + ": argument " +
                                                  std::to_string(index) + " is not a simulated-device buffer");
  args_[index].data = sb->map();
  args_[index].size = sb->size();
  args_[index].set = true;
}

void sim_run::set_arg(unsigned index, const void* value, std::size_t size) {
  auto& defs = kernel_->args();
  if (index >= defs.size() || defs[index].kind != backend::arg_kind::scalar || defs[index].size != size)
    throw error(errc::argument_kind, "sim kernel " + kernel_->name() + ": argument " + std::to_string(index) +
                                         " is not a scalar of " + std::to_string(size) + " bytes");
  std::memcpy(args_[index].scalar.data(), value, size);
  args_[index].size = size;
  args_[index].set = true;
}

void sim_run::start() {
  auto s = state_.load();
  if (s != run_state::new_ && !is_final(s))
    throw error(errc::busy, "sim kernel " + kernel_->name() + ": start() while the run is " +
                                std::string(to_string(s)));
  auto n = kernel_->args().size();
  bytes_ = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!args_[i].set)
      throw error(errc::argument_count, "sim kernel " + kernel_->name() + ": argument " + std::to_string(i) + " (" +
                                            kernel_->args()[i].name + ") not set");
    if (kernel_->args()[i].kind == backend::arg_kind::buffer) bytes_ += args_[i].size;
  }
  device_->submit(this);
}

run_state sim_run::wait_for(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(device_->mutex_);
  ++waiters_;
  done_cv_.wait_for(lock, timeout, [&] { return is_final(state_.load()); });
  --waiters_;
  return state_.load();
}

backend::abort_outcome sim_run::abort() { return device_->abort(this); }

void sim_run::release() noexcept {
  for (unsigned i = 0; i < kernel_->args().size(); ++i) args_[i] = arg{};
  state_.store(run_state::new_, std::memory_order_relaxed);
  kernel_->recycle(this);
}

unsigned sim_run::arg_count() const noexcept { return static_cast<unsigned>(kernel_->args().size()); }

std::span<std::byte> sim_run::buffer(unsigned i) {
  if (i >= arg_count() || kernel_->args()[i].kind != backend::arg_kind::buffer)
    throw error(errc::argument_kind, "sim kernel " + kernel_->name() + ": argument " + std::to_string(i) +
                                         " is not a buffer");
  return {args_[i].data, args_[i].size};
}

std::span<const std::byte> sim_run::scalar_bytes(unsigned i) const {
  if (i >= arg_count() || kernel_->args()[i].kind != backend::arg_kind::scalar)
    throw error(errc::argument_kind, "sim kernel " + kernel_->name() + ": argument " + std::to_string(i) +
                                         " is not a scalar");
  return {args_[i].scalar.data(), args_[i].size};
}

}  // namespace xrtio::sim::detail
