// Blocking aborts run here, on their own threads, never on the reactor loop
// (docs/DESIGN.md, invariant 4). One worker per concurrent abort: a slow
// abort must not hold back the others past their grace period (they would
// be retained needlessly). Workers beyond the first retire once idle for
// `worker_linger`: a burst of aborts (a thousand clients leaving at once)
// must not leave a thread per abort behind for good.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "xrtio/backend/backend.hpp"
#include "xrtio/detail/abort_ticket.hpp"

namespace xrtio::detail {

class aborter {
 public:
  /// How long a surplus idle worker waits for another abort before it ends.
  static constexpr std::chrono::milliseconds worker_linger{200};
  /// How many workers stay however long they idle (a count: whichever
  /// workers are left; start() makes the first).
  static constexpr std::size_t workers_kept = 1;

  /// Starts one worker; `on_done` runs (under the aborter's lock) after each
  /// abort settled its ticket.
  static std::shared_ptr<aborter> start(std::function<void()> on_done);

  /// Queues `run`'s abort; its outcome lands in `ticket`. Throws bad_alloc
  /// (the caller then treats the abort as refused: invariant 5).
  void enqueue(backend::native_run* run, std::shared_ptr<abort_ticket> ticket);

  /// Stops the workers: joins them when no abort is under way, else leaves
  /// them behind (their runs are retained, so what they touch stays alive;
  /// the workers share ownership of this object).
  void stop() noexcept;

 private:
  static void work(std::shared_ptr<aborter> self);
  void add_worker_if_needed(const std::shared_ptr<aborter>& self) noexcept;  // under mutex_
  bool retire(std::thread::id self) noexcept;                                 // under mutex_

  std::weak_ptr<aborter> self_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<backend::native_run*, std::shared_ptr<abort_ticket>>> queue_;
  bool stop_ = false;
  unsigned busy_ = 0;
  unsigned idle_ = 0;
  std::vector<std::thread> threads_;
  std::thread retired_;  // the last worker to retire (returning, or returned): joined by the next, or by stop()
  std::function<void()> on_done_;
};

}  // namespace xrtio::detail
