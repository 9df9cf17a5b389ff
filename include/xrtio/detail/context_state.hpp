// The shared state behind xrtio::context handles.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "xrtio/backend/backend.hpp"
#include "xrtio/memory_budget.hpp"

namespace xrtio::detail {

class reactor;

/// What every handle of one context shares: the device, its budget, the
/// kernels made so far and the runtime it is bound to.
struct context_state {
  std::shared_ptr<detail::reactor> bound_reactor;  // set by context::bind; else the default runtime
  std::shared_ptr<backend::native_device> device;
  std::optional<memory_budget> budget;
  std::mutex kernels_mutex;
  std::unordered_map<std::string, std::shared_ptr<backend::native_kernel>> kernels;
};
}  // namespace xrtio::detail
