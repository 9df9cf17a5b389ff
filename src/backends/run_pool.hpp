// A kernel's finished native runs, kept for reuse: making a run costs an
// allocation (and, on XRT, a command buffer), so in steady state a backend
// hands out pooled runs and allocates nothing per run.
#pragma once

#include <cstddef>
#include <limits>
#include <mutex>
#include <vector>

namespace xrtio::detail {

template <class Run>
class run_pool {
 public:
  /// Keeps at most `capacity` idle runs; more are deleted when given back.
  explicit run_pool(std::size_t capacity = std::numeric_limits<std::size_t>::max()) : capacity_(capacity) {}
  run_pool(const run_pool&) = delete;
  run_pool& operator=(const run_pool&) = delete;
  /// Pooled runs are final (their owners checked before giving them back).
  ~run_pool() {
    for (auto* r : idle_) delete r;
  }

  /// An idle run, or null when there is none.
  Run* take() noexcept {
    std::lock_guard lock(mutex_);
    if (idle_.empty()) return nullptr;
    Run* r = idle_.back();
    idle_.pop_back();
    return r;
  }

  /// Takes `r` back for reuse; deletes it when the pool is full or out of memory.
  void give(Run* r) noexcept {
    {
      std::lock_guard lock(mutex_);
      if (idle_.size() < capacity_) {
        try {
          idle_.push_back(r);
          return;
        } catch (...) {
        }
      }
    }
    delete r;
  }

 private:
  std::size_t capacity_;
  std::mutex mutex_;
  std::vector<Run*> idle_;
};

}  // namespace xrtio::detail
