// The XRT backend's native kernel (xrt_kernel in xrt_types.hpp): its argument
// descriptions and its pool of finished xrt::runs (creating one allocates a
// command buffer; open_options::run_pool_size bounds the pool). On XRT's
// no-op driver, making a run and destroying the kernel go through the
// noop_guard (docs/DESIGN.md, "The no-op driver's buffer map").
#include <string>
#include <type_traits>

#include "xrt_fault_hook.hpp"
#include "xrt_types.hpp"
#include "xrtio/error.hpp"

namespace xrtio::xrt_backend::detail {

using backend::arg_kind;

// The constructor takes its xrt::kernel by a move assignment, its last step.
static_assert(std::is_nothrow_move_assignable_v<xrt::kernel>);

xrt_kernel::xrt_kernel(std::shared_ptr<xrt_device_impl> dev, xrt::kernel&& k, kernel_info info, std::size_t pool_cap)
    : device_(std::move(dev)), noop_(device_->noop()), info_(std::move(info)), pool_(pool_cap) {
  for (auto& a : info_.args) args_.push_back(describe(k, a));
  // Last, and it cannot throw: had anything above thrown (no memory for the
  // descriptions), kernel_ would be destroyed in place with the rest,
  // outside the no-op driver's guard, as ~xrt_kernel's body does not run.
  kernel_ = std::move(k);
}

backend::arg_desc xrt_kernel::describe(const xrt::kernel& k, const arg_info& a) {
  backend::arg_desc d;
  d.name = a.name;
  d.kind = a.kind;
  d.size = a.kind == arg_kind::scalar ? a.size : 0;
  d.group_id = 0;
  if (a.kind == arg_kind::buffer) {
    // XRT's own answer (it intersects the banks of all compute units).
    try {
      d.group_id = k.group_id(static_cast<int>(a.index));
    } catch (const std::exception&) {
      d.group_id = a.group_id < 0 ? 0 : a.group_id;
    }
  }
  return d;
}

// Pooled runs are final (release() checked). The last xrt::kernel or
// xrt::run of a device frees the command buffers XRT cached for it.
xrt_kernel::~xrt_kernel() {
  if (noop_) noop_->destroy(std::move(kernel_));
}

backend::native_run_ptr xrt_kernel::make_run() {
  if (auto* r = pool_.take()) return backend::native_run_ptr(r);
  xrt::run run;
  try {
    before_xrt_call(xrt_call::run_create);
    // A command buffer from XRT's cache, or a new one (xclAllocBO, xclMapBO).
    auto held = noop_lock(noop_);
    run = xrt::run(kernel_);
    return backend::native_run_ptr(new xrt_run(this, std::move(run)));
  } catch (const std::exception& e) {
    if (noop_ && run) noop_->destroy(std::move(run));  // not taken by an xrt_run: not in place either
    throw error(errc::backend_failure, "xrt kernel " + info_.name + ": cannot create a run: " + e.what());
  }
}

void xrt_kernel::recycle(xrt_run* r) noexcept { pool_.give(r); }

unsigned xrt_kernel::device_index() const noexcept { return device_->index(); }

}  // namespace xrtio::xrt_backend::detail
