// The XRT backend (DESIGN.md "Backends"). Every XRT call is wrapped: XRT
// throws std::exception subclasses (often std::system_error with EINVAL and a
// terse text); they become xrtio::error with a code that says which input
// was wrong and a message naming the value.
//
// API selection is by header detection, not by version strings:
//  - XRT 2.13 (Debian 12): xrt::device::load_xclbin + xrt::kernel(device,
//    uuid, name). One program per device at a time.
//  - current XRT (xrt_hw_context.h present): xrt::device::register_xclbin +
//    xrt::hw_context + xrt::kernel(hw_context, name). Debian's XRT lacks it:
//    CI compiles this branch only with -fsyntax-only against declarations of
//    the current API (tests/xrt_current_api, CTest xrt.current_api_syntax);
//    it has never run here.
//  The NPU calling convention (mlir-aie / IRON: opcode, instruction bo,
//  instruction words, data bos) is load_npu_instructions / check_npu_run
//  here and async_run_npu / start_npu / prepare_npu in xrtio/xrt.hpp; it
//  needs nothing from hw_context.
#include "xrtio/xrt.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include <xrt/xrt_bo.h>
#include <xrt/xrt_device.h>
#include <xrt/xrt_kernel.h>
#include <xrt/xrt_uuid.h>
#include <experimental/xrt_ini.h>
#include <experimental/xrt_system.h>
#include <experimental/xrt_xclbin.h>
#include <xclbin.h>

#if !defined(XRTIO_XRT_NO_HW_CONTEXT)
#if __has_include(<xrt/xrt_hw_context.h>)
#include <xrt/xrt_hw_context.h>
#define XRTIO_XRT_HW_CONTEXT 1
#elif __has_include(<experimental/xrt_hw_context.h>)
#include <experimental/xrt_hw_context.h>
#define XRTIO_XRT_HW_CONTEXT 1
#endif
#endif
#ifndef XRTIO_XRT_HW_CONTEXT
#define XRTIO_XRT_HW_CONTEXT 0
#endif
// Set by the syntax check against current XRT's API (CTest
// xrt.current_api_syntax): it must not pass by compiling the 2.13 branch.
#if defined(XRTIO_EXPECT_HW_CONTEXT) && !XRTIO_XRT_HW_CONTEXT
#error "XRTIO_EXPECT_HW_CONTEXT: xrt_hw_context.h was not found, the hw_context branch is not being compiled"
#endif

#include "xrt_wait.hpp"
#include "xrtio/error.hpp"

// Set by the syntax check against current XRT's API: its xrt::run has wait2,
// so the wait2 branch of detail::wait_and_read must be the one compiled.
#ifdef XRTIO_EXPECT_WAIT2
static_assert(xrtio::xrt_backend::detail::has_wait2<xrt::run>,
              "XRTIO_EXPECT_WAIT2: xrt::run::wait2 was not detected");
#endif

