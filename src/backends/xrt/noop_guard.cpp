// noop_guard (noop_guard.hpp): finding the no-op driver, and freeing its
// buffer objects only while nothing else can reach its map.
#include "noop_guard.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <thread>

namespace xrtio::xrt_backend::detail {
namespace {

/// The no-op driver's soname; XRT loads it when XCL_EMULATION_MODE=noop (use_noop_device).
constexpr const char* noop_driver_soname = "libxrt_noop.so.2";

// The state the driver's completion thread writes into the command's
// header, read atomically (it is a bit-field of that word).
ert_cmd_state state_of(const ert_packet* p) noexcept {
  ert_packet header{};
  header.header = std::atomic_ref<std::uint32_t>(const_cast<std::uint32_t&>(p->header)).load(std::memory_order_acquire);
  return static_cast<ert_cmd_state>(header.state);
}

}  // namespace

noop_guard* noop_guard::detect() noexcept {
  // Which driver XRT chose is read from the process (the one loaded), not
  // from the environment that chose it: XRT reads XCL_EMULATION_MODE once.
  static noop_guard* const guard = [] {
    void* driver = ::dlopen(noop_driver_soname, RTLD_NOW | RTLD_NOLOAD);
    if (!driver) return static_cast<noop_guard*>(nullptr);
    ::dlclose(driver);
    return new noop_guard;  // never destroyed: xrt_buffers may be freed during exit
  }();
  return guard;
}

void noop_guard::before_submit() noexcept { free_retired(); }

void noop_guard::submitted(const ert_packet* packet) noexcept { last_ = packet; }

void noop_guard::not_submitted(const ert_packet* packet) noexcept {
  if (last_ == packet) last_ = nullptr;
}

void noop_guard::retire(xrt::bo&& bo) noexcept {
  if (!bo) return;
  auto held = lock();
  try {
    retired_.push_back(std::move(bo));
  } catch (...) {
    wait_idle();  // no room to defer it: free it now
    xrt::bo gone(std::move(bo));
    return;
  }
  if (retired_.size() >= max_retired) wait_idle();
  free_retired();
}

// The completion thread handles commands in submission order, and marks each
// final only after looking it up: once the last one submitted is final, it
// has nothing left to look up. (With no completion delay there is no such
// thread: xclExecBuf marks the command final itself, under our lock.)
bool noop_guard::idle() const noexcept {
  if (!last_) return true;
  // The final states, by name: the values are not ordered (SUBMITTED, 7,
  // lies among them and is not final).
  switch (state_of(last_)) {
    case ERT_CMD_STATE_COMPLETED:
    case ERT_CMD_STATE_ERROR:
    case ERT_CMD_STATE_ABORT:
    case ERT_CMD_STATE_TIMEOUT:
    case ERT_CMD_STATE_NORESPONSE:
    case ERT_CMD_STATE_SKERROR:
    case ERT_CMD_STATE_SKCRASHED:
      return true;
    default:
      return false;
  }
}

void noop_guard::wait_idle() noexcept {
  // Bounded by the completion delay: the thread needs nothing from us.
  while (!idle()) std::this_thread::yield();
  last_ = nullptr;  // final: the run may now be destroyed and its command buffer reused
  retired_.clear();  // and what waited for this moment is freed with it, not left to a later free
}

void noop_guard::free_retired() noexcept {
  if (retired_.empty() || !idle()) return;
  last_ = nullptr;
  retired_.clear();
}

}  // namespace xrtio::xrt_backend::detail
