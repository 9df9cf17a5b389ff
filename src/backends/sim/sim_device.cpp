// The simulated device. One mutex guards the device's queues (it plays the
// device's command processor, not part of xrtio's hot path); run states are
// atomics so the reactor polls them without locking.
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "xrtio/sim.hpp"
#include "backends/run_pool.hpp"

namespace xrtio::sim {
namespace {

using clock = std::chrono::steady_clock;
constexpr unsigned max_args = 64;

class sim_buffer final : public backend::native_buffer {
 public:
  enum class ownership { owned, borrowed, mapped };
  sim_buffer(std::byte* data, std::size_t size, ownership own) : data_(data), size_(size), own_(own) {}
  ~sim_buffer() override {
    if (own_ == ownership::owned) std::free(data_);
    if (own_ == ownership::mapped) ::munmap(data_, size_);
  }
  std::size_t size() const noexcept override { return size_; }
  std::byte* map() override { return data_; }
  void sync(backend::sync_direction, std::size_t size, std::size_t offset) override {
    if (offset > size_ || size > size_ - offset)
      throw error(errc::out_of_range, "sim buffer sync [" + std::to_string(offset) + ", +" + std::to_string(size) +
                                          ") exceeds " + std::to_string(size_) + " bytes");
    // Host and simulated device share coherent memory: nothing to flush.
  }
  std::unique_ptr<backend::native_buffer> sub(std::size_t size, std::size_t offset) override {
    if (offset > size_ || size > size_ - offset)
      throw error(errc::out_of_range, "sim sub-buffer out of range");
    return std::make_unique<sim_buffer>(data_ + offset, size, ownership::borrowed);
  }
  std::uint64_t address() const noexcept override { return reinterpret_cast<std::uintptr_t>(data_); }

 private:
  std::byte* data_;
  std::size_t size_;
  ownership own_;
};

class sim_device_impl;
class sim_kernel;

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

  struct arg {
    std::byte* data = nullptr;
    std::size_t size = 0;
    std::array<std::byte, 8> scalar{};
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
  clock::time_point due_{};
  clock::time_point completed_at_{};
  // Guarded by the device mutex:
  bool in_queue_ = false;
  bool parked_ = false;      // hung with no thread
  bool executing_ = false;   // its kernel runs on a compute unit now
  bool hang_phase_ = false;  // queued again to finish a timed hang
  bool kernel_failed_ = false;
  bool lost_ = false;
  unsigned waiters_ = 0;  // threads in wait_for() or abort() waiting for a final state
  std::condition_variable done_cv_;
};

class sim_kernel final : public backend::native_kernel {
 public:
  sim_kernel(kernel_def def, sim_device_impl* d) : def_(std::move(def)), device_(d) {}
  const std::string& name() const noexcept override { return def_.name; }
  const std::vector<backend::arg_desc>& args() const noexcept override { return def_.args; }
  backend::native_run_ptr make_run() override {
    if (auto* r = pool_.take()) return backend::native_run_ptr(r);
    return backend::native_run_ptr(new sim_run(this, device_));
  }
  void recycle(sim_run* r) noexcept { pool_.give(r); }
  const kernel_def& def() const noexcept { return def_; }

 private:
  kernel_def def_;
  sim_device_impl* device_;
  detail::run_pool<sim_run> pool_;
};

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class sim_device_impl final : public device {
 public:
  explicit sim_device_impl(device_config cfg) : cfg_(std::move(cfg)) {
    if (cfg_.compute_units == 0) throw error(errc::invalid_size, "sim device: 0 compute units");
    for (auto& k : cfg_.kernels) {
      if (k.args.size() > max_args)
        throw error(errc::too_many_arguments,
                    "sim kernel " + k.name + " declares " + std::to_string(k.args.size()) + " arguments (max 64)");
      for (auto& a : k.args)
        if (a.kind == backend::arg_kind::scalar && (a.size == 0 || a.size > 8))
          throw error(errc::invalid_size, "sim kernel " + k.name + ": scalar " + a.name + " of " +
                                              std::to_string(a.size) + " bytes (1..8 supported)");
      kernels_.emplace(k.name, std::make_shared<sim_kernel>(k, this));
    }
    if (cfg_.event_fd) {
      efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (efd_ < 0) throw error(errc::backend_failure, "sim device: eventfd failed");
    }
    heap_.reserve(1024);
    for (unsigned i = 0; i < cfg_.compute_units; ++i) cus_.push_back(std::make_unique<cu_slot>());
    for (unsigned i = 0; i < cfg_.compute_units; ++i) threads_.emplace_back([this, i] { compute_unit(*cus_[i]); });
  }

  ~sim_device_impl() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      for (auto* r : executing_list_) r->stop_.store(true);
    }
    for (auto& cu : cus_) cu->cv.notify_one();
    for (auto& t : threads_) t.join();
    if (efd_ >= 0) ::close(efd_);
  }

