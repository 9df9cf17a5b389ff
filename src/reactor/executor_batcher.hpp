// Hands finished runs to their handlers' executors, batched: runs whose
// executors compare equal (same type, same executor: one strand, one
// io_context executor) are posted together, costing one post; runs on
// different executors, even of one execution context, never share a batch
// (docs/DESIGN.md, invariant 1).
#pragma once

#include <cstdint>

#include "xrtio/detail/run_op.hpp"

namespace xrtio::detail {

class executor_batcher {
 public:
  /// Groups compared per round. Finding a run's group is a linear search, so
  /// this bounds the comparisons per run; runs of a 17th executor wait for
  /// the next round (same pass), keeping their order.
  static constexpr unsigned max_groups = 16;

  /// Posts every run of `done` (linked through next, in completion order),
  /// at most `max_batch` to a batch, preserving order within an executor.
  /// Returns the number of batches posted. `backlog`: posted by the loop,
  /// counted in its backlog (run_op_base::vtable::post_batch).
  static std::uint64_t post_all(run_op_base* done, unsigned max_batch, bool backlog) noexcept;
};

}  // namespace xrtio::detail
