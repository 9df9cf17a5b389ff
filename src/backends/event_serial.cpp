// native_device::event_serial() values (include/xrtio/backend/backend.hpp):
// one process-wide counter, so that devices of different backends never
// share one (a reactor tells the event fds it watches apart by them).
#include <atomic>

#include "xrtio/backend/backend.hpp"

namespace xrtio::backend {

std::uint64_t next_event_serial() noexcept {
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace xrtio::backend
