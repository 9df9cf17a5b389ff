// The runs this process keeps for good because their device would not let
// go (docs/DESIGN.md, invariant 5): each record holds the native run, the
// buffers and the leases, so nothing a device may still write is freed.
#pragma once

#include <memory>
#include <vector>

#include "xrtio/context.hpp"
#include "xrtio/detail/abort_ticket.hpp"
#include "xrtio/detail/access_tracker.hpp"
#include "xrtio/prepared.hpp"

namespace xrtio::detail {

struct retained_record {
  xrtio::kernel kernel;
  std::vector<xrtio::buffer> buffers;
  std::vector<access_request> reqs;
  backend::native_run_ptr run;
  std::shared_ptr<prepared_state> prepared;  // a retained execution of a prepared run
  std::shared_ptr<abort_ticket> ticket;
  backend::native_run* native() const noexcept { return run ? run.get() : prepared ? prepared->run.get() : nullptr; }
};

/// Keeps `r` for the life of the process (or until reap_retained() finds its
/// run final). Never fails: out of memory stops the process rather than free
/// memory the device may still write.
void keep_retained(std::unique_ptr<retained_record> r) noexcept;

/// Out of memory while retaining: stops the process (see keep_retained).
[[noreturn]] void retention_out_of_memory() noexcept;

}  // namespace xrtio::detail