namespace xrtio::xrt_backend {
namespace {

using backend::arg_kind;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// ---- xclbin reading and checking --------------------------------------------

const char* section_name(std::uint32_t kind) {
  switch (kind) {
    case MEM_TOPOLOGY: return "MEM_TOPOLOGY";
    case IP_LAYOUT: return "IP_LAYOUT";
    case CONNECTIVITY: return "CONNECTIVITY";
    case EMBEDDED_METADATA: return "EMBEDDED_METADATA";
    default: return "section";
  }
}

const char* mem_type_name(std::uint8_t t) {
  switch (t) {
    case MEM_DDR3: return "DDR3";
    case MEM_DDR4: return "DDR4";
    case MEM_DRAM: return "DRAM";
    case MEM_STREAMING: return "STREAMING";
    case MEM_PREALLOCATED_GLOB: return "PREALLOCATED_GLOB";
    case MEM_ARE: return "ARE";
    case MEM_HBM: return "HBM";
    case MEM_BRAM: return "BRAM";
    case MEM_URAM: return "URAM";
    case MEM_STREAMING_CONNECTION: return "STREAMING_CONNECTION";
    case MEM_HOST: return "HOST";
    case MEM_PS_KERNEL: return "PS_KERNEL";
    default: return "unknown";
  }
}

bool nul_terminated(const void* p, std::size_t n) { return std::memchr(p, 0, n) != nullptr; }

[[noreturn]] void bad_xclbin(const std::string& path, const std::string& why) {
  throw error(errc::invalid_xclbin, "xclbin " + quoted(path) + ": " + why);
}

// Reads the whole file and checks what XRT 2.13 trusts without checking:
// lengths, section bounds, element counts and cross-section indices. XRT
// indexes these blindly, so a corrupt file would otherwise crash the process.
std::vector<char> read_checked(const std::string& path) {
  if (path.empty()) bad_xclbin(path, "no path given");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) bad_xclbin(path, std::string("cannot open: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) bad_xclbin(path, "not a regular file");
  std::vector<char> data;
  try {
    std::ifstream f(path, std::ios::binary);
    if (!f) bad_xclbin(path, std::string("cannot open: ") + std::strerror(errno));
    data.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (f.bad()) bad_xclbin(path, "read error");
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    bad_xclbin(path, std::string("read error: ") + e.what());
  }
  const std::size_t size = data.size();
  if (size < sizeof(axlf))
    bad_xclbin(path, "truncated: " + std::to_string(size) + " bytes, an xclbin header alone has " +
                         std::to_string(sizeof(axlf)));
  axlf top;
  std::memcpy(&top, data.data(), sizeof top);
  if (std::memcmp(top.m_magic, "xclbin2", 8) != 0) bad_xclbin(path, "not an xclbin (magic is not \"xclbin2\")");
  const std::uint64_t length = top.m_header.m_length;
  if (length > size)
    bad_xclbin(path, "truncated: header says " + std::to_string(length) + " bytes, the file has " +
                         std::to_string(size));
  if (length < sizeof(axlf)) bad_xclbin(path, "corrupt: header length " + std::to_string(length));
  const std::uint32_t n = top.m_header.m_numSections;
  if (n == 0 || n > XCLBIN_MAX_NUM_SECTION)
    bad_xclbin(path, "corrupt: " + std::to_string(n) + " sections");
  const std::size_t headers_at = offsetof(axlf, m_sections);
  if ((length - headers_at) / sizeof(axlf_section_header) < n)
    bad_xclbin(path, "truncated: " + std::to_string(n) + " section headers do not fit in " +
                         std::to_string(length) + " bytes");
  data.resize(length);  // anything past m_length (e.g. a signature) is not ours to parse

  std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> sections;  // kind -> (offset, size)
  for (std::uint32_t i = 0; i < n; ++i) {
    axlf_section_header h;
    std::memcpy(&h, data.data() + headers_at + i * sizeof h, sizeof h);
    if (h.m_sectionOffset > length || h.m_sectionSize > length - h.m_sectionOffset)
      bad_xclbin(path, "corrupt: section " + std::to_string(i) + " (kind " + std::to_string(h.m_sectionKind) +
                           ") spans [" + std::to_string(h.m_sectionOffset) + ", +" + std::to_string(h.m_sectionSize) +
                           ") outside the file's " + std::to_string(length) + " bytes");
    sections.emplace(h.m_sectionKind, std::make_pair(h.m_sectionOffset, h.m_sectionSize));
  }
  auto section = [&](std::uint32_t kind, std::size_t fixed, std::size_t elem, std::size_t count_at_least) {
    auto [off, sz] = sections.at(kind);
    if (sz < fixed)
      bad_xclbin(path, std::string("corrupt: ") + section_name(kind) + " has " + std::to_string(sz) + " bytes");
    std::int32_t count;
    std::memcpy(&count, data.data() + off, sizeof count);
    if (count < 0 || static_cast<std::uint64_t>(count) > (sz - fixed) / elem || std::size_t(count) < count_at_least)
      bad_xclbin(path, std::string("corrupt: ") + section_name(kind) + " claims " + std::to_string(count) +
                           " entries in " + std::to_string(sz) + " bytes");
    return std::make_pair(data.data() + off + fixed, count);
  };
  for (std::uint32_t k : {IP_LAYOUT, EMBEDDED_METADATA})
    if (!sections.count(k)) bad_xclbin(path, std::string("corrupt: no ") + section_name(k) + " section");
  if (sections.at(EMBEDDED_METADATA).second == 0) bad_xclbin(path, "corrupt: empty EMBEDDED_METADATA");

  std::int32_t mems = 0;
  if (sections.count(MEM_TOPOLOGY)) {
    auto [p, count] = section(MEM_TOPOLOGY, offsetof(mem_topology, m_mem_data), sizeof(mem_data), 0);
    mems = count;
    for (std::int32_t i = 0; i < count; ++i) {
      mem_data m;
      std::memcpy(&m, p + i * sizeof m, sizeof m);
      if (!nul_terminated(m.m_tag, sizeof m.m_tag))
        bad_xclbin(path, "corrupt: MEM_TOPOLOGY entry " + std::to_string(i) + " has an unterminated tag");
    }
  }
  auto [ips_p, ips] = section(IP_LAYOUT, offsetof(ip_layout, m_ip_data), sizeof(ip_data), 0);
  for (std::int32_t i = 0; i < ips; ++i) {
    ip_data ip;
    std::memcpy(&ip, ips_p + i * sizeof ip, sizeof ip);
    if (!nul_terminated(ip.m_name, sizeof ip.m_name))
      bad_xclbin(path, "corrupt: IP_LAYOUT entry " + std::to_string(i) + " has an unterminated name");
    if (ip.m_type == IP_KERNEL && !std::strchr(reinterpret_cast<const char*>(ip.m_name), ':'))
      bad_xclbin(path, "corrupt: IP_LAYOUT kernel instance \"" + std::string(reinterpret_cast<const char*>(ip.m_name)) +
                           "\" is not named kernel:instance");
  }
  if (sections.count(CONNECTIVITY)) {
    auto [p, count] = section(CONNECTIVITY, offsetof(connectivity, m_connection), sizeof(connection), 0);
    for (std::int32_t i = 0; i < count; ++i) {
      connection c;
      std::memcpy(&c, p + i * sizeof c, sizeof c);
      if (c.arg_index < 0 || c.m_ip_layout_index < 0 || c.m_ip_layout_index >= ips || c.mem_data_index < 0 ||
          c.mem_data_index >= mems)
        bad_xclbin(path, "corrupt: CONNECTIVITY entry " + std::to_string(i) + " {arg " + std::to_string(c.arg_index) +
                             ", ip " + std::to_string(c.m_ip_layout_index) + ", mem " +
                             std::to_string(c.mem_data_index) + "} points outside IP_LAYOUT (" + std::to_string(ips) +
                             ") or MEM_TOPOLOGY (" + std::to_string(mems) + ")");
    }
  }
  return data;
}

bool is_pointer_type(const std::string& t) { return t.find('*') != std::string::npos; }

// Kernel metadata through XRT's xclbin API. XRT 2.13's xclbin::arg has no
// address qualifier: an argument is a buffer when its host type is a
// pointer or it is connected to memory, a scalar otherwise.
xclbin_info describe(const xrt::xclbin& x, const std::string& path, std::size_t file_size) {
  xclbin_info info;
  info.path = path;
  info.file_size = file_size;
  info.uuid = x.get_uuid().to_string();
  try {
    info.platform = x.get_xsa_name();
  } catch (const std::exception&) {
  }
  for (auto& m : x.get_mems()) {
    bank_info b;
    b.index = m.get_index();
    b.tag = m.get_tag();
    b.type = mem_type_name(static_cast<std::uint8_t>(m.get_type()));
    b.used = m.get_used();
    b.base_address = m.get_base_address();
    b.size_bytes = m.get_size_kb() * 1024;
    info.banks.push_back(std::move(b));
  }
  std::sort(info.banks.begin(), info.banks.end(), [](auto& a, auto& b) { return a.index < b.index; });
  for (auto& k : x.get_kernels()) {
    kernel_info ki;
    ki.name = k.get_name();
    for (auto& cu : k.get_cus()) ki.compute_units.push_back({cu.get_name(), cu.get_base_address()});
    for (auto& a : k.get_args()) {
      arg_info ai;
      ai.index = static_cast<unsigned>(a.get_index());
      ai.name = a.get_name();
      ai.type = a.get_host_type();
      ai.port = a.get_port();
      ai.offset = a.get_offset();
      ai.size = a.get_size();
      std::set<int> banks;
      for (auto& m : a.get_mems()) banks.insert(m.get_index());
      ai.banks.assign(banks.begin(), banks.end());
      ai.kind = (is_pointer_type(ai.type) || !ai.banks.empty()) ? arg_kind::buffer : arg_kind::scalar;
      ai.group_id = (ai.kind == arg_kind::buffer && !ai.banks.empty()) ? ai.banks.front() : -1;
      ki.args.push_back(std::move(ai));
    }
    std::sort(ki.args.begin(), ki.args.end(), [](auto& a, auto& b) { return a.index < b.index; });
    for (std::size_t i = 0; i < ki.args.size(); ++i)
      if (ki.args[i].index != i)
        bad_xclbin(path, "corrupt: kernel " + ki.name + " argument indices are not 0.." +
                             std::to_string(ki.args.size() - 1));
    for (auto& a : ki.args)
      if (a.kind == arg_kind::scalar && a.size == 0)
        bad_xclbin(path, "corrupt: kernel " + ki.name + " scalar argument " + a.name + " has size 0");
    info.kernels.push_back(std::move(ki));
  }
  std::sort(info.kernels.begin(), info.kernels.end(), [](auto& a, auto& b) { return a.name < b.name; });
  return info;
}

struct loaded_xclbin {
  xrt::xclbin xclbin;
  xclbin_info info;
};

loaded_xclbin load_checked(const std::string& path) {
  auto data = read_checked(path);
  loaded_xclbin l;
  try {
    l.xclbin = xrt::xclbin(data);
    l.info = describe(l.xclbin, path, data.size());
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    bad_xclbin(path, std::string("rejected by XRT: ") + e.what());
  }
  return l;
}

// ---- buffers ------------------------------------------------------------------

// Views are made from the root bo with an absolute offset: XRT 2.13 makes a
// sub-bo of a sub-bo with the right host mapping but a device address
// computed from the root's address plus the *relative* offset, so a kernel
// would be handed the wrong device address (found by this suite).
class xrt_buffer final : public backend::native_buffer {
 public:
  // `group`: the memory group it was allocated in, -1 if unknown (group_id_of).
  xrt_buffer(xrt::bo bo, std::size_t size, unsigned device_index, int group)
      : bo_(std::move(bo)), root_(bo_), size_(size), device_index_(device_index), group_(group) {}
  xrt_buffer(xrt::bo bo, xrt::bo root, std::size_t root_offset, std::size_t size, unsigned device_index, int group)
      : bo_(std::move(bo)),
        root_(std::move(root)),
        root_offset_(root_offset),
        size_(size),
        device_index_(device_index),
        group_(group) {}

  std::size_t size() const noexcept override { return size_; }
  std::byte* map() override {
    std::call_once(map_once_, [&] {
      try {
        map_ = static_cast<std::byte*>(bo_.map());
      } catch (const std::exception&) {
        map_ = nullptr;  // device-only memory has no host mapping
      }
    });
    return map_;
  }
  void sync(backend::sync_direction dir, std::size_t size, std::size_t offset) override {
    check(size, offset, "sync");
    try {
      bo_.sync(dir == backend::sync_direction::to_device ? XCL_BO_SYNC_BO_TO_DEVICE : XCL_BO_SYNC_BO_FROM_DEVICE, size,
               offset);
    } catch (const std::exception& e) {
      throw error(errc::backend_failure, "xrt bo sync of [" + std::to_string(offset) + ", +" + std::to_string(size) +
                                             "): " + e.what());
    }
  }
  std::unique_ptr<backend::native_buffer> sub(std::size_t size, std::size_t offset) override {
    check(size, offset, "sub-buffer");
    try {
      auto abs = root_offset_ + offset;  // cannot overflow: within the root
      return std::make_unique<xrt_buffer>(xrt::bo(root_, size, abs), root_, abs, size, device_index_, group_);
    } catch (const std::exception& e) {
      throw error(errc::backend_failure, "xrt sub-buffer [" + std::to_string(offset) + ", +" + std::to_string(size) +
                                             ") of a " + std::to_string(size_) + "-byte bo: " + e.what());
    }
  }
  std::uint64_t address() const noexcept override {
    try {
      return bo_.address();
    } catch (...) {
      return 0;
    }
  }

  const xrt::bo& bo() const noexcept { return bo_; }
  unsigned device_index() const noexcept { return device_index_; }
  int group() const noexcept { return group_; }

 private:
  void check(std::size_t size, std::size_t offset, const char* what) const {
    if (offset > size_ || size > size_ - offset)
      throw error(errc::out_of_range, std::string("xrt ") + what + " [" + std::to_string(offset) + ", +" +
                                          std::to_string(size) + ") exceeds " + std::to_string(size_) + " bytes");
  }
  xrt::bo bo_;
  xrt::bo root_;  // the owned or imported allocation this view is of (bo_ itself for a root)
  std::size_t root_offset_ = 0;
  std::size_t size_;
  unsigned device_index_;
  int group_;
  std::once_flag map_once_;
  std::byte* map_ = nullptr;
};

// ---- runs -----------------------------------------------------------------------

class xrt_kernel;

using detail::to_run_state;

// Runs that were released while not final (a caller bug the layers above
// prevent). Destroying them would abort the process or corrupt the next
// command (invariant 2), so they are kept, deliberately, for good.
void keep_forever(xrt::run r) noexcept {
  static auto* kept = new std::vector<xrt::run>;
  static std::mutex m;
  std::lock_guard lock(m);
  try {
    kept->push_back(std::move(r));
  } catch (...) {
    new xrt::run(std::move(r));  // may leak; must not destroy
  }
}

class xrt_run final : public backend::native_run {
 public:
  xrt_run(xrt_kernel* k, xrt::run r);
  ~xrt_run() override = default;

  void set_arg(unsigned index, backend::native_buffer& buffer) override;
  void set_arg(unsigned index, const void* value, std::size_t size) override;
  void start() override;
  run_state state() noexcept override {
    try {
      auto s = to_run_state(run_.state(), last_.load(std::memory_order_relaxed));
      last_.store(s, std::memory_order_relaxed);
      return s;
    } catch (...) {
      return last_.load(std::memory_order_relaxed);
    }
  }
  run_state wait_for(std::chrono::nanoseconds timeout) override {
    // wait2 where xrt::run has it, else wait (xrt_wait.hpp). (The no-op
    // device ignores the timeout and spins until the run completes.)
    auto s = detail::wait_and_read(run_, std::chrono::ceil<std::chrono::milliseconds>(timeout),
                                   last_.load(std::memory_order_relaxed));
    last_.store(s, std::memory_order_relaxed);
    return s;
  }
  backend::abort_outcome abort() override {
    // Synchronous in XRT (>= 2.12): submits an ERT abort and waits. A throw
    // or a non-final state afterwards means the device did not let go.
    try {
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
  void release() noexcept override;

  xrt::run& native() noexcept { return run_; }

 private:
  [[noreturn]] void fail(errc code, unsigned index, const std::string& what) const;

  xrt_kernel* kernel_;
  xrt::run run_;
  std::vector<bool> set_;  // arguments bound since the last release
  bool started_ = false;   // start() succeeded since the last release
  std::atomic<run_state> last_{run_state::new_};
};

class xrt_device_impl;

class xrt_kernel final : public backend::native_kernel {
 public:
  xrt_kernel(std::shared_ptr<xrt_device_impl> dev, xrt::kernel k, kernel_info info, std::size_t pool_cap)
      : device_(std::move(dev)), kernel_(std::move(k)), info_(std::move(info)), pool_cap_(pool_cap) {
    for (auto& a : info_.args) {
      backend::arg_desc d;
      d.name = a.name;
      d.kind = a.kind;
      d.size = a.kind == arg_kind::scalar ? a.size : 0;
      d.group_id = 0;
      if (a.kind == arg_kind::buffer) {
        // XRT's own answer (it intersects the banks of all compute units).
        try {
          d.group_id = kernel_.group_id(static_cast<int>(a.index));
        } catch (const std::exception&) {
          d.group_id = a.group_id < 0 ? 0 : a.group_id;
        }
      }
      args_.push_back(std::move(d));
    }
  }
  ~xrt_kernel() override {
    for (auto* r : pool_) delete r;  // pooled runs are final (release() checked)
  }
  const std::string& name() const noexcept override { return info_.name; }
  const std::vector<backend::arg_desc>& args() const noexcept override { return args_; }
  backend::native_run_ptr make_run() override {
    {
      std::lock_guard lock(pool_mutex_);
      if (!pool_.empty()) {
        auto* r = pool_.back();
        pool_.pop_back();
        return backend::native_run_ptr(r);
      }
    }
    try {
      return backend::native_run_ptr(new xrt_run(this, xrt::run(kernel_)));
    } catch (const std::exception& e) {
      throw error(errc::backend_failure, "xrt kernel " + info_.name + ": cannot create a run: " + e.what());
    }
  }
  void recycle(xrt_run* r) noexcept {
    {
      std::lock_guard lock(pool_mutex_);
      if (pool_.size() < pool_cap_) {
        try {
          pool_.push_back(r);
          return;
        } catch (...) {
        }
      }
    }
    delete r;
  }
  unsigned device_index() const noexcept;

 private:
  std::shared_ptr<xrt_device_impl> device_;  // keeps the device (and its program) alive
  xrt::kernel kernel_;
  kernel_info info_;
  std::vector<backend::arg_desc> args_;
  std::size_t pool_cap_;
  std::mutex pool_mutex_;
  std::vector<xrt_run*> pool_;
};

xrt_run::xrt_run(xrt_kernel* k, xrt::run r) : kernel_(k), run_(std::move(r)), set_(k->args().size(), false) {}

void xrt_run::fail(errc code, unsigned index, const std::string& what) const {
  const auto& defs = kernel_->args();
  std::string n = index < defs.size() ? " (" + defs[index].name + ")" : "";
  throw error(code, "xrt kernel " + kernel_->name() + " argument " + std::to_string(index) + n + ": " + what);
}

void xrt_run::set_arg(unsigned index, backend::native_buffer& buffer) {
  const auto& defs = kernel_->args();
  if (index >= defs.size())
    fail(errc::argument_count, index, "the kernel has " + std::to_string(defs.size()) + " arguments");
  if (defs[index].kind != arg_kind::buffer)
    fail(errc::argument_kind, index, "is a " + std::to_string(defs[index].size) + "-byte scalar; a buffer was given");
  auto* xb = dynamic_cast<xrt_buffer*>(&buffer);
  if (!xb) fail(errc::foreign_context, index, "the buffer is not an XRT buffer");
  if (xb->device_index() != kernel_->device_index())
    fail(errc::foreign_context, index,
         "the buffer belongs to XRT device " + std::to_string(xb->device_index()) + ", the kernel to device " +
             std::to_string(kernel_->device_index()));
  try {
    run_.set_arg(static_cast<int>(index), xb->bo());
  } catch (const std::exception& e) {
    fail(errc::backend_failure, index, std::string("XRT refused the buffer: ") + e.what());
  }
  set_[index] = true;
}

void xrt_run::set_arg(unsigned index, const void* value, std::size_t size) {
  const auto& defs = kernel_->args();
  if (index >= defs.size())
    fail(errc::argument_count, index, "the kernel has " + std::to_string(defs.size()) + " arguments");
  if (defs[index].kind != arg_kind::scalar) fail(errc::argument_kind, index, "is a buffer; a scalar was given");
  if (defs[index].size != size)
    fail(errc::argument_kind, index,
         "is a " + std::to_string(defs[index].size) + "-byte scalar; " + std::to_string(size) + " bytes were given");
  try {
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
  try {
    last_.store(run_state::new_, std::memory_order_relaxed);
    run_.start();
    started_ = true;
  } catch (const std::exception& e) {
    throw error(errc::backend_failure, "xrt kernel " + kernel_->name() + ": start failed: " + e.what());
  }
}

void xrt_run::release() noexcept {
  // Only after a final state (invariant 2). If a caller gets this wrong, the
  // xrt::run is parked forever instead of destroyed in flight.
  if (started_ && !is_final(state())) {
    std::fputs("xrtio: an XRT run was released before reaching a final state; keeping it alive\n", stderr);
    keep_forever(std::move(run_));
    delete this;  // run_ was moved out: nothing left in flight here
    return;
  }
  std::fill(set_.begin(), set_.end(), false);
  started_ = false;
  last_.store(run_state::new_, std::memory_order_relaxed);
  kernel_->recycle(this);
}

// ---- device -----------------------------------------------------------------------

class xrt_device_impl final : public device, public std::enable_shared_from_this<xrt_device_impl> {
 public:
  xrt_device_impl(const open_options& o, loaded_xclbin program) : options_(o), program_(std::move(program)) {
    try {
      device_ = xrt::device(o.device_index);
    } catch (const std::exception& e) {
      throw error(errc::backend_failure, "xrt: cannot open device " + std::to_string(o.device_index) + ": " + e.what());
    }
    try {
#if XRTIO_XRT_HW_CONTEXT
      uuid_ = device_.register_xclbin(program_.xclbin);
      hw_context_ = xrt::hw_context(device_, uuid_);
#else
      uuid_ = device_.load_xclbin(program_.xclbin);
#endif
    } catch (const std::exception& e) {
      throw error(errc::backend_failure, "xrt: device " + std::to_string(o.device_index) + " refused xclbin " +
                                             quoted(o.xclbin_path) + ": " + e.what());
    }
    for (auto& k : program_.info.kernels)
      if (!o.kernel_filter || *o.kernel_filter == k.name) visible_.push_back(k.name);
    if (o.kernel_filter && visible_.empty())
      throw error(errc::unknown_kernel, "xrt: kernel_filter " + quoted(*o.kernel_filter) + " names no kernel of " +
                                            quoted(o.xclbin_path) + " (it has: " + all_names() + ")");
    try {
      name_ = device_.get_info<xrt::info::device::name>();
    } catch (const std::exception&) {
      name_ = "device";  // the no-op device answers no queries
    }
    for (auto& b : program_.info.banks)
      if (b.used && default_group_ < 0) default_group_ = b.index;
    if (default_group_ < 0) default_group_ = 0;
  }

  std::string name() const override {
    std::string s = "xrt " + std::to_string(options_.device_index) + ": " + name_;
    if (const char* emu = std::getenv("XCL_EMULATION_MODE")) s += std::string(" [emulation: ") + emu + "]";
    return s + ", xclbin " + options_.xclbin_path + " (" + program_.info.uuid + ")";
  }

  std::unique_ptr<backend::native_buffer> alloc(std::size_t size, backend::buffer_kind kind, int group_id) override {
    check_group(group_id);
    xrt::bo::flags f = xrt::bo::flags::normal;
    switch (kind) {
      case backend::buffer_kind::normal: f = xrt::bo::flags::normal; break;
      case backend::buffer_kind::host_only: f = xrt::bo::flags::host_only; break;
      case backend::buffer_kind::cacheable: f = xrt::bo::flags::cacheable; break;
      case backend::buffer_kind::device_only: f = xrt::bo::flags::device_only; break;
    }
    try {
      // On the device, not a hardware context: cross-context runs work.
      return std::make_unique<xrt_buffer>(xrt::bo(device_, size, f, static_cast<xrt::memory_group>(group_id)), size,
                                          options_.device_index, group_id);
    } catch (const std::exception& e) {
      throw error(errc::backend_failure, "xrt: allocating " + std::to_string(size) + " bytes in group " +
                                             std::to_string(group_id) + ": " + e.what());
    }
  }

  std::unique_ptr<backend::native_buffer> import_user_memory(void* ptr, std::size_t size) override {
    // XRT requires page-aligned user memory; say so instead of EINVAL.
    auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    if (reinterpret_cast<std::uintptr_t>(ptr) % page != 0)
      throw error(errc::misaligned, "xrt: user memory at " + pointer_text(ptr) + " is not aligned to the " +
                                        std::to_string(page) + "-byte page XRT requires");
    try {
      return std::make_unique<xrt_buffer>(
          xrt::bo(device_, ptr, size, static_cast<xrt::memory_group>(default_group_)), size, options_.device_index,
          default_group_);
    } catch (const std::exception& e) {
      throw error(errc::backend_failure, "xrt: importing " + std::to_string(size) + " bytes of user memory at " +
                                             pointer_text(ptr) + ": " + e.what());
    }
  }

  std::unique_ptr<backend::native_buffer> import_dmabuf(int fd, std::size_t size) override {
    // XRT 2.13 has no device::import_bo; xrt::bo(device, export handle)
    // imports a dma-buf fd (on Linux the export handle is the fd).
    xrt::bo bo;
    try {
      bo = xrt::bo(device_, static_cast<xclBufferExportHandle>(fd));
    } catch (const std::exception& e) {
      throw error(errc::backend_failure, "xrt: importing dma-buf fd " + std::to_string(fd) + ": " + e.what());
    }
    std::size_t have = 0;
    try {
      have = bo.size();
    } catch (const std::exception&) {
    }
    if (have < size)
      throw error(errc::out_of_range, "xrt: dma-buf fd " + std::to_string(fd) + " has " + std::to_string(have) +
                                          " bytes, " + std::to_string(size) + " requested");
    // The group of an imported dma-buf is not known (-1).
    if (have == size) return std::make_unique<xrt_buffer>(std::move(bo), size, options_.device_index, -1);
    try {
      return std::make_unique<xrt_buffer>(xrt::bo(bo, size, 0), bo, 0, size, options_.device_index, -1);
    } catch (const std::exception& e) {
      throw error(errc::backend_failure, "xrt: dma-buf fd " + std::to_string(fd) + " view: " + e.what());
    }
  }

  std::shared_ptr<backend::native_kernel> kernel(const std::string& name) override {
    std::lock_guard lock(mutex_);
    if (auto it = kernels_.find(name); it != kernels_.end())
      if (auto k = it->second.lock()) return k;
    if (std::find(visible_.begin(), visible_.end(), name) == visible_.end())
      throw error(errc::unknown_kernel, "xrt: no kernel " + quoted(name) + " in " + quoted(options_.xclbin_path) +
                                            " (loaded: " + visible_names() + ")");
    const kernel_info* info = nullptr;
    for (auto& k : program_.info.kernels)
      if (k.name == name) info = &k;
    xrt::kernel k;
    try {
#if XRTIO_XRT_HW_CONTEXT
      k = xrt::kernel(hw_context_, name);
#else
      k = xrt::kernel(device_, uuid_, name);
#endif
    } catch (const std::exception& e) {
      throw error(errc::backend_failure, "xrt: opening kernel " + quoted(name) + ": " + e.what());
    }
    auto kp = std::make_shared<xrt_kernel>(shared_from_this(), std::move(k), *info, options_.run_pool_size);
    kernels_[name] = kp;
    return kp;
  }

  std::vector<std::string> kernel_names() const override { return visible_; }

  const xclbin_info& xclbin() const noexcept override { return program_.info; }
  unsigned index() const noexcept override { return options_.device_index; }
  bool uses_hw_context() const noexcept override { return XRTIO_XRT_HW_CONTEXT != 0; }

 private:
  static std::string pointer_text(const void* p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", p);
    return buf;
  }
  std::string all_names() const {
    std::string s;
    for (auto& k : program_.info.kernels) s += (s.empty() ? "" : ", ") + k.name;
    return s.empty() ? "no kernels" : s;
  }
  std::string visible_names() const {
    std::string s;
    for (auto& n : visible_) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? "no kernels" : s;
  }
  // XRT 2.13 does not check the bank on every driver (the no-op device takes
  // any), so a typo would silently allocate elsewhere. Bits 0-15 are the
  // bank, 16-23 the xclbin slot (XRT-NOTES.md).
  void check_group(int group_id) const {
    if (XRTIO_XRT_HW_CONTEXT) return;  // current XRT checks against its hardware context
    const auto& banks = program_.info.banks;
    if (banks.empty()) return;
    int bank = group_id & 0xffff;
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

  open_options options_;
  loaded_xclbin program_;
  xrt::device device_;
  xrt::uuid uuid_;
#if XRTIO_XRT_HW_CONTEXT
  xrt::hw_context hw_context_;
#endif
  std::string name_;
  std::vector<std::string> visible_;
  int default_group_ = -1;
  std::mutex mutex_;
  // Weak: kernels own the device (shared_ptr), not the reverse. The context
  // caches the strong references.
  std::map<std::string, std::weak_ptr<xrt_kernel>> kernels_;
};

unsigned xrt_kernel::device_index() const noexcept { return device_->index(); }

// ---- the no-op device ------------------------------------------------------------

struct noop_state {
  std::mutex mutex;
  bool configured = false;
  std::chrono::microseconds delay{0};
  std::string root;
  bool owns_ini = false;
};
noop_state& noop() {
  static auto* s = new noop_state;  // never destroyed: read by the atexit handler
  return *s;
}

void remove_noop_root() {
  auto& s = noop();
  if (s.root.empty()) return;
  ::unlink((s.root + "/lib/libxrt_noop.so.2").c_str());
  if (s.owns_ini) ::unlink((s.root + "/xrt.ini").c_str());
  ::rmdir((s.root + "/lib").c_str());
  ::rmdir(s.root.c_str());
}

std::string find_noop_driver() {
  std::vector<std::string> candidates;
  if (const char* x = std::getenv("XILINX_XRT")) candidates.push_back(std::string(x) + "/lib/libxrt_noop.so.2");
  candidates.push_back("/usr/lib/x86_64-linux-gnu/libxrt_noop.so.2");
  candidates.push_back("/usr/lib/aarch64-linux-gnu/libxrt_noop.so.2");
  candidates.push_back("/opt/xilinx/xrt/lib/libxrt_noop.so.2");
  for (auto& c : candidates) {
    char real[4096];
    if (::realpath(c.c_str(), real)) return real;
  }
  return {};
}

}  // namespace

xclbin_info inspect_xclbin(const std::string& path) { return load_checked(path).info; }

int group_id_of(const xrtio::buffer& b) noexcept {
  if (!b || !b.state()->native) return -1;
  auto* x = dynamic_cast<const xrt_buffer*>(b.state()->native.get());
  return x ? x->group() : -1;
}

std::vector<std::uint32_t> command_registers(backend::native_run& r) {
  auto* x = dynamic_cast<xrt_run*>(&r);
  if (!x) return {};
  const ert_packet* p = nullptr;
  try {
    p = x->native().get_ert_packet();
  } catch (const std::exception& e) {
    throw error(errc::backend_failure, std::string("xrt: reading a run's command: ") + e.what());
  }
  if (!p || p->opcode != ERT_START_CU) return {};
  // Payload after the header: the cu mask, extra cu masks, then the
  // register map (ert.h, struct ert_start_kernel_cmd).
  const auto* k = reinterpret_cast<const ert_start_kernel_cmd*>(p);
  const std::size_t masks = 1 + k->extra_cu_masks;
  if (k->count <= masks) return {};
  const std::uint32_t* regs = k->data + k->extra_cu_masks;
  return std::vector<std::uint32_t>(regs, regs + (k->count - masks));
}

// ---- NPU calling convention ---------------------------------------------------

namespace {
// Throws errc::argument_kind unless `k` takes (8-byte scalar, buffer, 4-byte
// scalar, buffer...).
void check_npu_layout(const xrtio::kernel& k) {
  const auto& a = k.args();
  auto bad = [&](const std::string& why) {
    throw error(errc::argument_kind, "kernel " + quoted(k.name()) +
                                         " does not follow the NPU calling convention (opcode: 8-byte scalar, "
                                         "instructions: buffer, instruction count: 4-byte scalar, then data "
                                         "buffers): " + why);
  };
  if (a.size() < 3) bad("it has " + std::to_string(a.size()) + " arguments");
  auto what = [&](unsigned i) {
    return "argument " + std::to_string(i) + " (" + a[i].name + ") is " +
           (a[i].kind == arg_kind::buffer ? std::string("a buffer")
                                          : "a " + std::to_string(a[i].size) + "-byte scalar");
  };
  if (a[0].kind != arg_kind::scalar || a[0].size != 8) bad(what(0));
  if (a[1].kind != arg_kind::buffer) bad(what(1));
  if (a[2].kind != arg_kind::scalar || a[2].size != 4) bad(what(2));
  for (unsigned i = 3; i < a.size(); ++i)
    if (a[i].kind != arg_kind::buffer) bad(what(i));
}

// Throws errc::argument_kind when `b` is known to lie in another memory
// bank than argument `index` of `k` is connected to.
void check_npu_group(const xrtio::kernel& k, unsigned index, const xrtio::buffer& b, const std::string& what) {
  int have = group_id_of(b);
  if (have < 0) return;
  int want = k.args()[index].group_id;
  if ((have & 0xffff) == (want & 0xffff)) return;
  throw error(errc::argument_kind, "kernel " + quoted(k.name()) + " argument " + std::to_string(index) + " (" +
                                       k.args()[index].name + "): the " + what + " is in memory group " +
                                       std::to_string(have) + ", the argument needs group " + std::to_string(want) +
                                       " (kernel.group_id(" + std::to_string(index) + "))");
}
}  // namespace

npu_instructions load_npu_instructions(const xrtio::kernel& k, std::span<const std::uint32_t> words) {
  if (words.empty()) throw error(errc::invalid_size, "kernel " + quoted(k.name()) + ": no NPU instructions given");
  if (words.size() > std::numeric_limits<std::uint32_t>::max())
    throw error(errc::invalid_size, "kernel " + quoted(k.name()) + ": " + std::to_string(words.size()) +
                                        " NPU instruction words; the count argument holds at most 2^32 - 1");
  check_npu_layout(k);
  npu_instructions i;
  i.buffer = k.context().alloc(words.size_bytes(),
                               {.kind = backend::buffer_kind::cacheable, .group_id = k.group_id(1)});
  i.buffer.write(words);  // copies, then syncs to the device
  i.words = static_cast<std::uint32_t>(words.size());
  return i;
}

void check_npu_run(const xrtio::kernel& k, const npu_instructions& instr,
                   std::span<const xrtio::buffer* const> data) {
  check_npu_layout(k);
  if (!instr.buffer)
    throw error(errc::invalid_size, "kernel " + quoted(k.name()) + ": no NPU instruction buffer");
  if (instr.words == 0)
    throw error(errc::invalid_size, "kernel " + quoted(k.name()) + ": 0 NPU instruction words");
  if (std::uint64_t(instr.words) * 4 > instr.buffer.size())
    throw error(errc::out_of_range, "kernel " + quoted(k.name()) + ": " + std::to_string(instr.words) +
                                        " NPU instruction words do not fit in the " +
                                        std::to_string(instr.buffer.size()) + "-byte instruction buffer");
  check_npu_group(k, 1, instr.buffer, "instruction buffer");
  const auto n = k.args().size();
  for (std::size_t i = 0; i < data.size() && 3 + i < n; ++i)
    if (data[i] && *data[i]) check_npu_group(k, static_cast<unsigned>(3 + i), *data[i], "data buffer " + std::to_string(i));
}

xrtio::context open(const open_options& options, std::optional<memory_budget> budget) {
  auto program = load_checked(options.xclbin_path);
  auto dev = std::make_shared<xrt_device_impl>(options, std::move(program));
  return xrtio::context(std::move(dev), std::move(budget));
}

void use_noop_device(std::chrono::microseconds completion_delay) {
  if (completion_delay.count() < 0)
    throw error(errc::invalid_size, "use_noop_device: negative completion delay " +
                                        std::to_string(completion_delay.count()) + " us");
  auto& s = noop();
  std::lock_guard lock(s.mutex);
  if (s.configured && s.delay == completion_delay) return;
  if (!s.configured) {
    auto driver = find_noop_driver();
    if (driver.empty())
      throw error(errc::not_supported, "use_noop_device: XRT's no-op driver libxrt_noop.so.2 is not installed "
                                       "(looked in $XILINX_XRT/lib, /usr/lib/<multiarch>, /opt/xilinx/xrt/lib)");
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/xrtio-noop-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data()))
      throw error(errc::backend_failure, "use_noop_device: mkdtemp(" + tmpl + "): " + std::strerror(errno));
    s.root = buf.data();
    std::atexit(remove_noop_root);
    if (::mkdir((s.root + "/lib").c_str(), 0755) != 0 ||
        ::symlink(driver.c_str(), (s.root + "/lib/libxrt_noop.so.2").c_str()) != 0)
      throw error(errc::backend_failure, "use_noop_device: cannot link " + driver + " into " + s.root + ": " +
                                             std::strerror(errno));
    if (!std::getenv("XRT_INI_PATH")) {
      std::ofstream((s.root + "/xrt.ini").c_str()) << "# empty: isolates xrtio's no-op device from stray xrt.ini\n";
      s.owns_ini = true;
      ::setenv("XRT_INI_PATH", (s.root + "/xrt.ini").c_str(), 1);
    }
    ::setenv("XCL_EMULATION_MODE", "noop", 1);
    ::setenv("XILINX_XRT", s.root.c_str(), 1);
    s.configured = true;
  }
  try {
    xrt::ini::set("Runtime.noop_completion_delay_us", static_cast<unsigned>(completion_delay.count()));
  } catch (const std::exception& e) {
    throw error(errc::not_supported, "use_noop_device: cannot set the completion delay to " +
                                         std::to_string(completion_delay.count()) +
                                         " us after XRT read its configuration (set it before the first device "
                                         "open): " + e.what());
  }
  s.delay = completion_delay;
}

std::vector<std::string> list_devices() {
  std::vector<std::string> out;
  unsigned n = 0;
  try {
    n = xrt::system::enumerate_devices();
  } catch (const std::exception&) {
    n = 0;
  }
  const char* emu = std::getenv("XCL_EMULATION_MODE");
  if (n == 0 && emu && *emu) n = 1;  // emulation devices are not enumerated; index 0 stands for them
  for (unsigned i = 0; i < n; ++i) {
    std::string line = std::to_string(i) + ": ";
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
      line += name;
      if (emu && *emu) line += std::string(" [emulation: ") + emu + "]";
      if (!bdf.empty()) line += " [" + bdf + "]";
    } catch (const std::exception& e) {
      line += std::string("unavailable (") + e.what() + ")";
    }
    out.push_back(std::move(line));
  }
  return out;
}

}  // namespace xrtio::xrt_backend
