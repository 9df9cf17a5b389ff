// The XRT backend's internal types: its native buffer, run, kernel and
// device, as the files that implement them (xrt_buffer.cpp, xrt_run.cpp,
// xrt_kernel.cpp, xrt_device.cpp) and the public functions share them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "noop_guard.hpp"
#include "xclbin_reader.hpp"
#include "xrt_api.hpp"
#include "backends/run_pool.hpp"
#include "xrtio/xrt.hpp"

namespace xrtio::xrt_backend::detail {

/// group_id_of's "not known" (a dma-buf import, another backend's buffer).
inline constexpr int unknown_group = -1;
/// A memory group id names its bank in bits 0-15 (bits 16-23: the xclbin slot).
inline constexpr int group_bank_mask = 0xffff;

inline int bank_of(int group_id) noexcept { return group_id & group_bank_mask; }

inline std::string quoted(const std::string& s) { return "'" + s + "'"; }

// ---- buffers (xrt_buffer.cpp) ---------------------------------------------------

// Views are made from the root bo with an absolute offset: XRT 2.13 makes a
// sub-bo of a sub-bo with the right host mapping but a device address
// computed from the root's address plus the *relative* offset, so a kernel
// would be handed the wrong device address (docs/DESIGN.md, "Pitfalls").
class xrt_buffer final : public backend::native_buffer {
 public:
  // `group`: the memory group it was allocated in, unknown_group if unknown (group_id_of).
  // `noop`: the device's noop_guard (nullptr but on the no-op driver).
  xrt_buffer(xrt::bo bo, std::size_t size, unsigned device_index, int group, noop_guard* noop)
      : bo_(std::move(bo)), root_(bo_), size_(size), device_index_(device_index), group_(group), noop_(noop) {}
  xrt_buffer(xrt::bo bo, xrt::bo root, std::size_t root_offset, std::size_t size, unsigned device_index, int group,
             noop_guard* noop)
      : bo_(std::move(bo)),
        root_(std::move(root)),
        root_offset_(root_offset),
        size_(size),
        device_index_(device_index),
        group_(group),
        noop_(noop) {}
  ~xrt_buffer() override;

  std::size_t size() const noexcept override { return size_; }
  std::byte* map() override;
  void sync(backend::sync_direction dir, std::size_t size, std::size_t offset) override;
  std::unique_ptr<backend::native_buffer> sub(std::size_t size, std::size_t offset) override;
  std::uint64_t address() const noexcept override;

  const xrt::bo& bo() const noexcept { return bo_; }
  /// Unique in the process for its lifetime (never reused, unlike the
  /// object's address): what a pooled run compares to skip rebinding the
  /// same buffer (xrt_run::set_arg).
  std::uint64_t serial() const noexcept { return serial_; }
  unsigned device_index() const noexcept { return device_index_; }
  int group() const noexcept { return group_; }

 private:
  void check(std::size_t size, std::size_t offset, const char* what) const;

  static std::uint64_t next_serial() noexcept;

  const std::uint64_t serial_ = next_serial();
  xrt::bo bo_;
  xrt::bo root_;  // the owned or imported allocation this view is of (bo_ itself for a root)
  std::size_t root_offset_ = 0;
  std::size_t size_;
  unsigned device_index_;
  int group_;
  noop_guard* noop_;
  std::once_flag map_once_;
  std::byte* map_ = nullptr;
};

// ---- runs (xrt_run.cpp) ------------------------------------------------------------

class xrt_kernel;

class xrt_run final : public backend::native_run {
 public:
  // Takes `r` only once nothing else can throw (the caller still owns it if this throws).
  xrt_run(xrt_kernel* k, xrt::run&& r);
  ~xrt_run() override;

  void set_arg(unsigned index, backend::native_buffer& buffer) override;
  void set_arg(unsigned index, const void* value, std::size_t size) override;
  void start() override;
  run_state state() noexcept override;
  run_state wait_for(std::chrono::nanoseconds timeout) override;
  backend::abort_outcome abort() override;
  void release() noexcept override;

  xrt::run& native() noexcept { return run_; }

  xrt_run* pool_next = nullptr;  // run_pool's link while idle; keep_forever's (xrt_run.cpp) once kept

 private:
  [[noreturn]] void fail(errc code, unsigned index, const std::string& what) const;
  // Index in range and of `kind`; fails with errc::argument_count / argument_kind.
  const backend::arg_desc& expect(unsigned index, backend::arg_kind kind) const;

