// The simulated device: kernels are C++ callables computing on buffer memory,
// run on compute-unit threads with a latency model and fault injection,
// following the ERT state machine (new -> queued -> running -> final).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "xrtio/backend/backend.hpp"
#include "xrtio/context.hpp"
#include "xrtio/error.hpp"

namespace xrtio::sim {

/// Device time of a run, from start() to its final state: fixed + per byte of
/// its buffer arguments + uniform jitter in [0, jitter], drawn from `seed` and
/// the run number (so repeatable).
struct latency_model {
  std::chrono::nanoseconds fixed{0};
  double ns_per_byte = 0.0;
  std::chrono::nanoseconds jitter{0};
  std::uint64_t seed = 1;
};

enum class fault {
  none,
  fail,          ///< the run ends in ERROR after its latency; the kernel does not run
  hang,          ///< the run stays RUNNING until aborted (or for `duration`, then completes)
  refuse_abort,  ///< hangs like `hang`, and abort() is refused, queued or running: the run must be retained
  slow_abort,    ///< hangs; abort() takes `abort_delay` and then succeeds
  device_lost,   ///< the device dies: this and every in-flight run end in NORESPONSE; later starts fail
};

/// Which runs a fault hits. An empty kernel name matches every kernel; run
/// number 0 matches every run, otherwise the device-wide 1-based start count.
struct fault_rule {
  std::string kernel;
  std::uint64_t run_number = 0;
  fault what = fault::none;
  std::chrono::nanoseconds duration{0};     ///< hang / refuse_abort: 0 = forever
  std::chrono::nanoseconds abort_delay{0};  ///< slow_abort
};

/// What a kernel callable sees: its arguments and whether it was told to stop.
class kernel_call {
 public:
  virtual ~kernel_call() = default;
  virtual unsigned arg_count() const noexcept = 0;
  /// Bytes of buffer argument `i`. Throws errc::argument_kind for a scalar.
  virtual std::span<std::byte> buffer(unsigned i) = 0;
  /// Raw bytes of scalar argument `i`. Throws errc::argument_kind for a buffer.
  virtual std::span<const std::byte> scalar_bytes(unsigned i) const = 0;
  /// True once an accepted abort or device shutdown asks a long kernel to stop.
  virtual bool stop_requested() const noexcept = 0;
  virtual std::uint64_t run_number() const noexcept = 0;
  /// Makes the run end in ERROR (e.g. its arguments do not fit its buffers).
  virtual void fail(std::string_view why) = 0;

  template <class T>
  std::span<T> buffer_as(unsigned i) {
    auto b = buffer(i);
    return {reinterpret_cast<T*>(b.data()), b.size() / sizeof(T)};
  }
  template <class T>
  T scalar(unsigned i) const {
    auto b = scalar_bytes(i);
    if (b.size() != sizeof(T))
      throw error(errc::argument_kind, "sim kernel: scalar " + std::to_string(i) + " has " +
                                           std::to_string(b.size()) + " bytes, read as " + std::to_string(sizeof(T)));
    T v;
    std::memcpy(&v, b.data(), sizeof(T));
    return v;
  }
};

using kernel_fn = std::function<void(kernel_call&)>;

struct kernel_def {
  std::string name;
  std::vector<backend::arg_desc> args;
  kernel_fn fn;
};

/// vadd(a, b, c, n: u32): c[i] = a[i] + b[i] over u32;
/// scale(in, out, factor: f32, n: u32): out[i] = in[i] * factor over f32;
/// checksum(in, out, n: u32): out[0] = FNV-1a 64 of the first n bytes of in;
/// matmul(a, b, c, m, n, k: u32): c[m x n] = a[m x k] * b[k x n] over f32, row-major;
/// noop(): nothing (dispatch-cost benchmarks);
/// late_marker(buf, expect: u64, marker: u64, hold_us: u32, late_us: u32):
/// a canary for lease checks. It fails (ERROR) unless every whole u64 of buf
/// holds `expect`, fills buf with `marker`, then holds the device for up to
/// hold_us. Asked to stop (an accepted abort), it waits late_us more and
/// writes `marker` again before ending in ABORT: the late write of a device
/// that finishes a burst after the host gave up on it. Memory the host wrote
/// or another run leased after the run's final state never sees that write
/// unless a lease ended early. Run to its end (not stopped), it also fails
/// if buf stopped holding `marker` meanwhile (someone wrote a leased range).
std::vector<kernel_def> builtin_kernels();

struct device_config {
  unsigned compute_units = 2;
  latency_model latency{};
  std::vector<kernel_def> kernels = builtin_kernels();
  std::vector<fault_rule> faults{};
  /// Decides a fault per run when set (after `faults`); for randomized tests.
  std::function<fault_rule(std::string_view kernel, std::uint64_t run_number)> fault_selector{};
  /// Offer an eventfd that becomes readable on completions (the reactor sleeps on it).
  bool event_fd = true;
  /// Accepted aborts that take longer than this (from the abort() call to its
  /// return) are counted in device_stats::long_aborts; 0 = not counted. Set
  /// it to the runtime's abort_grace to check that exactly the refused and
  /// overlong aborts were retained (tools/soak).
  std::chrono::nanoseconds long_abort_threshold{0};
  /// An idle compute unit (nothing queued) watches for the next submission
  /// this long before it sleeps; one unit at a time. A real device's command
  /// processor sees a doorbell with no host thread to wake; without the
  /// watch, a run submitted just after the unit fell asleep pays a futex
  /// wake-up and a thread switch. The watch spins on a host core, so it is
  /// off by default: on a host with no core to spare it slows whatever else
  /// spins there (xrtio's reactor-thread mode at L = 0, C = 1 lost more than
  /// half its throughput on two cores; docs/PERFORMANCE.md, "The simulated
  /// device's idle watch"). Counted in device_stats::idle_catches.
  std::chrono::nanoseconds idle_poll{0};
};

struct device_stats {
  /// Runs in state RUNNING now (executing, or hung by a fault): lets a test
  /// act on a run known to be on a compute unit rather than racing a sleep.
  std::uint64_t running = 0;
  std::uint64_t started = 0, completed = 0, failed = 0, aborted = 0, abort_refused = 0;
  std::uint64_t long_aborts = 0;  ///< accepted aborts longer than device_config::long_abort_threshold
  /// Times a compute unit woke up (its timed sleep ended, or a submission or
  /// a peer woke it): what the device's threads cost the host, per run.
  std::uint64_t wakeups = 0;
  /// Watches (device_config::idle_poll) that ended because work came, not
  /// because the window ran out: each one a sleep and a wake-up the device
  /// did without (one may cover several runs).
  std::uint64_t idle_catches = 0;
};

class device;

/// Opens a simulated device. Errors: errc::backend_failure (no eventfd),
/// errc::invalid_size (0 compute units, a scalar argument outside 1-8 bytes),
/// errc::too_many_arguments (a kernel with more than max_arguments).
std::shared_ptr<device> make_device(device_config config = {});

/// A context on a new simulated device.
xrtio::context open(device_config config = {}, std::optional<memory_budget> budget = std::nullopt);

/// The simulated device behind a context (sim::device_of): statistics,
/// faults added at run time, device loss.
class device : public backend::native_device {
 public:
  virtual device_stats stats() const = 0;
  virtual void add_fault(fault_rule rule) = 0;
  /// Simulates losing the device now.
  virtual void lose() = 0;
};

/// The simulated device of `ctx`. Errors: errc::not_supported when `ctx` is
/// empty or on another backend.
device& device_of(const xrtio::context& ctx);

}  // namespace xrtio::sim
