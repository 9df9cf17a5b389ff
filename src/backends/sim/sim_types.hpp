// The simulated device's internal types: its buffer, run, kernel and device,
// as the files that implement them (sim_buffer.cpp, sim_run.cpp, sim_kernel.cpp,
// sim_device.cpp, compute_unit.cpp, run_model.cpp) share them. Private to src/.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/run_pool.hpp"
#include "util/atomic_intrusive_stack.hpp"
#include "xrtio/run_options.hpp"
#include "xrtio/sim.hpp"

namespace xrtio::sim::detail {

using clock = std::chrono::steady_clock;

/// The run layer's limit (xrtio::max_arguments): a kernel no run could start is refused at open.
inline constexpr unsigned max_args = static_cast<unsigned>(max_arguments);
/// Scalar arguments are stored in place in the run, up to a 64-bit value.
inline constexpr std::size_t max_scalar_bytes = 8;

// ---- buffers (sim_buffer.cpp) ---------------------------------------------------

// Host memory the simulated kernels compute on: owned (alloc), borrowed (a
// user import or a sub-buffer) or mapped (a dma-buf import).
class sim_buffer final : public backend::native_buffer {
 public:
  enum class ownership { owned, borrowed, mapped };
  sim_buffer(std::byte* data, std::size_t size, ownership own) : data_(data), size_(size), own_(own) {}
  ~sim_buffer() override;
  std::size_t size() const noexcept override { return size_; }
  std::byte* map() override { return data_; }
  void sync(backend::sync_direction, std::size_t size, std::size_t offset) override;
  std::unique_ptr<backend::native_buffer> sub(std::size_t size, std::size_t offset) override;
  std::uint64_t address() const noexcept override { return reinterpret_cast<std::uintptr_t>(data_); }
  // Its own allocation or the user's memory (an import), not a dma-buf mapping.
  bool pinnable_host_memory() const noexcept override { return own_ != ownership::mapped; }

 private:
  std::byte* data_;
  std::size_t size_;
  ownership own_;
};

class sim_device_impl;
class sim_kernel;

// ---- runs (sim_run.cpp) ---------------------------------------------------------

// A native run and what its kernel callable sees. Its state is an atomic, so
// the reactor polls it without locking; the fields below "Guarded by the device
// mutex" belong to the device's queues (sim_device.cpp, compute_unit.cpp).
class sim_run final : public backend::native_run, public kernel_call {
 public:
  sim_run(sim_kernel* k, sim_device_impl* d);

  // native_run
  void set_arg(unsigned index, backend::native_buffer& buffer) override;
  void set_arg(unsigned index, const void* value, std::size_t size) override;
  void start() override;
  run_state state() noexcept override { return state_.load(std::memory_order_acquire); }
  run_state wait_for(std::chrono::nanoseconds timeout) override;
  backend::abort_outcome abort() override;
  std::error_code final_error(run_state s) const noexcept override {
    if (s == run_state::no_response && lost_) return errc::device_lost;
    return state_error(s);
  }
  clock::time_point device_completed_at() const noexcept override { return completed_at_; }
  void release() noexcept override;

  // kernel_call
  unsigned arg_count() const noexcept override;
  std::span<std::byte> buffer(unsigned i) override;
  std::span<const std::byte> scalar_bytes(unsigned i) const override;
  bool stop_requested() const noexcept override { return stop_.load(std::memory_order_acquire); }
  std::uint64_t run_number() const noexcept override { return number_; }
  void fail(std::string_view) override { kernel_failed_ = true; }

  sim_run* pool_next = nullptr;   // run_pool's link while idle
  sim_run* inbox_next = nullptr;  // the device's inbox link, from submit() until drained

  struct arg {
    std::byte* data = nullptr;
    std::size_t size = 0;
    std::array<std::byte, max_scalar_bytes> scalar{};
    bool set = false;
  };

