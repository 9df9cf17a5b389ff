// Grouping finished runs by executor (see executor_batcher.hpp).
#include "executor_batcher.hpp"

namespace xrtio::detail {

namespace {

struct groups {
  run_op_base* head[executor_batcher::max_groups];
  run_op_base** tail[executor_batcher::max_groups];
  unsigned size[executor_batcher::max_groups];
  unsigned count = 0;

  // The group `op` joins, or count when it needs a new one.
  unsigned find(run_op_base* op, unsigned max_batch) const noexcept {
    unsigned g = 0;
    while (g < count && !(size[g] < max_batch && head[g]->vt().same_executor(head[g], op))) ++g;
    return g;
  }
  void add(unsigned g, run_op_base* op) noexcept {
    op->batch_next = nullptr;
    if (g == count) {
      head[g] = op;
      size[g] = 0;
      ++count;
    } else {
      *tail[g] = op;
    }
    tail[g] = &op->batch_next;
    ++size[g];
  }
};

}  // namespace

std::uint64_t executor_batcher::post_all(run_op_base* done, unsigned max_batch, bool backlog) noexcept {
  std::uint64_t batches = 0;
  while (done) {
    groups gs;
    run_op_base* rest = nullptr;
    run_op_base** rest_tail = &rest;
    for (run_op_base* op = done; op;) {
      run_op_base* n = op->next;
      unsigned g = gs.find(op, max_batch);
      if (g == max_groups) {  // left for the next round
        *rest_tail = op;
        rest_tail = &op->next;
      } else {
        gs.add(g, op);
      }
      op = n;
    }
    *rest_tail = nullptr;
    for (unsigned g = 0; g < gs.count; ++g) {
      ++batches;
      gs.head[g]->vt().post_batch(gs.head[g], backlog);
    }
    done = rest;
  }
  return batches;
}

}  // namespace xrtio::detail