  xrt_kernel* kernel_;
  noop_guard* noop_;                    // the kernel's
  const ert_packet* packet_ = nullptr;  // run_'s command (for noop_guard::submitted on the no-op driver)
  std::vector<bool> set_;               // arguments bound since the last release
  // Per argument, the serial of the buffer XRT last bound there (0: none,
  // a scalar, or a bind that failed). The command keeps its arguments
  // across starts, so a pooled run given the same buffer again skips XRT's
  // set_arg (docs/DESIGN.md, "XRT facts the code relies on").
  std::vector<std::uint64_t> bound_;
  xrt::run run_;
  bool started_ = false;   // start() succeeded since the last release
  std::atomic<run_state> last_{run_state::new_};
};

// ---- kernels (xrt_kernel.cpp) ------------------------------------------------------

class xrt_device_impl;

class xrt_kernel final : public backend::native_kernel {
 public:
  // Takes `k` only once nothing else can throw (the caller still owns it if
  // this throws, and destroys it as ~xrt_kernel would: noop_guard.hpp).
  xrt_kernel(std::shared_ptr<xrt_device_impl> dev, xrt::kernel&& k, kernel_info info, std::size_t pool_cap);
  ~xrt_kernel() override;
  const std::string& name() const noexcept override { return info_.name; }
  const std::vector<backend::arg_desc>& args() const noexcept override { return args_; }
  backend::native_run_ptr make_run() override;
  // Back into the pool (if it has room) or deleted; `r` is final (release() checked).
  void recycle(xrt_run* r) noexcept;
  unsigned device_index() const noexcept;
  noop_guard* noop() const noexcept { return noop_; }

 private:
  static backend::arg_desc describe(const xrt::kernel& k, const arg_info& a);

  std::shared_ptr<xrt_device_impl> device_;  // keeps the device (and its program) alive
  noop_guard* noop_;                         // the device's
  xrt::kernel kernel_;
  kernel_info info_;
  std::vector<backend::arg_desc> args_;
  xrtio::detail::run_pool<xrt_run> pool_;
};

// ---- the device (xrt_device.cpp) ---------------------------------------------------

class xrt_device_impl final : public device, public std::enable_shared_from_this<xrt_device_impl> {
 public:
  xrt_device_impl(const open_options& o, loaded_xclbin program);

  std::string name() const override;
  std::unique_ptr<backend::native_buffer> alloc(std::size_t size, backend::buffer_kind kind, int group_id) override;
  std::unique_ptr<backend::native_buffer> import_user_memory(void* ptr, std::size_t size) override;
  std::unique_ptr<backend::native_buffer> import_dmabuf(int fd, std::size_t size) override;
  std::shared_ptr<backend::native_kernel> kernel(const std::string& name) override;
  std::vector<std::string> kernel_names() const override { return visible_; }

  const xclbin_info& xclbin() const noexcept override { return program_.info; }
  unsigned index() const noexcept override { return options_.device_index; }
  bool uses_hw_context() const noexcept override { return XRTIO_XRT_HW_CONTEXT != 0; }
  const xrt::device& native() const noexcept { return device_; }
  /// The guard of XRT's no-op driver, nullptr on any other (noop_guard.hpp).
  noop_guard* noop() const noexcept { return noop_; }

 private:
  // The constructor's steps, in order.
  void open_device();
  void load_program();
  void select_kernels();
  void read_name();
  void choose_default_group();

  xrt::kernel open_kernel(const std::string& name);
  // `bo` in an xrt_buffer; a bo that cannot be wrapped is freed as ~xrt_buffer would.
  std::unique_ptr<backend::native_buffer> wrap(xrt::bo&& bo, std::size_t size, int group);
  std::string all_names() const;
  std::string visible_names() const;
  void check_group(int group_id) const;

  open_options options_;
  loaded_xclbin program_;
  xrt::device device_;
  noop_guard* noop_ = nullptr;  // set by open_device()
  xrt::uuid uuid_;
#if XRTIO_XRT_HW_CONTEXT
  xrt::hw_context hw_context_;
#endif
  std::string name_;
  std::vector<std::string> visible_;
  int default_group_ = -1;  // chosen by choose_default_group()
  std::mutex mutex_;
  // Weak: kernels own the device (shared_ptr), not the reverse. The context
  // caches the strong references.
  std::map<std::string, std::weak_ptr<xrt_kernel>> kernels_;
};

}  // namespace xrtio::xrt_backend::detail
