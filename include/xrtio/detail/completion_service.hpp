// Per execution context, the runs whose handlers will run there: destroying
// the context (an io_context with runs pending) destroys their handlers
// without invoking them, while the reactor keeps their leases and native runs
// until the device lets go (docs/DESIGN.md, invariants 1 and 2).
#pragma once

#include <asio/execution_context.hpp>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>
#include <cstdint>

namespace xrtio::detail {

class run_op_base;

/// Per execution context: the runs whose handlers will run there, so that
/// destroying the context (io_context with a run pending) destroys their
/// handlers without invoking them, while the reactor keeps their leases and
/// native runs until the device lets go (invariant 2).
// Shared (from this): a read gathered before registration registers when
// the loop takes it (reactor::to_loop), from the registry it was counted in.
struct completion_registry : std::enable_shared_from_this<completion_registry> {
  std::mutex mutex;  // the table; the shutdown's wait for `posting`
  std::condition_variable idle;
  // The registered ops by slot (null: a free slot, listed in free_slots);
  // each op keeps its slot in run_op_base::reg_slot. A registration and a
  // removal touch this table and the op, never another op: the doubly
  // linked list this replaces wrote both neighbours of every op it
  // removed, ops whose lines the reactor had written last
  // (docs/PERFORMANCE.md, "The registry touches no other op"). Freed slots
  // are reused last-in first-out, so a steady load reuses the same few
  // lines and allocates nothing. The table never shrinks: a burst of N
  // pending runs keeps N slots (12 bytes each) until the context goes.
  std::vector<run_op_base*> table;
  std::vector<std::uint32_t> free_slots;
  // Away from the lock and the table: the reactor writes `posting` for
  // every batch it posts, the registering thread takes the lock for every
  // op. (shut_down and inline_candidates share posting's line; the latter
  // changes only for inline-candidate file reads.)
  // Reactor-side uses of pending ops' executors under way (a batch's post,
  // an executor comparison). Counted without the lock: the shutdown marks
  // the ops orphaned, then waits until this is 0 before destroying a
  // handler. A user enters (seq_cst) before it reads an op's `life`, and
  // the shutdown reads this after it changed them, so one sees the other.
  alignas(64) std::atomic<unsigned> posting{0};
  std::atomic<bool> shut_down{false};
  // Registered ops that are inline candidates (run_op_base::inline_candidate:
  // buffered, non-stream reads within their file's inline_read_limit) whose
  // handlers will run in this context, of any file and any runtime, from
  // their registration (launch_run, before the submission) until their
  // removal (before the handler runs) or the context's shutdown. Written
  // under `mutex`, read without it by the reactor's submission: more than
  // the op itself means other such reads are in flight, and on a runtime
  // whose file engine is the ring a read of at most 64 KiB goes to the ring
  // rather than being done at once (docs/DESIGN.md, "File I/O", "Alone at
  // once, together on the ring", for why the key is the context alone).
  std::atomic<unsigned> inline_candidates{0};
  // Reads done at once on the initiating thread, before any registration
  // (reactor::read_at_once), whose handlers have not begun: candidates too,
  // counted apart from the table (one atomic add before the read, one
  // subtract before the handler runs or as it is destroyed unrun, or when
  // the read goes the usual way), so that a read issued beside one of them
  // still joins the ring. The shutdown leaves it alone: those ops are not
  // in the table, and their functions queued in the context (which still
  // has this service then) take themselves out. A line of its own: the
  // reading thread writes it twice per read, the reactor `posting` for
  // every batch it posts to this context.
  alignas(64) std::atomic<unsigned> at_once{0};

  void enter() noexcept { posting.fetch_add(1, std::memory_order_seq_cst); }
  void leave() noexcept {
    // The shutdown sets shut_down before it reads posting: whichever of the
    // two comes second sees the other, so a waiting shutdown is woken.
    if (posting.fetch_sub(1, std::memory_order_seq_cst) == 1 && shut_down.load(std::memory_order_seq_cst)) {
      std::lock_guard lock(mutex);
      idle.notify_all();
    }
  }

  /// Throws std::bad_alloc when the table cannot grow (op not added).
  void add(run_op_base* op);
  /// add(), unless the context has shut down (a stale cached registry).
  bool try_add(run_op_base* op);
  void remove(run_op_base* op) noexcept;
};

/// Sets op->registry to the registry of `ctx` and adds op to it. The
/// calling thread remembers the last context it registered with, so that
/// the common case (a thread launching runs for one io_context) costs no
/// asio::use_service lookup (the service registry's mutex and list walk).
void register_completion(asio::execution_context& ctx, run_op_base* op);

/// The registry of `ctx` if the calling thread's last registration was
/// with it and it has not shut down; else null. No lock, no lookup: for a
/// read that may complete without registering (reactor::read_at_once).
completion_registry* registry_known_here(asio::execution_context& ctx) noexcept;

class completion_service : public asio::execution_context::service {
 public:
  using key_type = completion_service;
  static inline asio::execution_context::id id;
  explicit completion_service(asio::execution_context& ctx)
      : asio::execution_context::service(ctx), registry_(std::make_shared<completion_registry>()) {}
  const std::shared_ptr<completion_registry>& registry() const noexcept { return registry_; }

 private:
  void shutdown() override;
  std::shared_ptr<completion_registry> registry_;
};

}  // namespace xrtio::detail
