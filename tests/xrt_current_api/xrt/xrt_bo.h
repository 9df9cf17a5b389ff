// Current-XRT API declarations for xrtio's syntax check (tests/xrt_current_api/README.md).
// Mirrors upstream xrt/xrt_bo.h, including the hw_context-based constructors.
// Declarations only; never linked.
#pragma once
#include <sys/types.h>
#include <xrt.h>      // Debian's C HAL types (xclDeviceHandle, xclBOSyncDirection, ...)
#include <xrt_mem.h>  // Debian's XRT_BO_FLAGS_* / XCL_BO_FLAGS_*

#include <cstddef>
#include <cstdint>
#include <memory>

typedef std::uint32_t xrtMemoryGroup;

namespace xrt {

using memory_group = xrtMemoryGroup;

struct pid_type {
  pid_t pid;
};

class device;
class hw_context;
class bo_impl;

class bo {
 public:
  // Upstream also has p2p, svm and carveout; xrtio does not use them.
  enum class flags : std::uint32_t {
    normal = 0,
    cacheable = XRT_BO_FLAGS_CACHEABLE,
    device_only = XRT_BO_FLAGS_DEV_ONLY,
    host_only = XRT_BO_FLAGS_HOST_ONLY,
  };
  using export_handle = std::int32_t;  // a dma-buf fd on Linux

  bo() = default;
  // On a device (usable by any hardware context of that device).
  bo(const xrt::device& device, void* userptr, std::size_t size, flags f, memory_group group);
  bo(const xrt::device& device, void* userptr, std::size_t size, memory_group group);
  bo(const xrt::device& device, std::size_t size, flags f, memory_group group);
  bo(const xrt::device& device, std::size_t size, memory_group group);
  bo(const xrt::device& device, export_handle handle);
  bo(const xrt::device& device, pid_type pid, export_handle handle);
  // In one hardware context.
  bo(const xrt::hw_context& ctx, void* userptr, std::size_t size, flags f, memory_group group);
  bo(const xrt::hw_context& ctx, void* userptr, std::size_t size, memory_group group);
  bo(const xrt::hw_context& ctx, std::size_t size, flags f, memory_group group);
  bo(const xrt::hw_context& ctx, std::size_t size, memory_group group);
  // Legacy, on a shim handle.
  bo(xclDeviceHandle device, std::size_t size, flags f, memory_group group);
  bo(xclDeviceHandle device, xclBufferExportHandle handle);
  // A sub-buffer of `parent`.
  bo(const bo& parent, std::size_t size, std::size_t offset);

  bo(const bo&) = default;
  bo(bo&&) = default;
  bo& operator=(const bo&) = default;
  bo& operator=(bo&&) = default;
  ~bo();

  bool operator==(const bo& other) const;
  explicit operator bool() const;

  std::size_t size() const;
  std::uint64_t address() const;
  memory_group get_memory_group() const;
  flags get_flags() const;
  export_handle export_buffer();

  void sync(xclBOSyncDirection dir, std::size_t size, std::size_t offset);
  void sync(xclBOSyncDirection dir);
  void* map();
  template <class T>
  T map() {
    return reinterpret_cast<T>(map());
  }
  void write(const void* src, std::size_t size, std::size_t seek);
  void read(void* dst, std::size_t size, std::size_t skip);

 private:
  std::shared_ptr<bo_impl> impl_;
};

}  // namespace xrt
