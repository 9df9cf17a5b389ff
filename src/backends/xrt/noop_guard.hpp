// noop_guard: the XRT calls that reach the no-op driver's buffer map, made
// safe from several threads (docs/DESIGN.md, "The no-op driver's buffer
// map"). Private to src/backends/xrt.
//
// XRT 2.13's no-op driver (libxrt_noop.so.2) keeps every buffer object, a
// user's and each run's command buffer, in one process-wide std::map.
// Inserting (xclAllocBO, xclAllocUserPtrBO) and looking up (xclMapBO,
// xclGetBOProperties, xclExecBuf, and its completion thread marking each
// command done) take the driver's lock; xclFreeBO looks up under the lock
// and then erases *without* it. An erase therefore must not overlap any
// other call into the map, including the completion thread's look-up of a
// command submitted earlier, which no caller can lock out.
//
// On that driver the backend makes every call that may look up or insert
// under lock(), and frees only through retire() and destroy(), which also
// wait until the completion thread has nothing left to look up: it handles
// commands in submission order, so that is when the last command submitted
// (submitted(), under the same lock) reads a final state. On any other
// driver there is no guard: the backend's only cost is testing a null
// pointer (a branch that always goes the same way), no lock.
#pragma once

#include <ert.h>

#include <cstddef>
#include <mutex>
#include <type_traits>
#include <vector>

#include "xrt_api.hpp"

namespace xrtio::xrt_backend::detail {

class noop_guard {
 public:
  /// The process's guard if the XRT driver loaded is the no-op one, else
  /// nullptr. Valid once a device is open (XRT loads its driver by then).
  static noop_guard* detect() noexcept;

  /// Held around each XRT call that may insert into or look up in the
  /// driver's map. Not held while waiting for a run (xrt::run::wait does not
  /// use the map); xrt::run::abort, which submits a command of its own and
  /// waits for it, is made under it.
  [[nodiscard]] std::unique_lock<std::mutex> lock() { return std::unique_lock(mutex_); }

  /// Under lock(), before a command is handed to the driver: frees what was
  /// retired if the completion thread is idle (so it does not linger).
  void before_submit() noexcept;
  /// Under lock(), after `packet`'s command was handed to the driver: the
  /// last command submitted.
  void submitted(const ert_packet* packet) noexcept;
  /// Under lock(): submitting `packet` failed, so its command is not queued
  /// (what it held before was final: xrt_run::start checks that).
  void not_submitted(const ert_packet* packet) noexcept;

  /// Frees `bo` (the last reference calls xclFreeBO) once no other call can
  /// reach the map: now if the completion thread is idle, else with the next
  /// free that finds it idle, or after waiting for it when `max_retired` are pending.
  void retire(xrt::bo&& bo) noexcept;
  /// Destroys `object`, whose destructor may free command buffers inside
  /// XRT (an xrt::run, an xrt::kernel), once the completion thread is idle.
  template <class T>
  void destroy(T&& object) noexcept {
    static_assert(!std::is_lvalue_reference_v<T>, "destroy(std::move(object))");
    auto held = lock();
    wait_idle();
    T gone(std::move(object));
  }

 private:
  /// Bos waiting for an idle completion thread before a free waits for it.
  static constexpr std::size_t max_retired = 64;

  bool idle() const noexcept;
  void wait_idle() noexcept;
  void free_retired() noexcept;

  std::mutex mutex_;
  const ert_packet* last_ = nullptr;  // under mutex_: last command submitted, until seen final
  std::vector<xrt::bo> retired_;      // under mutex_
};

/// `guard`'s lock, or no lock when there is no guard (any driver but the no-op one).
inline std::unique_lock<std::mutex> noop_lock(noop_guard* guard) {
  return guard ? guard->lock() : std::unique_lock<std::mutex>();
}

}  // namespace xrtio::xrt_backend::detail
