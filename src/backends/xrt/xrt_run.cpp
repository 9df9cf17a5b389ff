// The XRT backend's native run (xrt_run in xrt_types.hpp): argument checks,
// start, state, the bounded wait, abort and release, and command_registers,
// which reads back the start command XRT wrote. On XRT's no-op driver,
// binding a buffer, start, abort and destruction go through the noop_guard
// (docs/DESIGN.md, "The no-op driver's buffer map"); state and wait do not
// reach its buffer map.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <typeinfo>
#include <string>
#include <type_traits>
#include <vector>

#include "xrt_fault_hook.hpp"
#include "xrt_types.hpp"
#include "xrt_wait.hpp"
#include "xrtio/error.hpp"

// Set by the syntax check against current XRT's API: its xrt::run has wait2,
// so the wait2 branch of detail::wait_and_read must be the one compiled.
#ifdef XRTIO_EXPECT_WAIT2
static_assert(xrtio::xrt_backend::detail::has_wait2<xrt::run>,
              "XRTIO_EXPECT_WAIT2: xrt::run::wait2 was not detected");
#endif

namespace xrtio::xrt_backend {
namespace detail {
namespace {

using backend::arg_kind;

// Runs that were released while not final (a caller bug the layers above
// prevent). Destroying them would abort the process or corrupt the next
// command (docs/DESIGN.md, invariant 2), so they are kept, deliberately, for
// good: the whole xrt_run, its xrt::run inside, is never deleted. It is
// linked here through its pool_next (it is in no pool any more), so keeping
// one allocates nothing and cannot fail, where release() could not report a
// failure (it is noexcept); the list also keeps them reachable, so a leak
// checker sees them kept rather than lost.
std::atomic<xrt_run*> kept_runs{nullptr};

void keep_forever(xrt_run* r) noexcept {
  xrt_run* head = kept_runs.load(std::memory_order_relaxed);
  do r->pool_next = head;
  while (!kept_runs.compare_exchange_weak(head, r, std::memory_order_release, std::memory_order_relaxed));
}

// The constructor takes its xrt::run by a move assignment, its last step.
static_assert(std::is_nothrow_move_assignable_v<xrt::run>);

}  // namespace

xrt_run::xrt_run(xrt_kernel* k, xrt::run&& r)
    : kernel_(k),
      noop_(k->noop()),
      packet_(r.get_ert_packet()),
      set_(k->args().size(), false),
      bound_(k->args().size(), 0) {
  // What state() reads past this object: XRT's run implementation (its
  // command's address) and the command packet (the state itself). The
  // command object between them is XRT's own and has no public address.
  set_state_memory(r.get_handle().get(), packet_);
  // Last, and it cannot throw: had anything above thrown, run_ would be
  // destroyed in place, outside the no-op driver's guard; the caller
  // (xrt_kernel::make_run) still owns `r` and destroys it under the guard.
  run_ = std::move(r);
}

xrt_run::~xrt_run() {
  // Destroying an xrt::run may free its command buffer (xclFreeBO) when
  // XRT's cache of them is full.
  if (noop_ && run_) noop_->destroy(std::move(run_));
}

run_state xrt_run::state() noexcept {
  try {
    before_xrt_call(xrt_call::run_state);
    auto s = to_run_state(run_.state(), last_.load(std::memory_order_relaxed));
    last_.store(s, std::memory_order_relaxed);
    return s;
  } catch (...) {
    return last_.load(std::memory_order_relaxed);
  }
}

run_state xrt_run::wait_for(std::chrono::nanoseconds timeout) {
  // wait2 where xrt::run has it, else wait (xrt_wait.hpp). (The no-op
  // device ignores the timeout and spins until the run completes.)
  try {
    before_xrt_call(xrt_call::run_wait);
  } catch (...) {
    return state();  // as wait_and_read does when XRT's wait throws
  }
  auto s = wait_and_read(run_, std::chrono::ceil<std::chrono::milliseconds>(timeout),
                         last_.load(std::memory_order_relaxed));
  last_.store(s, std::memory_order_relaxed);
  return s;
}

backend::abort_outcome xrt_run::abort() {
  // Synchronous in XRT (>= 2.12): submits an ERT abort and waits. A throw
  // or a non-final state afterwards means the device did not let go.
  try {
    before_xrt_call(xrt_call::run_abort);
    // The whole abort under the guard: XRT submits an abort command, waits
    // for it, and frees or caches its command buffer.
    auto held = noop_lock(noop_);
    auto s = to_run_state(run_.abort(), run_state::running);
    if (is_final(s)) {
      last_.store(s, std::memory_order_relaxed);
      return backend::abort_outcome::done;
    }
  } catch (...) {
    return backend::abort_outcome::refused;
  }
  return is_final(state()) ? backend::abort_outcome::done : backend::abort_outcome::refused;
}

void xrt_run::fail(errc code, unsigned index, const std::string& what) const {
  const auto& defs = kernel_->args();
  std::string n = index < defs.size() ? " (" + defs[index].name + ")" : "";
  throw error(code, "xrt kernel " + kernel_->name() + " argument " + std::to_string(index) + n + ": " + what);
}

const backend::arg_desc& xrt_run::expect(unsigned index, arg_kind kind) const {
  const auto& defs = kernel_->args();
  if (index >= defs.size())
    fail(errc::argument_count, index, "the kernel has " + std::to_string(defs.size()) + " arguments");
  const auto& d = defs[index];
  if (d.kind != kind)
    fail(errc::argument_kind, index,
         kind == arg_kind::buffer ? "is a " + std::to_string(d.size) + "-byte scalar; a buffer was given"
                                  : std::string("is a buffer; a scalar was given"));
  return d;
}

void xrt_run::set_arg(unsigned index, backend::native_buffer& buffer) {
  expect(index, arg_kind::buffer);
  // xrt_buffer is final: a type_info comparison says what dynamic_cast
  // would, without its walk of the class hierarchy (1.2 % of the in-loop
  // driver's samples at one run in flight on the no-op device).
  auto* xb = typeid(buffer) == typeid(xrt_buffer) ? static_cast<xrt_buffer*>(&buffer) : nullptr;
  if (!xb) fail(errc::foreign_context, index, "the buffer is not an XRT buffer");
  if (xb->device_index() != kernel_->device_index())
    fail(errc::foreign_context, index,
         "the buffer belongs to XRT device " + std::to_string(xb->device_index()) + ", the kernel to device " +
             std::to_string(kernel_->device_index()));
  // Already in the command since this run's last use: XRT's set_arg would
  // write the same address again, and it costs a lock on the no-op driver,
  // a bo lookup and shared_ptr traffic (docs/PERFORMANCE.md).
  if (bound_[index] == xb->serial()) {
    set_[index] = true;
    return;
  }
  bound_[index] = 0;
  try {
    before_xrt_call(xrt_call::run_set_arg, index);
    auto held = noop_lock(noop_);  // XRT asks the driver for the bo's bank and address
    run_.set_arg(static_cast<int>(index), xb->bo());
  } catch (const std::exception& e) {
    fail(errc::backend_failure, index, std::string("XRT refused the buffer: ") + e.what());
  }
  bound_[index] = xb->serial();
  set_[index] = true;
}

void xrt_run::set_arg(unsigned index, const void* value, std::size_t size) {
  const auto& d = expect(index, arg_kind::scalar);
  if (d.size != size)
    fail(errc::argument_kind, index,
         "is a " + std::to_string(d.size) + "-byte scalar; " + std::to_string(size) + " bytes were given");
  try {
    before_xrt_call(xrt_call::run_set_arg, index);
    run_.set_arg(static_cast<int>(index), value, size);
  } catch (const std::exception& e) {
    fail(errc::backend_failure, index, std::string("XRT refused the scalar: ") + e.what());
  }
  set_[index] = true;
}

void xrt_run::start() {
  for (std::size_t i = 0; i < set_.size(); ++i)
    if (!set_[i]) fail(errc::argument_count, static_cast<unsigned>(i), "not set before start()");
  // Restarting an xrt::run before its completion was observed makes XRT
  // reset it to NEW and throw "bad command state": refuse first.
  if (started_) {
    auto s = state();
    if (!is_final(s))
      throw error(errc::busy, "xrt kernel " + kernel_->name() + ": start() while the run is " +
                                  std::string(to_string(s)));
  }
  auto held = noop_lock(noop_);
  try {
    last_.store(run_state::new_, std::memory_order_relaxed);
    before_xrt_call(xrt_call::run_start);
    if (noop_) noop_->before_submit();
    run_.start();
    if (noop_) noop_->submitted(packet_);
    started_ = true;
  } catch (const std::exception& e) {
    if (noop_) noop_->not_submitted(packet_);
    throw error(errc::backend_failure, "xrt kernel " + kernel_->name() + ": start failed: " + e.what());
  }
}

void xrt_run::release() noexcept {
  // Only after a final state (docs/DESIGN.md, invariant 2). If a caller gets
  // this wrong, the xrt::run is parked forever instead of destroyed in flight.
  // A final state already read stays final until the next start(), so XRT
  // is asked again only when none was seen: its state() takes a lock in
  // XRT's command and was 1.9 % of the io thread's samples at C = 4096 on
  // the no-op device (docs/PERFORMANCE.md, "Per-run costs on the io thread").
  if (started_ && !is_final(last_.load(std::memory_order_relaxed)) && !is_final(state())) {
    std::fputs("xrtio: an XRT run was released before reaching a final state; keeping it alive\n", stderr);
    keep_forever(this);  // never deleted: its xrt::run stays alive with it
    return;
  }
  std::fill(set_.begin(), set_.end(), false);
  started_ = false;
  last_.store(run_state::new_, std::memory_order_relaxed);
  kernel_->recycle(this);
}

}  // namespace detail

std::vector<std::uint32_t> command_registers(backend::native_run& r) {
  // ert_start_kernel_cmd's payload always starts with one cu mask; extra_cu_masks more may follow.
  constexpr std::size_t first_cu_masks = 1;
  auto* x = dynamic_cast<detail::xrt_run*>(&r);
  if (!x) return {};
  const ert_packet* p = nullptr;
  try {
    p = x->native().get_ert_packet();
  } catch (const std::exception& e) {
    throw error(errc::backend_failure, std::string("xrt: reading a run's command: ") + e.what());
  }
  if (!p || p->opcode != ERT_START_CU) return {};
  // Payload after the header: the cu mask, extra cu masks, then the
  // register map (docs/DESIGN.md, "Pitfalls": the start command).
  const auto* k = reinterpret_cast<const ert_start_kernel_cmd*>(p);
  const std::size_t masks = first_cu_masks + k->extra_cu_masks;
  if (k->count <= masks) return {};
  const std::uint32_t* regs = k->data + k->extra_cu_masks;
  return std::vector<std::uint32_t>(regs, regs + (k->count - masks));
}

}  // namespace xrtio::xrt_backend
