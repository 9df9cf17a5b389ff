// The XRT device (xrt_device_impl in xrt_types.hpp) behind xrt_backend::open:
// loads the checked xclbin, allocates and imports buffers, opens kernels; and
// list_devices. Every XRT exception becomes an xrtio::error naming the input.
// On XRT's no-op driver, buffer allocations and imports go through the
// noop_guard (docs/DESIGN.md, "The no-op driver's buffer map").
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <experimental/xrt_system.h>

#include "monitor_settle.hpp"
#include "xrt_fault_hook.hpp"
#include "xrt_types.hpp"
#include "xrtio/error.hpp"
#include "xrtio/xrt_native.hpp"

namespace xrtio::xrt_backend {
namespace detail {
namespace {

std::string pointer_text(const void* p) {
  constexpr std::size_t text_size = 32;  // "%p" of a 64-bit pointer ("0x" and 16 digits), with room
  char buf[text_size];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

xrt::bo::flags bo_flags(backend::buffer_kind kind) {
  xrt::bo::flags f = xrt::bo::flags::normal;
  switch (kind) {
    case backend::buffer_kind::normal: f = xrt::bo::flags::normal; break;
    case backend::buffer_kind::host_only: f = xrt::bo::flags::host_only; break;
    case backend::buffer_kind::cacheable: f = xrt::bo::flags::cacheable; break;
    case backend::buffer_kind::device_only: f = xrt::bo::flags::device_only; break;
  }
  return f;
}

}  // namespace

// ---- opening ---------------------------------------------------------------------

xrt_device_impl::xrt_device_impl(const open_options& o, loaded_xclbin program)
    : options_(o), program_(std::move(program)) {
  open_device();
  load_program();
  select_kernels();
  read_name();
  choose_default_group();
}

void xrt_device_impl::open_device() {
  try {
    device_ = xrt::device(options_.device_index);
  } catch (const std::exception& e) {
    throw error(errc::backend_failure,
                "xrt: cannot open device " + std::to_string(options_.device_index) + ": " + e.what());
  }
  noop_ = noop_guard::detect();  // XRT has loaded its driver now
}

void xrt_device_impl::load_program() {
  try {
#if XRTIO_XRT_HW_CONTEXT
    uuid_ = device_.register_xclbin(program_.xclbin);
    hw_context_ = xrt::hw_context(device_, uuid_);
#else
    uuid_ = device_.load_xclbin(program_.xclbin);
#endif
  } catch (const std::exception& e) {
    throw error(errc::backend_failure, "xrt: device " + std::to_string(options_.device_index) + " refused xclbin " +
                                           quoted(options_.xclbin_path) + ": " + e.what());
  }
}

void xrt_device_impl::select_kernels() {
  const auto& filter = options_.kernel_filter;
  for (auto& k : program_.info.kernels)
    if (!filter || *filter == k.name) visible_.push_back(k.name);
  if (filter && visible_.empty())
    throw error(errc::unknown_kernel, "xrt: kernel_filter " + quoted(*filter) + " names no kernel of " +
                                          quoted(options_.xclbin_path) + " (it has: " + all_names() + ")");
}

void xrt_device_impl::read_name() {
  try {
    name_ = device_.get_info<xrt::info::device::name>();
  } catch (const std::exception&) {
    name_ = "device";  // the no-op device answers no queries
  }
}

// The first bank in use, for imported user memory; group 0 if none is.
void xrt_device_impl::choose_default_group() {
  for (auto& b : program_.info.banks)
    if (b.used && default_group_ < 0) default_group_ = b.index;
  if (default_group_ < 0) default_group_ = 0;
}

std::string xrt_device_impl::name() const {
  std::string s = "xrt " + std::to_string(options_.device_index) + ": " + name_;
  if (const char* emu = std::getenv("XCL_EMULATION_MODE")) s += std::string(" [emulation: ") + emu + "]";
  return s + ", xclbin " + options_.xclbin_path + " (" + program_.info.uuid + ")";
}

// ---- buffers ---------------------------------------------------------------------

std::unique_ptr<backend::native_buffer> xrt_device_impl::alloc(std::size_t size, backend::buffer_kind kind,
                                                               int group_id) {
  check_group(group_id);
  const xrt::bo::flags f = bo_flags(kind);
  try {
    before_xrt_call(xrt_call::bo_alloc, size);
    xrt::bo bo;
    {
      auto held = noop_lock(noop_);
      // On the device, not a hardware context: cross-context runs work.
      bo = xrt::bo(device_, size, f, static_cast<xrt::memory_group>(group_id));
    }
    return wrap(std::move(bo), size, group_id);
  } catch (const std::exception& e) {
    throw error(errc::backend_failure, "xrt: allocating " + std::to_string(size) + " bytes in group " +
                                           std::to_string(group_id) + ": " + e.what());
  }
}

std::unique_ptr<backend::native_buffer> xrt_device_impl::import_user_memory(void* ptr, std::size_t size) {
  // XRT requires page-aligned user memory; say so instead of EINVAL.
  auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  if (reinterpret_cast<std::uintptr_t>(ptr) % page != 0)
    throw error(errc::misaligned, "xrt: user memory at " + pointer_text(ptr) + " is not aligned to the " +
                                      std::to_string(page) + "-byte page XRT requires");
  try {
    before_xrt_call(xrt_call::bo_import, size);
    xrt::bo bo;
    {
      auto held = noop_lock(noop_);
      bo = xrt::bo(device_, ptr, size, static_cast<xrt::memory_group>(default_group_));
    }
    return wrap(std::move(bo), size, default_group_);
  } catch (const std::exception& e) {
    throw error(errc::backend_failure, "xrt: importing " + std::to_string(size) + " bytes of user memory at " +
                                           pointer_text(ptr) + ": " + e.what());
  }
}

std::unique_ptr<backend::native_buffer> xrt_device_impl::import_dmabuf(int fd, std::size_t size) {
  // XRT 2.13 has no device::import_bo; xrt::bo(device, export handle)
  // imports a dma-buf fd (on Linux the export handle is the fd).
  // The bo is an xrt_buffer from the start: every way out frees it as
  // ~xrt_buffer does (through the noop_guard on the no-op driver).
  std::unique_ptr<backend::native_buffer> whole;
  std::size_t have = 0;
  try {
    xrt::bo bo;
    {
      auto held = noop_lock(noop_);
      bo = xrt::bo(device_, static_cast<xclBufferExportHandle>(fd));
    }
    try {
      have = bo.size();
    } catch (const std::exception&) {
    }
    // The group of an imported dma-buf is not known.
    whole = wrap(std::move(bo), have, unknown_group);
  } catch (const std::exception& e) {
    throw error(errc::backend_failure, "xrt: importing dma-buf fd " + std::to_string(fd) + ": " + e.what());
  }
  if (have < size)
    throw error(errc::out_of_range, "xrt: dma-buf fd " + std::to_string(fd) + " has " + std::to_string(have) +
                                        " bytes, " + std::to_string(size) + " requested");
  if (have == size) return whole;
  try {
    return whole->sub(size, 0);
  } catch (const std::exception& e) {
    throw error(errc::backend_failure, "xrt: dma-buf fd " + std::to_string(fd) + " view: " + e.what());
  }
}

std::unique_ptr<backend::native_buffer> xrt_device_impl::wrap(xrt::bo&& bo, std::size_t size, int group) {
  try {
    return std::make_unique<xrt_buffer>(std::move(bo), size, options_.device_index, group, noop_);
  } catch (...) {
    if (noop_) noop_->retire(std::move(bo));  // still ours: the buffer was not made
    throw;
  }
}

// XRT 2.13 does not check the bank on every driver (the no-op device takes
// any), so a typo would silently allocate elsewhere (docs/DESIGN.md,
// "Pitfalls": the group id is the bank plus the xclbin slot).
void xrt_device_impl::check_group(int group_id) const {
  if (XRTIO_XRT_HW_CONTEXT) return;  // current XRT checks against its hardware context
  const auto& banks = program_.info.banks;
  if (banks.empty()) return;
  int bank = bank_of(group_id);
  auto it = std::find_if(banks.begin(), banks.end(), [&](auto& b) { return b.index == bank; });
  if (group_id < 0 || it == banks.end() || !it->used) {
    std::string have;
    for (auto& b : banks)
      if (b.used) have += (have.empty() ? "" : ", ") + std::to_string(b.index) + " (" + b.tag + ")";
    throw error(errc::out_of_range, "xrt: group id " + std::to_string(group_id) + " names memory bank " +
                                        std::to_string(bank) + ", which " + quoted(options_.xclbin_path) +
                                        " does not have in use (banks: " + have + ")");
  }
}

// ---- kernels ---------------------------------------------------------------------

std::shared_ptr<backend::native_kernel> xrt_device_impl::kernel(const std::string& name) {
  std::lock_guard lock(mutex_);
  if (auto it = kernels_.find(name); it != kernels_.end())
    if (auto k = it->second.lock()) return k;
  if (std::find(visible_.begin(), visible_.end(), name) == visible_.end())
    throw error(errc::unknown_kernel, "xrt: no kernel " + quoted(name) + " in " + quoted(options_.xclbin_path) +
                                          " (loaded: " + visible_names() + ")");
  const kernel_info* info = nullptr;
  for (auto& k : program_.info.kernels)
    if (k.name == name) info = &k;
#if XRTIO_XRT_EXIT_MAY_LOSE_MONITOR
  // The first kernel on a device starts XRT's command monitor for it; an
  // exit before that thread first sleeps can hang (monitor_settle.hpp).
  // XRT starts it before the steps of opening that can throw (the compute
  // unit's context), so a failed open waits too: a program that gets the
  // error may exit at once. A quarter second bounds the wait when some new
  // thread never sleeps (say, one of the program's own, started meanwhile).
  auto before = process_threads();
  xrt::kernel k;
  try {
    k = open_kernel(name);
  } catch (...) {
    (void)settle_new_threads(before, std::chrono::milliseconds(250));
    throw;
  }
  (void)settle_new_threads(before, std::chrono::milliseconds(250));
#else
  xrt::kernel k = open_kernel(name);
#endif
  std::shared_ptr<xrt_kernel> kp;
  try {
    kp = std::make_shared<xrt_kernel>(shared_from_this(), std::move(k), *info, options_.run_pool_size);
  } catch (...) {
    // No memory for the xrt_kernel or its descriptions: `k` was not taken
    // (xrt_kernel's constructor takes it last), and destroying it may free
    // command buffers, so it goes as ~xrt_kernel would send it.
    if (noop_) noop_->destroy(std::move(k));
    throw;
  }
  kernels_[name] = kp;  // if this throws, ~xrt_kernel destroys it
  return kp;
}

xrt::kernel xrt_device_impl::open_kernel(const std::string& name) {
  xrt::kernel k;
  bool made = false;
  try {
#if XRTIO_XRT_HW_CONTEXT
    k = xrt::kernel(hw_context_, name);
#else
    k = xrt::kernel(device_, uuid_, name);
#endif
    made = true;
    // The test seam fails here, after XRT made the kernel and started the
    // device's command monitor, as XRT's own later steps of opening can.
    before_xrt_call(xrt_call::kernel_open);
  } catch (const std::exception& e) {
    if (made && noop_) noop_->destroy(std::move(k));  // may free command buffers (noop_guard.hpp)
    throw error(errc::backend_failure, "xrt: opening kernel " + quoted(name) + ": " + e.what());
  }
  return k;
}

std::string xrt_device_impl::all_names() const {
  std::string s;
  for (auto& k : program_.info.kernels) s += (s.empty() ? "" : ", ") + k.name;
  return s.empty() ? "no kernels" : s;
}

std::string xrt_device_impl::visible_names() const {
  std::string s;
  for (auto& n : visible_) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "no kernels" : s;
}

// ---- devices ---------------------------------------------------------------------

namespace {

// "<name>[ [emulation: <mode>]][ [<bdf>]]" of device `i`, or why it is unavailable.
std::string describe_device(unsigned i, const char* emu) {
  try {
    xrt::device d(i);
    std::string name = "unnamed device", bdf;
    try {
      name = d.get_info<xrt::info::device::name>();
    } catch (const std::exception&) {
    }
    try {
      bdf = d.get_info<xrt::info::device::bdf>();
    } catch (const std::exception&) {
    }
    std::string line = name;
    if (emu && *emu) line += std::string(" [emulation: ") + emu + "]";
    if (!bdf.empty()) line += " [" + bdf + "]";
    return line;
  } catch (const std::exception& e) {
    return std::string("unavailable (") + e.what() + ")";
  }
}

}  // namespace
}  // namespace detail

xrtio::context open(const open_options& options, std::optional<memory_budget> budget) {
  auto program = detail::load_xclbin_file(options.xclbin_path);
  auto dev = std::make_shared<detail::xrt_device_impl>(options, std::move(program));
  return xrtio::context(std::move(dev), std::move(budget));
}

device& device_of(const xrtio::context& ctx) {
  auto* d = ctx ? dynamic_cast<device*>(&ctx.native()) : nullptr;
  if (!d) throw error(errc::not_supported, ctx ? "xrt_backend::device_of: the context's device (" +
                                                     ctx.native().name() + ") is not an XRT device"
                                               : std::string("xrt_backend::device_of: empty context"));
  return *d;
}

xrt::device native_xrt_device(const xrtio::context& ctx) {
  return static_cast<const detail::xrt_device_impl&>(device_of(ctx)).native();
}

std::vector<std::string> list_devices() {
  // XRT does not enumerate emulation devices; index 0 stands for them.
  constexpr unsigned emulated_devices = 1;
  std::vector<std::string> out;
  unsigned n = 0;
  try {
    n = xrt::system::enumerate_devices();
  } catch (const std::exception&) {
    n = 0;
  }
  const char* emu = std::getenv("XCL_EMULATION_MODE");
  if (n == 0 && emu && *emu) n = emulated_devices;
  for (unsigned i = 0; i < n; ++i) out.push_back(std::to_string(i) + ": " + detail::describe_device(i, emu));
  return out;
}

}  // namespace xrtio::xrt_backend
