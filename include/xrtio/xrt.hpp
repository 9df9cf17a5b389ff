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
// no-op driver (see XRT-NOTES.md). The no-op device completes every run
// after a fixed delay without executing the kernel; it cannot refuse an
// abort, hang or time out, so those behaviours are tested on the simulator.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "xrtio/backend/backend.hpp"
#include "xrtio/context.hpp"
#include "xrtio/memory_budget.hpp"

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

/// The XRT device behind a context opened by open():
/// `dynamic_cast<xrt_backend::device*>(&ctx.native())`.
class device : public backend::native_device {
 public:
  virtual const xclbin_info& xclbin() const noexcept = 0;
  virtual unsigned index() const noexcept = 0;
  /// True when built against an XRT with xrt::hw_context (kernels are
  /// opened in a hardware context); false on XRT 2.13.
  virtual bool uses_hw_context() const noexcept = 0;
};

}  // namespace xrtio::xrt_backend