  std::string name() const override { return "sim (" + std::to_string(cfg_.compute_units) + " compute units)"; }

  std::unique_ptr<backend::native_buffer> alloc(std::size_t size, backend::buffer_kind, int) override {
    if (lost_.load()) throw error(errc::device_lost, "sim device lost: cannot allocate " + std::to_string(size));
    // 4 KiB alignment like a DMA-able allocation; zeroed like fresh pages.
    std::size_t rounded = (size + 4095) & ~std::size_t{4095};
    void* p = std::aligned_alloc(4096, rounded);
    if (!p) throw error(errc::backend_failure, "sim device: out of host memory for " + std::to_string(size));
    std::memset(p, 0, rounded);
    return std::make_unique<sim_buffer>(static_cast<std::byte*>(p), size, sim_buffer::ownership::owned);
  }
  std::unique_ptr<backend::native_buffer> import_user_memory(void* ptr, std::size_t size) override {
    return std::make_unique<sim_buffer>(static_cast<std::byte*>(ptr), size, sim_buffer::ownership::borrowed);
  }
  std::unique_ptr<backend::native_buffer> import_dmabuf(int fd, std::size_t size) override {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
      throw error(errc::backend_failure, "sim device: mmap of dma-buf fd " + std::to_string(fd) + " for " +
                                             std::to_string(size) + " bytes failed");
    return std::make_unique<sim_buffer>(static_cast<std::byte*>(p), size, sim_buffer::ownership::mapped);
  }
  std::shared_ptr<backend::native_kernel> kernel(const std::string& name) override {
    auto it = kernels_.find(name);
    if (it == kernels_.end()) {
      std::string known;
      for (auto& [n, k] : kernels_) known += (known.empty() ? "" : ", ") + n;
      throw error(errc::unknown_kernel, "sim device: no kernel \"" + name + "\" (loaded: " + known + ")");
    }
    return it->second;
  }
  std::vector<std::string> kernel_names() const override {
    std::vector<std::string> v;
    for (auto& [n, k] : kernels_) v.push_back(n);
    return v;
  }
  int event_fd() const noexcept override { return efd_; }
  void consume_event() noexcept override {
    std::uint64_t v;
    [[maybe_unused]] auto n = ::read(efd_, &v, sizeof v);
    // An acq_rel exchange reads the last signaller's release: every state
    // stored before that signal is visible to the scan that follows.
    signaled_.exchange(false, std::memory_order_acq_rel);
  }

  bool take_completions() noexcept override {
    if (efd_ < 0) return true;  // no event fd: not tracked
    // Separate from signaled_: clearing that would make every later
    // completion write the event fd while the reactor is awake and spinning.
    if (!completions_.load(std::memory_order_relaxed)) return false;
    return completions_.exchange(false, std::memory_order_acq_rel);
  }

