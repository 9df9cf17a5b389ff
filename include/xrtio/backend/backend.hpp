// The backend seam: what a device must offer xrtio. The simulated device
// (backends/sim) and XRT (backends/xrt) implement it; nothing here knows
// about buffers' access tracking, budgets or the reactor.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "xrtio/run_state.hpp"

namespace xrtio::backend {

enum class sync_direction { to_device, from_device };

/// Allocation flags, in XRT's vocabulary.
enum class buffer_kind { normal, host_only, cacheable, device_only };

/// A native buffer object. Views (sub()) refer into their parent's memory;
/// xrtio keeps the parent alive for as long as any view (memory layer).
class native_buffer {
 public:
  virtual ~native_buffer() = default;
  virtual std::size_t size() const noexcept = 0;
  /// Host mapping of this buffer (its first byte), or nullptr if none.
  virtual std::byte* map() = 0;
  virtual void sync(sync_direction dir, std::size_t size, std::size_t offset) = 0;
  /// A view of [offset, offset + size) of this buffer.
  virtual std::unique_ptr<native_buffer> sub(std::size_t size, std::size_t offset) = 0;
  /// Device address, 0 if unknown.
  virtual std::uint64_t address() const noexcept { return 0; }
  /// map() is ordinary memory of this process that stays mapped, the same
  /// pages, as long as this object: a file ring may then pin it as a fixed
  /// buffer (IORING_OP_READ_FIXED) until the object is destroyed.
  virtual bool pinnable_host_memory() const noexcept { return false; }
};

enum class arg_kind { buffer, scalar };

struct arg_desc {
  std::string name;
  arg_kind kind = arg_kind::buffer;
  std::size_t size = 0;  ///< bytes of a scalar; 0 for buffers
  int group_id = 0;      ///< memory bank (buffers)
};

/// The outcome of a blocking abort.
enum class abort_outcome {
  done,     ///< the run reached a final state (abort or completed before it)
  refused,  ///< the device refused: the run may still be touching its memory
};

/// One command a kernel runs. Lifecycle: set_arg* → start → poll state()
/// until final → (re)set_arg* → start ... A native run must never be destroyed
/// while in flight (invariant 2): the layers above guarantee it.
class native_run {
 public:
  virtual ~native_run() = default;
  virtual void set_arg(unsigned index, native_buffer& buffer) = 0;
  virtual void set_arg(unsigned index, const void* value, std::size_t size) = 0;
  /// Submits the command. Throws xrtio::error on refusal.
  virtual void start() = 0;
  /// Cheap poll: no system call on the simulated device or the NPU.
  virtual run_state state() noexcept = 0;
  /// Blocks up to `timeout` to refresh the state (the fallback for devices
  /// where state() alone does not advance); returns the state seen.
  virtual run_state wait_for(std::chrono::nanoseconds timeout) = 0;
  /// Blocking abort. Never called on the reactor thread (invariant 4).
  virtual abort_outcome abort() = 0;
  /// The error a final state stands for; backends may refine it (device lost).
  virtual std::error_code final_error(run_state s) const noexcept { return state_error(s); }
  /// When the device finished the run, if the backend knows (sim does);
  /// otherwise a default-constructed time point.
  virtual std::chrono::steady_clock::time_point device_completed_at() const noexcept { return {}; }
  /// Returns the run to its kernel's pool or deletes it. Only after a final state.
  virtual void release() noexcept { delete this; }

  /// Up to two addresses that state() reads beyond this object (null: none),
  /// set once by the backend: a reactor polling many runs fetches them, and
  /// this object, a run or two ahead of its poll, so that the misses overlap
  /// (docs/PERFORMANCE.md, "Fetching ahead in the scan").
  const void* state_memory(std::size_t i) const noexcept { return state_memory_[i]; }
  static constexpr std::size_t state_memory_count = 2;

 protected:
  void set_state_memory(const void* first, const void* second = nullptr) noexcept {
    state_memory_[0] = first;
    state_memory_[1] = second;
  }

 private:
  const void* state_memory_[state_memory_count] = {};
};

struct native_run_deleter {
  void operator()(native_run* r) const noexcept { r->release(); }
};
using native_run_ptr = std::unique_ptr<native_run, native_run_deleter>;

class native_kernel {
 public:
  virtual ~native_kernel() = default;
  virtual const std::string& name() const noexcept = 0;
  virtual const std::vector<arg_desc>& args() const noexcept = 0;
  /// A run object ready for arguments; pooled where the backend can.
  virtual native_run_ptr make_run() = 0;
};

/// A device with one loaded program (xclbin or simulated kernel set).
class native_device {
 public:
  virtual ~native_device() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<native_buffer> alloc(std::size_t size, buffer_kind kind, int group_id) = 0;
  /// Wraps caller-owned host memory (no copy). See xrtio::context::import_user_memory.
  virtual std::unique_ptr<native_buffer> import_user_memory(void* ptr, std::size_t size) = 0;
  /// Wraps an exported dma-buf (no copy).
  virtual std::unique_ptr<native_buffer> import_dmabuf(int fd, std::size_t size) = 0;
  /// Throws errc::unknown_kernel naming the kernel and what is loaded.
  virtual std::shared_ptr<native_kernel> kernel(const std::string& name) = 0;
  virtual std::vector<std::string> kernel_names() const = 0;
  /// A file descriptor that becomes readable when some run reaches a final
  /// state, or -1. The reactor sleeps on it instead of polling (docs/DESIGN.md, "The reactor").
  virtual int event_fd() const noexcept { return -1; }
  /// Drains the event fd after it became readable.
  virtual void consume_event() noexcept {}
  /// A count that grows whenever a run of this device reaches a final state
  /// (from 1), or 0 when unknown. Each reactor remembers the value it last
  /// saw, so several runtimes with runs on one device each see every change
  /// (a test-and-clear flag would let one runtime take another's news and
  /// leave its runs unscanned). Unchanged lets the reactor skip scanning the
  /// device's runs while it spins. A final state stored before the count
  /// grew must be visible to a caller that reads the new count (acquire/
  /// release). Default: 0 (unknown: scan).
  virtual std::uint64_t completion_count() const noexcept { return 0; }
};

}  // namespace xrtio::backend
