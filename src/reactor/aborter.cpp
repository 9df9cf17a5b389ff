// The aborter's workers (see aborter.hpp).
#include "aborter.hpp"

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

// A surplus worker detaches its own thread and leaves the list; it keeps the
// aborter alive through its shared_ptr until it returns. After stop() the
// list is empty: the workers are stop()'s to join, and none retires.
bool aborter::retire(std::thread::id self) noexcept {
  if (threads_.size() <= workers_kept) return false;
  for (auto it = threads_.begin(); it != threads_.end(); ++it) {
    if (it->get_id() != self) continue;
    it->detach();
    threads_.erase(it);
    return true;
  }
  return false;
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
  {
    std::lock_guard lock(mutex_);
    idle = !busy_ && queue_.empty();
    threads.swap(threads_);
  }
  for (auto& t : threads) {
    if (idle) t.join();
    else t.detach();
  }
}

}  // namespace xrtio::detail
