// Current-XRT API declarations for xrtio's syntax check (tests/xrt_current_api/README.md).
// Mirrors upstream xrt/xrt_hw_context.h. Declarations only; never linked.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "experimental/xrt_xclbin.h"
#include "xrt/xrt_device.h"
#include "xrt/xrt_uuid.h"

namespace xrt {

class hw_context_impl;

// Binds a registered xclbin (device::register_xclbin) to hardware resources.
class hw_context {
 public:
  using cfg_param_type = std::map<std::string, std::uint32_t>;
  using qos_type = cfg_param_type;
  enum class access_mode : std::uint8_t { exclusive = 0, shared = 1 };

  hw_context() = default;
  hw_context(const xrt::device& device, const xrt::uuid& xclbin_id, const cfg_param_type& cfg_param);
  hw_context(const xrt::device& device, const xrt::uuid& xclbin_id, access_mode mode);
  hw_context(const xrt::device& device, const xrt::uuid& xclbin_id);  // shared access
  hw_context(const hw_context&) = default;
  hw_context(hw_context&&) = default;
  hw_context& operator=(const hw_context&) = default;
  hw_context& operator=(hw_context&&) = default;
  ~hw_context();

  xrt::device get_device() const;
  xrt::uuid get_xclbin_uuid() const;
  xrt::xclbin get_xclbin() const;
  access_mode get_mode() const;

 private:
  std::shared_ptr<hw_context_impl> impl_;
};

}  // namespace xrt
