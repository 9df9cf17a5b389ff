// The xrtio::errc error category: messages for every code, and the map
// from final run states to codes (docs/DESIGN.md, "Errors").
#include "xrtio/error.hpp"

#include "xrtio/run_state.hpp"

namespace xrtio {
namespace {
class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "xrtio"; }
  std::string message(int v) const override {
    switch (static_cast<errc>(v)) {
      case errc::invalid_size: return "invalid size";
      case errc::out_of_range:
        return "out of range: a buffer or file range past its end, a memory bank the device lacks, "
               "or an argument index the kernel lacks";
      case errc::range_in_use: return "range in use by an overlapping access";
      case errc::range_retained: return "range held by a retained run";
      case errc::budget_exceeded: return "memory budget exceeded";
      case errc::too_many_arguments: return "too many run arguments";
      case errc::argument_count: return "argument count does not match the kernel";
      case errc::argument_kind: return "argument kind does not match the kernel";
      case errc::unknown_kernel: return "unknown kernel";
      case errc::foreign_context: return "buffer of another context";
      case errc::invalid_xclbin: return "invalid xclbin";
      case errc::backend_failure: return "backend failure";
      case errc::device_lost: return "device lost";
      case errc::run_error: return "run ended in state ERROR";
      case errc::run_aborted: return "run ended in state ABORT";
      case errc::run_timeout_state: return "run ended in state TIMEOUT";
      case errc::run_no_response: return "run ended in state NORESPONSE";
      case errc::soft_kernel_error: return "run ended in state SKERROR";
      case errc::soft_kernel_crashed: return "run ended in state SKCRASHED";
      case errc::timed_out: return "timed out: a run aborted on the device, a run or transfer withdrawn while waiting for its leases, or a transfer's pieces cancelled";
      case errc::abort_failed: return "abort refused or too slow: run retained";
      case errc::busy: return "busy: the run is still in flight, or another thread drives the runtime";
      case errc::shut_down: return "runtime shut down";
      case errc::not_supported: return "not supported";
      case errc::misaligned: return "misaligned transfer";
      case errc::invalid_option: return "option out of range";
    }
    return "unknown xrtio error " + std::to_string(v);
  }
};
}  // namespace

const std::error_category& error_category() noexcept {
  static const category c;
  return c;
}

void throw_error(errc code, const std::string& what) { throw error(code, what); }

std::string_view to_string(run_state s) noexcept {
  switch (s) {
    case run_state::new_: return "NEW";
    case run_state::queued: return "QUEUED";
    case run_state::running: return "RUNNING";
    case run_state::completed: return "COMPLETED";
    case run_state::error: return "ERROR";
    case run_state::abort: return "ABORT";
    case run_state::submitted: return "SUBMITTED";
    case run_state::timeout: return "TIMEOUT";
    case run_state::no_response: return "NORESPONSE";
    case run_state::skerror: return "SKERROR";
    case run_state::skcrashed: return "SKCRASHED";
  }
  return "UNKNOWN";
}
}  // namespace xrtio
