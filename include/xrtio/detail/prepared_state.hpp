// The shared state behind xrtio::prepared_run handles.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "xrtio/context.hpp"
#include "xrtio/detail/run_core.hpp"
#include "xrtio/run_options.hpp"

namespace xrtio::detail {

/// What every copy of a prepared_run shares: the kernel, the arguments bound
/// once to one native run, and whether an execution is in flight.
struct prepared_state {
  xrtio::kernel kernel;
  std::vector<arg_slot> slots;
  std::vector<access_request> reqs;
  run_options options;
  backend::native_run_ptr run;  // bound once; never destroyed before a final state (invariant 2)
  std::atomic<bool> in_flight{false};
  ~prepared_state();
};
std::shared_ptr<prepared_state> make_prepared(const kernel& k, std::vector<arg_slot> slots, std::size_t given,
                                              const run_options& options);

}  // namespace xrtio::detail
