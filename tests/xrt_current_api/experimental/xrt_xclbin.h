// Current-XRT API declarations for xrtio's syntax check (tests/xrt_current_api/README.md).
// Mirrors upstream xrt/experimental/xrt_xclbin.h (the metadata navigation
// xrtio reads). Declarations only; never linked.
#pragma once
#include <xclbin.h>  // Debian's C definitions (axlf, MEM_*, IP_*)

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "xrt/xrt_uuid.h"

namespace xrt {

class xclbin_impl;

class xclbin {
 public:
  enum class target_type { hw, sw_emu, hw_emu };

  class mem_impl;
  class mem {
   public:
    enum class memory_type : std::uint8_t {
      ddr3 = MEM_DDR3,
      ddr4 = MEM_DDR4,
      dram = MEM_DRAM,
      streaming = MEM_STREAMING,
      preallocated_global = MEM_PREALLOCATED_GLOB,
      are = MEM_ARE,
      hbm = MEM_HBM,
      bram = MEM_BRAM,
      uram = MEM_URAM,
      streaming_connection = MEM_STREAMING_CONNECTION,
      host = MEM_HOST,
    };
    mem() = default;
    std::string get_tag() const;
    std::uint64_t get_base_address() const;
    std::uint64_t get_size_kb() const;
    bool get_used() const;
    memory_type get_type() const;
    std::int32_t get_index() const;

   private:
    std::shared_ptr<mem_impl> impl_;
  };

  class arg_impl;
  class arg {
   public:
    arg() = default;
    std::string get_name() const;
    std::vector<mem> get_mems() const;
    std::string get_port() const;
    std::uint64_t get_size() const;
    std::uint64_t get_offset() const;
    std::string get_host_type() const;
    std::size_t get_index() const;

   private:
    std::shared_ptr<arg_impl> impl_;
  };

  class ip_impl;
  class ip {
   public:
    enum class control_type : std::uint8_t { hs = 0, chain = 1, none = 2, fa = 5 };
    ip() = default;
    std::string get_name() const;
    control_type get_control_type() const;
    std::size_t get_num_args() const;
    std::vector<arg> get_args() const;
    arg get_arg(std::int32_t index) const;
    std::uint64_t get_base_address() const;
    std::size_t get_size() const;

   private:
    std::shared_ptr<ip_impl> impl_;
  };

  class kernel_impl;
  class kernel {
   public:
    kernel() = default;
    std::string get_name() const;
    std::vector<ip> get_cus() const;
    std::vector<ip> get_cus(const std::string& name) const;
    ip get_cu(const std::string& name) const;
    std::size_t get_num_args() const;
    std::vector<arg> get_args() const;
    arg get_arg(std::int32_t index) const;

   private:
    std::shared_ptr<kernel_impl> impl_;
  };

  xclbin() = default;
  // Upstream made these explicit (2.13 had them implicit).
  explicit xclbin(const std::string& filename);
  explicit xclbin(const std::vector<char>& data);
  explicit xclbin(const std::string_view& data);
  explicit xclbin(const axlf* top);

  std::vector<kernel> get_kernels() const;
  kernel get_kernel(const std::string& name) const;
  std::vector<ip> get_ips() const;
  std::vector<mem> get_mems() const;
  std::string get_xsa_name() const;
  std::string get_fpga_device_name() const;
  uuid get_uuid() const;
  uuid get_interface_uuid() const;
  target_type get_target_type() const;
  const axlf* get_axlf() const;

 private:
  std::shared_ptr<xclbin_impl> impl_;
};

}  // namespace xrt
