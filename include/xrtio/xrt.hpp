// The XRT backend: xrtio's backend seam over XRT's C++ API (xrt::device,
// xrt::xclbin, xrt::hw_context where present, xrt::kernel, xrt::bo, xrt::run).
//
// Compiled when CMake finds XRT (XRTIO_HAS_XRT is then defined). Works with
// Debian 12's XRT 2.13 (xrt::device::load_xclbin + xrt::kernel(device, uuid,
// name)) and, selected by header detection rather than version numbers, with
// current XRT (xrt::device::register_xclbin + xrt::hw_context +
// xrt::kernel(hw_context, name)). This header does not include XRT's headers.
//
// Testing without hardware: use_noop_device() points XRT at its built-in
// no-op driver (docs/DESIGN.md, "Testing without hardware"). The no-op device completes every run
// after a fixed delay without executing the kernel; it cannot refuse an
// abort, hang or time out, so those behaviours are tested on the simulator.
//
// Ryzen AI NPU kernels (mlir-aie / IRON xclbins) take their arguments in a
// fixed layout; load_npu_instructions, async_run_npu, start_npu and
// prepare_npu below pass it for the caller.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/post.hpp>

#include "xrtio/async_run.hpp"
#include "xrtio/backend/backend.hpp"
#include "xrtio/context.hpp"
#include "xrtio/error.hpp"
#include "xrtio/memory_budget.hpp"
#include "xrtio/prepared.hpp"
#include "xrtio/run.hpp"

