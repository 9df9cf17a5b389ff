// Current-XRT API declarations for xrtio's syntax check (tests/xrt_current_api/README.md).
// Mirrors upstream xrt/xrt_device.h: xrt::device with register_xclbin (the
// hw_context flow) beside the legacy load_xclbin. Declarations only; never linked.
#pragma once
#include <xrt.h>  // Debian's C HAL types (xclDeviceHandle, ...)

#include <cstdint>
#include <memory>
#include <string>

#include "experimental/xrt_xclbin.h"
#include "xrt/xrt_uuid.h"

namespace xrt_core {
class device;
}

namespace xrt {

namespace info {

enum class device : unsigned int {
  bdf,
  interface_uuid,
  kdma,
  max_clock_frequency_mhz,
  m2m,
  name,
  nodma,
  offline,
  electrical,
  thermal,
  mechanical,
  memory,
  platform,
  pcie_info,
  host,
  aie,
  aie_shim,
  dynamic_regions,
  vmr,
  aie_mem,
  aie_partitions,
};

// The type get_info<P>() returns for each query P.
template <class Enum, Enum P>
struct param_traits;
template <> struct param_traits<device, device::bdf> { using return_type = std::string; };
template <> struct param_traits<device, device::interface_uuid> { using return_type = xrt::uuid; };
template <> struct param_traits<device, device::kdma> { using return_type = std::uint32_t; };
template <> struct param_traits<device, device::max_clock_frequency_mhz> { using return_type = unsigned long; };
template <> struct param_traits<device, device::m2m> { using return_type = bool; };
template <> struct param_traits<device, device::name> { using return_type = std::string; };
template <> struct param_traits<device, device::nodma> { using return_type = bool; };
template <> struct param_traits<device, device::offline> { using return_type = bool; };
template <> struct param_traits<device, device::platform> { using return_type = std::string; };

}  // namespace info

class device {
 public:
  device() = default;
  explicit device(unsigned int index);
  explicit device(int index);
  explicit device(const std::string& bdf);
  explicit device(xclDeviceHandle handle);
  device(const device&) = default;
  device(device&&) = default;
  device& operator=(const device&) = default;
  device& operator=(device&&) = default;
  ~device() = default;

  template <info::device P>
  typename info::param_traits<info::device, P>::return_type get_info() const;

  // Registers the xclbin without binding it to hardware resources; a
  // hw_context does that (current XRT, required on the NPU).
  uuid register_xclbin(const xrt::xclbin& xclbin);

  uuid load_xclbin(const axlf* top);
  uuid load_xclbin(const std::string& path);
  uuid load_xclbin(const xrt::xclbin& xclbin);
  uuid get_xclbin_uuid() const;

  operator xclDeviceHandle() const;
  void reset();
  explicit operator bool() const;

 private:
  std::shared_ptr<xrt_core::device> handle_;
};

bool operator==(const device& a, const device& b);
bool operator!=(const device& a, const device& b);

}  // namespace xrt