  sim_kernel* kernel_;
  sim_device_impl* device_;
  std::array<arg, max_args> args_{};
  std::atomic<run_state> state_{run_state::new_};
  std::atomic<bool> stop_{false};
  fault_rule fault_{};
  std::uint64_t number_ = 0;
  std::size_t bytes_ = 0;
  clock::time_point submitted_at_{};  // the submitter's clock when it was numbered; due_ counts from it
  clock::time_point due_{};
  clock::time_point completed_at_{};
  // Guarded by the device mutex (a submission without the mutex writes
  // hang_phase_, kernel_failed_ and lost_ before it pushes the run on the
  // inbox, whose drain, under the mutex, acquires them):
  bool in_queue_ = false;
  bool parked_ = false;      // hung with no thread
  bool executing_ = false;   // its kernel runs on a compute unit now
  bool hang_phase_ = false;  // queued again to finish a timed hang
  bool kernel_failed_ = false;
  bool lost_ = false;
  unsigned waiters_ = 0;  // threads in wait_for() or abort() waiting for a final state
  std::condition_variable done_cv_;
};

// ---- kernels (sim_kernel.cpp) ---------------------------------------------------

// A kernel definition, checked when the device opens, and its pool of finished runs.
class sim_kernel final : public backend::native_kernel {
 public:
  sim_kernel(kernel_def def, sim_device_impl* d);
  const std::string& name() const noexcept override { return def_.name; }
  const std::vector<backend::arg_desc>& args() const noexcept override { return def_.args; }
  backend::native_run_ptr make_run() override;
  void recycle(sim_run* r) noexcept { pool_.give(r); }
  const kernel_def& def() const noexcept { return def_; }

 private:
  kernel_def def_;
  sim_device_impl* device_;
  xrtio::detail::run_pool<sim_run> pool_;
};

// ---- the run model (run_model.cpp) ----------------------------------------------

/// The fault for run `run_number` of `kernel`: the first matching rule of
/// cfg.faults, else cfg.fault_selector's answer, else none.
fault_rule pick_fault(const device_config& cfg, const std::string& kernel, std::uint64_t run_number);

/// The device time of a run with `bytes` of buffer arguments (latency_model).
clock::duration run_latency(const latency_model& m, std::size_t bytes, std::uint64_t run_number);

// ---- the device (sim_device.cpp; buffers in sim_buffer.cpp; compute_unit.cpp) ----

// One mutex guards the device's queues (it plays the device's command
// processor, not part of xrtio's hot path); run states are atomics so the
// reactor polls them without locking. A submission with no fault rules
// enters through a lock-free inbox and takes the mutex only when no unit
// will look at the queue by the run's due time (to wake one that sleeps),
// so the submitting thread rarely contends with the units for it
// (docs/PERFORMANCE.md, "The simulated device's own cost").
class sim_device_impl final : public device {
 public:
  explicit sim_device_impl(device_config cfg);
  ~sim_device_impl() override;

  std::string name() const override;
  std::unique_ptr<backend::native_buffer> alloc(std::size_t size, backend::buffer_kind, int) override;
  std::unique_ptr<backend::native_buffer> import_user_memory(void* ptr, std::size_t size) override;
  std::unique_ptr<backend::native_buffer> import_dmabuf(int fd, std::size_t size) override;
  std::shared_ptr<backend::native_kernel> kernel(const std::string& name) override;
  std::vector<std::string> kernel_names() const override;
  int event_fd() const noexcept override { return efd_; }
  void consume_event() noexcept override;
  std::uint64_t completion_count() const noexcept override;

  device_stats stats() const override;
  void add_fault(fault_rule rule) override;
  void lose() override;

  // ---- called by runs and kernels ----
  /// Before a new run is made: room in the queues for one more run
  /// (admit_run in sim_device.cpp). Throws std::bad_alloc.
  void admit_run();
  void submit(sim_run* r);
  /// Aborts `r` (abort_run) and counts it in long_aborts if it took longer than long_abort_threshold.
  backend::abort_outcome abort(sim_run* r);

 private:
  // Stops and joins the compute units started; closes the event descriptor.
  void stop() noexcept;
  friend class sim_run;
  friend struct sim_test_access;  // tests/test_sim_wake_race.cpp