namespace xrtio::xrt_backend {

struct open_options {
  /// XRT device index (xrt::device(index)).
  unsigned device_index = 0;
  /// The program to load. Read and checked by xrtio before XRT sees it.
  std::string xclbin_path;
  /// When set, only the kernel of exactly this name is visible in the
  /// context (and it must exist: errc::unknown_kernel otherwise).
  std::optional<std::string> kernel_filter = std::nullopt;
  /// Finished xrt::run objects kept per kernel for reuse (creating an
  /// xrt::run allocates a command buffer, and several heap objects: measured
  /// ~5.6 allocations per run at 4096 in flight with a pool of 64). Sized for
  /// the deepest concurrency expected; each pooled run keeps its command
  /// buffer. 0 disables pooling.
  std::size_t run_pool_size = 4096;
};

/// One kernel argument as the xclbin declares it.
struct arg_info {
  unsigned index = 0;
  std::string name;
  backend::arg_kind kind = backend::arg_kind::buffer;
  std::size_t size = 0;        ///< bytes in the kernel's register map (8 for a pointer)
  std::string type;            ///< host type, e.g. "int*", "uint", "float"
  std::string port;            ///< e.g. "M_AXI_GMEM", "S_AXI_CONTROL"
  std::uint64_t offset = 0;    ///< register offset
  int group_id = -1;           ///< first connected memory bank; -1 for scalars / unconnected
  std::vector<int> banks;      ///< every memory bank connected to this argument
};

struct cu_info {
  std::string name;            ///< XRT's compute-unit name, "kernel:instance", e.g. "vadd:vadd_1"
  std::uint64_t base_address = 0;
};

struct kernel_info {
  std::string name;
  std::vector<cu_info> compute_units;
  std::vector<arg_info> args;  ///< ordered by index, 0..n-1
};

struct bank_info {
  int index = 0;
  std::string tag;             ///< e.g. "bank0", "DDR[0]", "HOST[0]"
  std::string type;            ///< "DDR4", "HBM", "HOST", ...
  bool used = false;
  std::uint64_t base_address = 0;
  std::uint64_t size_bytes = 0;
};

struct xclbin_info {
  std::string path;
  std::string uuid;            ///< canonical text form
  std::string platform;        ///< the header's platform VBNV
  std::size_t file_size = 0;
  std::vector<kernel_info> kernels;
  std::vector<bank_info> banks;  ///< MEM_TOPOLOGY, index order
};

/// Reads and checks an xclbin without opening a device: structure (magic,
/// lengths, section bounds, indices), then XRT's own parser.
/// Errors: errc::invalid_xclbin naming the path and what is wrong (missing,
/// unreadable, truncated, corrupt, rejected by XRT).
xclbin_info inspect_xclbin(const std::string& path);

/// Opens device `options.device_index`, loads `options.xclbin_path` on it
/// and returns a context over it. Buffers are allocated on the device (not
/// a hardware context), so kernels of another context on the same device
/// may use them (run_options::cross_context).
/// Errors: errc::invalid_xclbin (missing, truncated, corrupt or rejected
/// xclbin, naming the path), errc::unknown_kernel (kernel_filter names no
/// kernel of the xclbin; the message lists them), errc::backend_failure
/// (no such device, XRT refused to load the xclbin).
xrtio::context open(const open_options& options, std::optional<memory_budget> budget = std::nullopt);

/// Points XRT at its built-in no-op device. Must run before the first XRT
/// device is opened in this process (XRT caches its configuration then):
///  - sets XCL_EMULATION_MODE=noop;
///  - sets XILINX_XRT to a fresh temporary directory whose
///    lib/libxrt_noop.so.2 is a symlink to the installed no-op driver
///    (/usr/lib/x86_64-linux-gnu/libxrt_noop.so.2 on Debian, or
///    $XILINX_XRT/lib, /opt/xilinx/xrt/lib); the directory is removed at exit;
///  - when XRT_INI_PATH is unset, points it at an empty xrt.ini in that
///    directory, so a stray xrt.ini beside the executable or in the working
///    directory cannot change the device's behaviour;
///  - xrt::ini::set("Runtime.noop_completion_delay_us", completion_delay).
/// Repeated calls with the same delay do nothing.
/// Errors: errc::invalid_size (negative delay), errc::not_supported (no
/// no-op driver installed, or a different delay after XRT already read its
/// configuration), errc::backend_failure (temporary directory, symlink).
void use_noop_device(std::chrono::microseconds completion_delay);

/// The devices XRT sees, one line each: "<index>: <name> [<bdf>]".
/// Emulation devices (XCL_EMULATION_MODE) are not enumerated by XRT, and
/// the no-op device answers to any index: then only index 0 is listed.
/// Never throws for a missing driver (returns an empty list).
std::vector<std::string> list_devices();

/// The XRT device behind a context opened by open() (xrt_backend::device_of;
/// its xrt::device: xrtio/xrt_native.hpp).
class device : public backend::native_device {
 public:
  virtual const xclbin_info& xclbin() const noexcept = 0;
  virtual unsigned index() const noexcept = 0;
  /// True when built against an XRT with xrt::hw_context (kernels are
  /// opened in a hardware context); false on XRT 2.13.
  virtual bool uses_hw_context() const noexcept = 0;
};

/// The XRT device of `ctx`. Errors: errc::not_supported when `ctx` is empty
/// or on another backend.
device& device_of(const xrtio::context& ctx);

/// The memory group (bank in bits 0-15, xclbin slot in bits 16-23) an XRT
/// buffer was allocated in: its root's for a view, the default group (the
/// first bank in use) for imported user memory. -1 when unknown: a dma-buf
/// import, a buffer of another backend, an empty handle.
int group_id_of(const xrtio::buffer& b) noexcept;

/// Diagnostics: the compute unit's register map as XRT wrote it into the
/// start command of `r` (one 32-bit word per 4 bytes of register space, from
/// offset 0; kernel arguments sit at the offsets xclbin_info lists), i.e.
/// the arguments the kernel gets, or got at its last start. Empty when `r`
/// is not an XRT run or its command is not an ERT start-CU packet (NPU
/// commands are not).
std::vector<std::uint32_t> command_registers(backend::native_run& r);

// ---- Ryzen AI NPU calling convention ----------------------------------------
//
// mlir-aie / IRON xclbins have one kernel (usually "MLIR_AIE") called as
//   (std::uint64_t opcode = 3, instruction bo, std::uint32_t instruction words,
//    data bo 0, data bo 1, ...)
// with the instruction buffer allocated cacheable on kernel.group_id(1) and
// data buffer i on kernel.group_id(3 + i) (host_only on the NPU):
//
//   auto k = ctx.kernel("MLIR_AIE");
//   auto instr = xrtio::xrt_backend::load_npu_instructions(k, words);   // once
//   auto a = ctx.alloc(n, {.kind = buffer_kind::host_only, .group_id = k.group_id(3)});
//   auto b = ctx.alloc(n, {.kind = buffer_kind::host_only, .group_id = k.group_id(4)});
//   auto [ec, r] = co_await xrtio::xrt_backend::async_run_npu(k, instr, xrtio::in(a), xrtio::out(b),
//                                                             asio::as_tuple(asio::use_awaitable));
//
// The instruction buffer is passed read-only (xrtio::in): any number of runs
// may share one. Nothing here needs xrt::hw_context; it works on XRT 2.13
// (with an xclbin of that layout, e.g. `xrtio-mkxclbin --npu`) and on the
// simulator.

/// The opcode mlir-aie host code passes as argument 0 ("transaction").
inline constexpr std::uint64_t npu_opcode = 3;

/// An NPU kernel's instruction stream, in device memory.
struct npu_instructions {
  xrtio::buffer buffer;     ///< holds at least `words` 32-bit words
  std::uint32_t words = 0;  ///< passed as argument 2
};

/// Allocates `k`'s instruction buffer (buffer_kind::cacheable, group
/// k.group_id(1), charged to the context's budget), copies `words` into it
/// and syncs it to the device.
/// Errors: errc::invalid_size (no words, or more than 2^32 - 1),
/// errc::argument_kind (`k` does not have the NPU argument layout; the
/// message names the first argument that differs), errc::budget_exceeded,
/// errc::out_of_range (k.group_id(1) names no bank in use),
/// errc::backend_failure.
npu_instructions load_npu_instructions(const xrtio::kernel& k, std::span<const std::uint32_t> words);

/// Checks an NPU run before it is started: `k`'s argument layout, the
/// instruction buffer (present, `words` > 0 and fitting in it), and that the
/// instruction buffer and each data buffer lie in the memory group of their
/// argument (compared by bank; buffers whose group is unknown, see
/// group_id_of, are not checked). The argument count is left to the run.
/// Errors: errc::argument_kind (layout; a buffer in another group than its
/// argument's, naming both), errc::invalid_size (no instruction buffer or 0
/// words), errc::out_of_range (more words than the buffer holds).
void check_npu_run(const xrtio::kernel& k, const npu_instructions& instr,
                   std::span<const xrtio::buffer* const> data);

namespace detail {
template <class T>
const xrtio::buffer* npu_data_buffer(const T& a) noexcept {
  using U = std::remove_cvref_t<T>;
  static_assert(std::is_same_v<U, xrtio::buffer> || std::is_same_v<U, xrtio::buffer_arg>,
                "NPU data arguments are buffers or in()/out()/inout() buffers");
  if constexpr (std::is_same_v<U, xrtio::buffer>) return &a;
  else return &a.buffer;
}

// Every argument but run_options, as buffer pointers, for check_npu_run.
template <class... Args>
void check_npu_args(const xrtio::kernel& k, const npu_instructions& instr, const Args&... args) {
  std::array<const xrtio::buffer*, sizeof...(Args)> all{};
  std::size_t n = 0;
  [[maybe_unused]] auto one = [&](const auto& a) {
    if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(a)>, run_options>) all[n++] = npu_data_buffer(a);
  };
  (one(args), ...);
  check_npu_run(k, instr, std::span<const xrtio::buffer* const>(all.data(), n));
}

struct initiate_npu_run {
  template <class Handler, class... Args>
  void operator()(Handler&& h, const xrtio::kernel& k, const npu_instructions& instr, const run_options& o,
                  Args&&... data) const {
    try {
      check_npu_args(k, instr, data...);
    } catch (const xrtio::error& e) {
      // Completes like async_run's own argument errors: through the
      // handler's executor, never inside the initiating function.
      auto ex = asio::get_associated_executor(h);
      asio::post(ex, [h = std::forward<Handler>(h), ec = e.code()]() mutable { std::move(h)(ec, run_result{}); });
      return;
    }
    xrtio::async_run(k, npu_opcode, xrtio::in(instr.buffer), instr.words, std::forward<Args>(data)..., o,
                     std::forward<Handler>(h));
  }
};

}  // namespace detail