  device_stats stats() const override {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  void add_fault(fault_rule rule) override {
    std::lock_guard lock(mutex_);
    cfg_.faults.push_back(std::move(rule));
  }
  void lose() override {
    std::lock_guard lock(mutex_);
    lose_locked();
  }

  // ---- called by runs ----
  void submit(sim_run* r) {
    std::unique_lock lock(mutex_);
    if (lost_.load()) throw error(errc::device_lost, "sim device lost: cannot start kernel " + r->kernel_->name());
    r->number_ = ++stats_.started;
    r->fault_ = pick_fault(r->kernel_->name(), r->number_);
    r->hang_phase_ = false;
    r->kernel_failed_ = false;
    r->lost_ = false;
    r->stop_.store(false, std::memory_order_relaxed);
    r->state_.store(run_state::queued, std::memory_order_release);
    if (r->fault_.what == fault::device_lost) {
      r->lost_ = true;  // before finish() publishes the state: final_error() reads it without the lock
      finish(r, run_state::no_response);
      lose_locked();
      return;
    }
    r->due_ = clock::now() + latency(*r);
    push(r);
    // Wake a compute unit only if none would otherwise pick the run up in
    // time: one asleep with nothing due (or due later than this run), and
    // not already woken. Busy units come back to the queue by themselves.
    // Waking on every submission cost a futex wake and usually a context
    // switch per run (docs/PERFORMANCE.md).
    cu_slot* pick = nullptr;
    for (auto& cu : cus_)
      if (cu->sleep_until > r->due_ && (!pick || cu->sleep_until > pick->sleep_until)) pick = cu.get();
    if (!pick) return;
    pick->sleep_until = cu_slot::awake;  // woken: later submissions need not wake it again
    lock.unlock();
    pick->cv.notify_one();
  }

  backend::abort_outcome abort(sim_run* r) {
    std::unique_lock lock(mutex_);
    auto s = r->state_.load();
    if (is_final(s)) return backend::abort_outcome::done;
    if (s == run_state::new_) {
      r->state_.store(run_state::abort, std::memory_order_release);
      return backend::abort_outcome::done;
    }
    if (r->fault_.what == fault::refuse_abort && s == run_state::running) {
      ++stats_.abort_refused;
      return backend::abort_outcome::refused;
    }
    if (r->fault_.what == fault::slow_abort && s == run_state::running) {
      auto delay = r->fault_.abort_delay;
      lock.unlock();
      std::this_thread::sleep_for(delay);
      lock.lock();
      if (is_final(r->state_.load())) return backend::abort_outcome::done;
    }
    if (r->executing_) {
      r->stop_.store(true, std::memory_order_release);
      ++r->waiters_;
      r->done_cv_.wait(lock, [&] { return is_final(r->state_.load()); });
      --r->waiters_;
      return backend::abort_outcome::done;
    }
    if (r->in_queue_) remove(r);
    if (r->parked_) unpark(r);
    finish(r, run_state::abort);
    return backend::abort_outcome::done;
  }

 private:
  friend class sim_run;

  fault_rule pick_fault(const std::string& kernel, std::uint64_t n) {
    for (auto& f : cfg_.faults)
      if ((f.kernel.empty() || f.kernel == kernel) && (f.run_number == 0 || f.run_number == n)) return f;
    if (cfg_.fault_selector) return cfg_.fault_selector(kernel, n);
    return {};
  }

  clock::duration latency(const sim_run& r) const {
    auto& m = cfg_.latency;
    auto ns = m.fixed.count() + static_cast<std::int64_t>(m.ns_per_byte * static_cast<double>(r.bytes_));
    if (m.jitter.count() > 0)
      ns += static_cast<std::int64_t>(mix(m.seed ^ mix(r.number_)) % static_cast<std::uint64_t>(m.jitter.count() + 1));
    return std::chrono::nanoseconds(ns);
  }

  static bool later(const sim_run* a, const sim_run* b) { return a->due_ > b->due_; }
  void push(sim_run* r) {
    r->in_queue_ = true;
    heap_.push_back(r);
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
  void remove(sim_run* r) {
    auto it = std::find(heap_.begin(), heap_.end(), r);
    if (it != heap_.end()) {
      heap_.erase(it);
      std::make_heap(heap_.begin(), heap_.end(), later);
    }
    r->in_queue_ = false;
  }
  void unpark(sim_run* r) {
    parked_.erase(std::remove(parked_.begin(), parked_.end(), r), parked_.end());
    r->parked_ = false;
  }

  // Under mutex_. Publishes a final state and signals the event fd.
  void finish(sim_run* r, run_state s) {
    r->completed_at_ = clock::now();
    if (s == run_state::completed) ++stats_.completed;
    else if (s == run_state::abort) ++stats_.aborted;
    else ++stats_.failed;
    r->state_.store(s, std::memory_order_release);
    if (r->waiters_) r->done_cv_.notify_all();  // only this run's waiters
    completions_.store(true, std::memory_order_release);  // always: a skipped store would not publish this state
    if (efd_ >= 0 && !signaled_.exchange(true, std::memory_order_acq_rel)) {
      std::uint64_t one = 1;
      [[maybe_unused]] auto n = ::write(efd_, &one, sizeof one);
    }
  }

  void lose_locked() {
    lost_.store(true);
    for (auto* r : heap_) {
      r->in_queue_ = false;
      r->lost_ = true;
      finish(r, run_state::no_response);
    }
    heap_.clear();
    for (auto* r : parked_) {
      r->parked_ = false;
      r->lost_ = true;
      finish(r, run_state::no_response);
    }
    parked_.clear();
    for (auto* r : executing_list_) {
      r->lost_ = true;
      r->stop_.store(true);
    }
  }

  // One per compute unit; guarded by mutex_.
  struct cu_slot {
    static constexpr clock::time_point awake = clock::time_point::min();
    std::condition_variable cv;
    clock::time_point sleep_until = awake;  // max(): asleep with nothing queued
  };

  void compute_unit(cu_slot& self) {
    ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // precise latency model
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (heap_.empty()) {
        self.sleep_until = clock::time_point::max();
        self.cv.wait(lock);
        self.sleep_until = cu_slot::awake;
        continue;
      }
      auto now = clock::now();
      if (heap_.front()->due_ > now) {
        self.sleep_until = heap_.front()->due_;
        self.cv.wait_until(lock, self.sleep_until);
        self.sleep_until = cu_slot::awake;
        continue;
      }
      std::pop_heap(heap_.begin(), heap_.end(), later);
      sim_run* r = heap_.back();
      heap_.pop_back();
      r->in_queue_ = false;
      if (!r->hang_phase_) {
        auto f = r->fault_.what;
        if (f == fault::fail) {
          finish(r, run_state::error);
          continue;
        }
        if (f == fault::hang || f == fault::refuse_abort || f == fault::slow_abort) {
          r->state_.store(run_state::running, std::memory_order_release);
          if (r->fault_.duration.count() > 0) {
            r->hang_phase_ = true;
            r->due_ = now + r->fault_.duration;
            push(r);
          } else {
            r->parked_ = true;
            parked_.push_back(r);
          }
          continue;
        }
      }
      execute(r, lock);
    }
  }

  void execute(sim_run* r, std::unique_lock<std::mutex>& lock) {
    r->state_.store(run_state::running, std::memory_order_release);
    r->executing_ = true;
    executing_list_.push_back(r);
    lock.unlock();
    bool threw = false;
    try {
      const auto& fn = r->kernel_->def().fn;
      if (fn) fn(*r);
    } catch (...) {
      threw = true;
    }
    lock.lock();
    r->executing_ = false;
    executing_list_.erase(std::remove(executing_list_.begin(), executing_list_.end(), r), executing_list_.end());
    if (r->lost_) finish(r, run_state::no_response);
    else if (r->stop_.load()) finish(r, run_state::abort);
    else if (threw || r->kernel_failed_) finish(r, run_state::error);
    else finish(r, run_state::completed);
  }

  device_config cfg_;
  std::map<std::string, std::shared_ptr<sim_kernel>> kernels_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<cu_slot>> cus_;
  std::vector<sim_run*> heap_;  // min-heap by due time
  std::vector<sim_run*> parked_;
  std::vector<sim_run*> executing_list_;
  std::vector<std::thread> threads_;
  device_stats stats_;
  std::atomic<bool> lost_{false};
  std::atomic<bool> signaled_{false};     // event fd written and not yet consumed
  std::atomic<bool> completions_{false};  // a run became final since take_completions()
  bool stopping_ = false;
  int efd_ = -1;
};

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

}  // namespace

std::shared_ptr<device> make_device(device_config config) {
  return std::make_shared<sim_device_impl>(std::move(config));
}

xrtio::context open(device_config config, std::optional<memory_budget> budget) {
  return xrtio::context(make_device(std::move(config)), std::move(budget));
}

device& device_of(const xrtio::context& ctx) {
  auto* d = ctx ? dynamic_cast<device*>(&ctx.native()) : nullptr;
  if (!d) throw error(errc::not_supported, ctx ? "sim::device_of: the context's device (" + ctx.native().name() +
                                                     ") is not a simulated device"
                                               : std::string("sim::device_of: empty context"));
  return *d;
}

}  // namespace xrtio::sim
