// The aborter's workers (see aborter.hpp).
#include "aborter.hpp"

#include <algorithm>

namespace xrtio::detail {

std::shared_ptr<aborter> aborter::start(std::function<void()> on_done) {
  auto a = std::make_shared<aborter>();
  a->self_ = a;
  a->on_done_ = std::move(on_done);
  std::lock_guard lock(a->mutex_);
  a->threads_.emplace_back(&aborter::work, a);
  return a;
}

void aborter::enqueue(backend::native_run* run, std::shared_ptr<abort_ticket> ticket) {
  {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(run, std::move(ticket));
    add_worker_if_needed(self_.lock());
  }
  cv_.notify_one();
}

void aborter::work(std::shared_ptr<aborter> a) {
  std::unique_lock lock(a->mutex_);
  auto ready = [&] { return a->stop_ || !a->queue_.empty(); };
  for (;;) {
    ++a->idle_;
    if (!a->cv_.wait_for(lock, worker_linger, ready)) {
      if (a->retire(std::this_thread::get_id())) {
        --a->idle_;
        return;
      }
      a->cv_.wait(lock, ready);
    }
    --a->idle_;
    if (a->queue_.empty()) return;
    auto [run, ticket] = std::move(a->queue_.front());
    a->queue_.pop_front();
    ++a->busy_;
    lock.unlock();
    backend::abort_outcome out;
    try {
      out = run->abort();
    } catch (...) {
      out = backend::abort_outcome::refused;
    }
    ticket->set(out == backend::abort_outcome::done ? abort_ticket::done : abort_ticket::refused);
    lock.lock();
    --a->busy_;
    if (a->on_done_) a->on_done_();
  }
}

void aborter::add_worker_if_needed(const std::shared_ptr<aborter>& self) noexcept {
  if (queue_.size() <= idle_) return;
  try {
    threads_.emplace_back(&aborter::work, self);
  } catch (...) {
    // No thread: the queued abort waits for a busy worker.
  }
}

// A surplus worker moves its own thread to retired_ and returns. Someone
// else joins it: the next worker to retire (so the slot holds one thread at
// most), or stop(). A retired worker needs the lock no more, and holds no
// last reference while it is in the slot: the reactor holds one until
// stop(), and no worker retires once stop_ is set. So joining it never waits
// on anything but its return, and stop() leaves no aborter code running
// behind it when every worker was idle.
bool aborter::retire(std::thread::id self) noexcept {
  if (threads_.size() <= workers_kept) return false;
  auto it = std::find_if(threads_.begin(), threads_.end(), [&](const std::thread& t) { return t.get_id() == self; });
  if (it == threads_.end()) return false;
  if (retired_.joinable()) retired_.join();
  retired_ = std::move(*it);
  threads_.erase(it);
  return true;
}

void aborter::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    on_done_ = nullptr;
  }
  cv_.notify_all();
  bool idle;
  std::vector<std::thread> threads;
  std::thread retired;
  {
    std::lock_guard lock(mutex_);
    idle = !busy_ && queue_.empty();
    threads.swap(threads_);
    retired.swap(retired_);
  }
  if (retired.joinable()) retired.join();  // returning already (retire)
  for (auto& t : threads) {
    if (idle) t.join();
    else t.detach();
  }
}

}  // namespace xrtio::detail