/// async_run for an NPU kernel: runs `k` with (npu_opcode, in(instr.buffer),
/// instr.words, data...), optionally followed by run_options, completing
/// through the last argument (a completion token) with
/// `void(std::error_code, run_result)`. `data` are the data buffers, plain
/// or in()/out()/inout().
/// Error codes: those of check_npu_run, then those of xrtio::async_run.
template <class... Ts>
auto async_run_npu(const xrtio::kernel& k, const npu_instructions& instr, Ts&&... ts) {
  return xrtio::detail::split_options_and_token(
      [&](const run_options& o, auto&& token, auto&&... data) {
        return asio::async_initiate<decltype(token), void(std::error_code, run_result)>(
            detail::initiate_npu_run{}, token, k, instr, o, std::forward<decltype(data)>(data)...);
      },
      std::forward<Ts>(ts)...);
}

/// xrtio::start for an NPU kernel: (npu_opcode, in(instr.buffer),
/// instr.words, data...), optionally followed by run_options.
/// Throws what check_npu_run and xrtio::start throw.
template <class... Args>
run_handle start_npu(const xrtio::kernel& k, const npu_instructions& instr, Args&&... data) {
  detail::check_npu_args(k, instr, data...);
  return xrtio::start(k, npu_opcode, xrtio::in(instr.buffer), instr.words, std::forward<Args>(data)...);
}

/// xrtio::prepare for an NPU kernel (for async_execute / async_run_chain).
/// Throws what check_npu_run and xrtio::prepare throw.
template <class... Args>
prepared_run prepare_npu(const xrtio::kernel& k, const npu_instructions& instr, Args&&... data) {
  detail::check_npu_args(k, instr, data...);
  return xrtio::prepare(k, npu_opcode, xrtio::in(instr.buffer), instr.words, std::forward<Args>(data)...);
}

}  // namespace xrtio::xrt_backend
