// Current-XRT API declarations for xrtio's syntax check (tests/xrt_current_api/README.md).
// Mirrors upstream xrt/xrt_kernel.h: xrt::run (incl. wait2 and
// run::command_error, XRT 2.15+) and xrt::kernel (incl. the hw_context
// constructor, XRT 2.14+). Declarations only; never linked.
#pragma once
#include <ert.h>  // Debian's ert_cmd_state, ert_packet

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "xrt/xrt_bo.h"
#include "xrt/xrt_device.h"
#include "xrt/xrt_hw_context.h"
#include "xrt/xrt_uuid.h"

namespace xrt {

class kernel;
class run_impl;

struct autostart {
  unsigned int iterations = 0;
};

class run {
 public:
  // Thrown by wait2() when the run ended in a state other than COMPLETED.
  class command_error : public std::exception {
   public:
    command_error(ert_cmd_state state, const std::string& what);
    ert_cmd_state get_command_state() const;
    const char* what() const noexcept override;
  };

  run() = default;
  explicit run(const kernel& k);
  run(const run&) = default;
  run(run&&) = default;
  run& operator=(const run&) = default;
  run& operator=(run&&) = default;
  ~run();

  void start();
  void start(const autostart& iterations);
  void stop();
  ert_cmd_state abort();
  // 0 ms blocks until the run completes; TIMEOUT when the wait timed out.
  ert_cmd_state wait(const std::chrono::milliseconds& timeout = std::chrono::milliseconds{0}) const;
  ert_cmd_state wait(unsigned int timeout_ms) const;
  // no_timeout: COMPLETED; timeout: still running; any other final state throws command_error.
  std::cv_status wait2(const std::chrono::milliseconds& timeout) const;
  void wait2() const;
  ert_cmd_state state() const;
  std::uint32_t return_code() const;
  void add_callback(ert_cmd_state state, std::function<void(const void*, ert_cmd_state, void*)> callback,
                    void* data);

  explicit operator bool() const;
  bool operator<(const run& other) const;

  template <class T>
  void set_arg(int index, T&& value) {
    set_arg_at_index(index, &value, sizeof(value));
  }
  void set_arg(int index, xrt::bo& b) { set_arg_at_index(index, b); }
  void set_arg(int index, const xrt::bo& b) { set_arg_at_index(index, b); }
  void set_arg(int index, xrt::bo&& b) { set_arg_at_index(index, b); }
  void set_arg(int index, const void* value, std::size_t bytes) { set_arg_at_index(index, value, bytes); }

  ert_packet* get_ert_packet() const;
  const std::shared_ptr<run_impl>& get_handle() const { return impl_; }

 private:
  void set_arg_at_index(int index, const void* value, std::size_t bytes);
  void set_arg_at_index(int index, const xrt::bo& b);
  std::shared_ptr<run_impl> impl_;
};

class kernel_impl;

class kernel {
 public:
  enum class cu_access_mode : std::uint8_t { exclusive = 0, shared = 1, none = 2 };

  kernel() = default;
  kernel(const xrt::device& device, const xrt::uuid& xclbin_id, const std::string& name,
         cu_access_mode mode = cu_access_mode::shared);
  kernel(const xrt::hw_context& ctx, const std::string& name);
  kernel(const kernel&) = default;
  kernel(kernel&&) = default;
  kernel& operator=(const kernel&) = default;
  kernel& operator=(kernel&&) = default;
  ~kernel();

  int group_id(int argno) const;
  std::uint32_t offset(int argno) const;
  std::string get_name() const;
  xrt::xclbin get_xclbin() const;

 private:
  std::shared_ptr<kernel_impl> impl_;
};

}  // namespace xrt
