// Current-XRT API declarations for xrtio's syntax check (tests/xrt_current_api/README.md).
// Mirrors upstream xrt/experimental/xrt_kernel.h: xrt::runlist (XRT 2.17+).
// Declarations only; never linked.
#pragma once
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <string>

#include "xrt/xrt_hw_context.h"
#include "xrt/xrt_kernel.h"

namespace xrt {

class runlist_impl;

// Runs of kernels of one hw_context, executed in order, atomically.
class runlist {
 public:
  // Thrown by wait() (and poll()) with the first run that did not complete.
  class command_error : public std::exception {
   public:
    command_error(const xrt::run& run, ert_cmd_state state, const std::string& what);
    xrt::run get_run() const;
    ert_cmd_state get_command_state() const;
    const char* what() const noexcept override;
  };

  runlist() = default;
  explicit runlist(const xrt::hw_context& ctx);
  ~runlist();

  void add(const xrt::run& run);
  void add(xrt::run&& run);
  void execute();
  std::cv_status wait(const std::chrono::milliseconds& timeout) const;
  void wait() const;
  // COMPLETED when every run completed (also for an empty list).
  ert_cmd_state state() const;
  void reset();

 private:
  std::shared_ptr<runlist_impl> impl_;
};

}  // namespace xrt