  // One per compute unit. Written only under mutex_; read without it by
  // submit() to decide whether a unit must be woken (sim_device.cpp), so
  // both are atomics, stored seq_cst (the unit's half of the inbox's
  // Dekker pairing: see drain()).
  struct cu_slot {
    static constexpr clock::time_point awake = clock::time_point::min();
    std::condition_variable cv;
    std::atomic<clock::time_point> sleep_until{awake};  // max(): asleep with nothing queued
    std::atomic<bool> executing{false};                 // in a kernel, the mutex released (awake)
  };

  // The queues, under mutex_ (sim_device.cpp).
  // A queue entry carries its run's due time: the heap's comparisons then
  // read the heap's own contiguous memory, not one sim_run (a cache miss
  // each, the line written long ago by the submitting thread) per step.
  // Reading due_ through the run made the comparisons 2.1 % of all samples
  // (on the compute units) at L = 50 us, C = 4096, all of it under the
  // device mutex (docs/PERFORMANCE.md, "The simulated device's own cost").
  struct queued {
    clock::time_point due;
    sim_run* run;
  };
  static bool later(const queued& a, const queued& b) { return a.due > b.due; }
  void push(sim_run* r);
  void drain();
  clock::time_point now() const;
  bool looked_after(clock::time_point due) const noexcept;
  void submit_locked(sim_run* r, std::uint64_t number);
  sim_run* pop();
  void remove(sim_run* r);
  void unpark(sim_run* r);
  void wake_for(std::unique_lock<std::mutex>& lock);
  void set_running(sim_run* r);
  void finish(sim_run* r, run_state s);
  void lose_locked();
  backend::abort_outcome abort_run(sim_run* r);

  // The compute units (compute_unit.cpp).
  void compute_unit(cu_slot& self);
  bool watch_idle(std::unique_lock<std::mutex>& lock);
  void rest(cu_slot& self, std::unique_lock<std::mutex>& lock);
  void keep_standby(const cu_slot& self);
  bool divert_faulted(sim_run* r, clock::time_point now);
  void execute(cu_slot& self, sim_run* r, std::unique_lock<std::mutex>& lock);

  device_config cfg_;
  std::map<std::string, std::shared_ptr<sim_kernel>> kernels_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<cu_slot>> cus_;
  // Never grown while a run is in them: their capacity covers every run
  // made (admit_run) or every compute unit (executing_list_), so a push on
  // a compute unit's thread, which has no caller to report to, cannot throw.
  std::vector<queued> heap_;  // min-heap by due time
  std::vector<sim_run*> parked_;
  std::vector<sim_run*> executing_list_;
  std::size_t runs_made_ = 0;  // runs admitted (admit_run), under mutex_
  std::vector<std::thread> threads_;
  device_stats stats_;  // but started: started_
  // Runs submitted and not yet in heap_: a lock-free stack (through
  // sim_run::inbox_next) that submit() pushes to without the mutex and
  // whoever holds the mutex drains into heap_ (drain()).
  xrtio::detail::atomic_intrusive_stack<sim_run, &sim_run::inbox_next> inbox_;
  std::atomic<std::uint64_t> started_{0};  // runs numbered so far (device_stats::started)
  std::atomic<bool> faulty_{false};        // fault rules or a selector: submit() takes the mutex
  std::atomic<bool> lost_{false};
  std::atomic<bool> signaled_{false};     // event fd written and not yet consumed
  std::atomic<std::uint64_t> completions_{1};  // grows with each final state (completion_count)
  bool stopping_ = false;
  bool watching_ = false;              // a unit watches for submissions (watch_idle), under mutex_
  std::atomic<bool> halting_{false};   // stopping_, for the watcher, which holds no mutex
  std::atomic<std::uint64_t> queue_pushes_{0};  // runs queued while a unit watched (push), for the watcher
  clock::time_point latest_submission_{};      // the latest submitted_at_ queued (push), under mutex_: now()
  int efd_ = -1;
};

}  // namespace xrtio::sim::detail
