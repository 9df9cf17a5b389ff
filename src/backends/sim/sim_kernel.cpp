// The simulated device's native kernel (sim_kernel in sim_types.hpp): the
// checks a kernel definition must pass when the device opens, and its pool of
// finished runs (runs are pooled per kernel, docs/DESIGN.md, "Backends").
#include <string>

#include "sim_types.hpp"
#include "xrtio/error.hpp"

namespace xrtio::sim::detail {

sim_kernel::sim_kernel(kernel_def def, sim_device_impl* d) : def_(std::move(def)), device_(d) {
  if (def_.args.size() > max_args)
    throw error(errc::too_many_arguments, "sim kernel " + def_.name + " declares " + std::to_string(def_.args.size()) +
                                              " arguments (max " + std::to_string(max_args) + ")");
  for (auto& a : def_.args)
    if (a.kind == backend::arg_kind::scalar && (a.size == 0 || a.size > max_scalar_bytes))
      throw error(errc::invalid_size, "sim kernel " + def_.name + ": scalar " + a.name + " of " +
                                          std::to_string(a.size) + " bytes (1.." + std::to_string(max_scalar_bytes) +
                                          " supported)");
}

backend::native_run_ptr sim_kernel::make_run() {
  if (auto* r = pool_.take()) return backend::native_run_ptr(r);
  device_->admit_run();  // before the run exists: a failure leaves nothing to undo
  return backend::native_run_ptr(new sim_run(this, device_));
}

}  // namespace xrtio::sim::detail
