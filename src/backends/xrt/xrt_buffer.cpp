// The XRT backend's native buffer (xrt_buffer in xrt_types.hpp): an xrt::bo
// or a view of one, with its device and memory group, and group_id_of, which
// reads that group back from an xrtio::buffer. On XRT's no-op driver its
// calls into the driver's buffer map go through the noop_guard
// (docs/DESIGN.md, "The no-op driver's buffer map").
#include <atomic>
#include <string>

#include "xrt_fault_hook.hpp"
#include "xrt_types.hpp"
#include "xrtio/error.hpp"

namespace xrtio::xrt_backend {
namespace detail {

std::uint64_t xrt_buffer::next_serial() noexcept {
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

xrt_buffer::~xrt_buffer() {
  if (!noop_) return;
  // The last reference of a root frees it (xclFreeBO): never in place here.
  noop_->retire(std::move(bo_));
  noop_->retire(std::move(root_));
}

// map and sync need no noop_guard: xrt::bo::map returns the host pointer XRT
// keeps, and the no-op driver's xclSyncBO does nothing.
std::byte* xrt_buffer::map() {
  std::call_once(map_once_, [&] {
    try {
      map_ = static_cast<std::byte*>(bo_.map());
    } catch (const std::exception&) {
      map_ = nullptr;  // device-only memory has no host mapping
    }
  });
  return map_;
}

void xrt_buffer::sync(backend::sync_direction dir, std::size_t size, std::size_t offset) {
  check(size, offset, "sync");
  const bool to_device = dir == backend::sync_direction::to_device;
  try {
    before_xrt_call(to_device ? xrt_call::bo_sync_to_device : xrt_call::bo_sync_from_device, size, offset);
    bo_.sync(to_device ? XCL_BO_SYNC_BO_TO_DEVICE : XCL_BO_SYNC_BO_FROM_DEVICE, size, offset);
  } catch (const std::exception& e) {
    throw error(errc::backend_failure, std::string("xrt bo sync ") + (to_device ? "to" : "from") + " device of [" +
                                           std::to_string(offset) + ", +" + std::to_string(size) + ") of a " +
                                           std::to_string(size_) + "-byte bo: " + e.what());
  }
}

std::unique_ptr<backend::native_buffer> xrt_buffer::sub(std::size_t size, std::size_t offset) {
  check(size, offset, "sub-buffer");
  try {
    auto abs = root_offset_ + offset;  // cannot overflow: within the root
    before_xrt_call(xrt_call::bo_sub, size, abs);
    // Making a view does not reach the driver (no noop_guard lock).
    return std::make_unique<xrt_buffer>(xrt::bo(root_, size, abs), root_, abs, size, device_index_, group_, noop_);
  } catch (const std::exception& e) {
    throw error(errc::backend_failure, "xrt sub-buffer [" + std::to_string(offset) + ", +" + std::to_string(size) +
                                           ") of a " + std::to_string(size_) + "-byte bo: " + e.what());
  }
}

std::uint64_t xrt_buffer::address() const noexcept {
  try {
    auto held = noop_lock(noop_);  // the first call asks the driver (xclGetBOProperties)
    return bo_.address();
  } catch (...) {
    return 0;
  }
}

void xrt_buffer::check(std::size_t size, std::size_t offset, const char* what) const {
  if (offset > size_ || size > size_ - offset)
    throw error(errc::out_of_range, std::string("xrt ") + what + " [" + std::to_string(offset) + ", +" +
                                        std::to_string(size) + ") exceeds " + std::to_string(size_) + " bytes");
}

}  // namespace detail

int group_id_of(const xrtio::buffer& b) noexcept {
  if (!b || !xrtio::detail::access::state(b)->native) return detail::unknown_group;
  auto* x = dynamic_cast<const detail::xrt_buffer*>(xrtio::detail::access::state(b)->native.get());
  return x ? x->group() : detail::unknown_group;
}

}  // namespace xrtio::xrt_backend
