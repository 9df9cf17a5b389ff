// The file engine without io_uring (seccomp, old kernels, qemu-user, or
// runtime_options::file_io_uring = false): a few threads doing pread/pwrite.
// A piece on a stream (a pipe) may block for ever, so its worker waits in
// poll() on the stream and on its own eventfd, which cancel() writes.
//
// Idle workers block in read() on one eventfd in semaphore mode, which
// flush() adds the number of new pieces to: each read takes one piece.
// Under qemu-user a condition variable here (notify_all after the queue
// push) now and then left every worker asleep with a piece queued, until
// the next flush woke them: a transfer completed only when the next one was
// submitted (1 run in a few hundred of the file tests, both reactor modes).
// The eventfd's count is kept by the kernel, so no wake-up can be lost.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <mutex>
#include <thread>
#include <vector>

#include "file_engine.hpp"
#include "util/atomic_intrusive_stack.hpp"

namespace xrtio::detail {

namespace {

class file_pool final : public file_engine {
 public:
  file_pool(unsigned threads, std::function<void()> wake) : wake_(std::move(wake)) {
    if (threads == 0) threads = 1;
    // A failure part-way (a descriptor, a thread's start, an allocation)
    // stops the workers already started before it throws: a joinable
    // std::thread destroyed with the vector would end the process
    // (std::terminate; seen when file_prepare's allocation failed, test
    // "...while the loop prepares its engine...").
    try {
      work_fd_ = ::eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
      if (work_fd_ < 0) throw std::system_error(errno, std::system_category(), "xrtio: file thread pool eventfd");
      workers_.resize(threads);
      for (auto& w : workers_) {
        // Without it a worker blocked on a stream could not be cancelled.
        w.cancel_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (w.cancel_fd < 0)
          throw std::system_error(errno, std::system_category(), "xrtio: file thread pool cancel eventfd");
      }
      for (unsigned i = 0; i < threads; ++i) workers_[i].thread = std::thread([this, i] { work(i); });
    } catch (...) {
      stop();
      throw;
    }
  }
  ~file_pool() override { stop(); }

  unsigned capacity() const noexcept override { return 1024; }

  void submit(file_piece* p) noexcept override {
    p->cancelled.store(false, std::memory_order_relaxed);
    p->worker.store(-1, std::memory_order_relaxed);
    p->next = nullptr;
    *pending_tail_ = p;
    pending_tail_ = &p->next;
    ++pending_count_;
  }

  void cancel(file_piece* p) noexcept override {
    // Either the worker sees the flag before it blocks, or this sees the
    // worker and ends its poll (both seq_cst; the fences, on both sides,
    // because qemu-user 7.2 lets aarch64's seq_cst load pass the seq_cst
    // store before it: reactor::announce_sleep).
    p->cancelled.store(true, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    int w = p->worker.load(std::memory_order_seq_cst);
    if (w >= 0) {
      std::uint64_t one = 1;
      [[maybe_unused]] auto n = ::write(workers_[unsigned(w)].cancel_fd, &one, sizeof one);
    }
  }

  bool flush() noexcept override {
    if (!pending_) return false;
    {
      std::lock_guard lock(mutex_);
      *queue_tail_ = pending_;
      queue_tail_ = pending_tail_;
    }
    pending_ = nullptr;
    pending_tail_ = &pending_;
    post(pending_count_);
    pending_count_ = 0;
    return true;
  }

  file_piece* reap() noexcept override { return done_.take_all_fifo(); }
  // Completions not yet reaped. The loop checks this after publishing that
  // it sleeps, and a worker pushes (seq_cst) before it reads that flag in
  // wake(): one of the two sees the other. file_ready_ alone is not enough:
  // the loop's relaxed store of false before a reap can land after a
  // worker's true (a store-load reordering), which under qemu-user left a
  // completion unseen by a driver blocked with no timer.
  bool ready() const noexcept override { return !done_.empty(); }

  bool uses_io_uring() const noexcept override { return false; }

 private:
  struct worker {
    std::thread thread;
    int cancel_fd = -1;
  };

  // Stops and joins the workers started, closes the descriptors made.
  void stop() noexcept {
    stop_.store(true, std::memory_order_release);
    if (work_fd_ >= 0) post(workers_.size());  // one token each: a worker that sees stop_ with nothing queued returns
    for (auto& w : workers_) {
      if (w.thread.joinable()) w.thread.join();
      if (w.cancel_fd >= 0) ::close(w.cancel_fd);
    }
    if (work_fd_ >= 0) ::close(work_fd_);
  }

  // Adds n to the workers' semaphore. A write to an eventfd fails only if
  // the count would overflow (2^64 - 2), which pieces in flight cannot reach.
  void post(std::uint64_t n) noexcept {
    while (::write(work_fd_, &n, sizeof n) < 0 && errno == EINTR) {
    }
  }

  void work(unsigned i) noexcept {
    for (;;) {
      std::uint64_t token;
      ssize_t got = ::read(work_fd_, &token, sizeof token);  // blocks until a piece (or stop) is posted
      if (got < 0) {
        if (errno == EINTR) continue;
        return;  // the descriptor is broken: nothing more can be handed to this worker
      }
      file_piece* p;
      {
        std::lock_guard lock(mutex_);
        p = queue_;
        if (!p) {
          // Tokens match queued pieces one for one; an empty queue means
          // the destructor's stop token.
          if (stop_.load(std::memory_order_acquire)) return;
          continue;
        }
        queue_ = p->next;
        if (!queue_) queue_tail_ = &queue_;
      }
      p->worker.store(int(i), std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);  // before perform() reads cancelled (cancel())
      p->result = perform(*p, workers_[i].cancel_fd);
      p->worker.store(-1, std::memory_order_relaxed);
      done_.push(p);
      wake_();
    }
  }

  static int perform(file_piece& p, int cancel_fd) noexcept {
    if (p.stream) {
      std::uint64_t v;
      while (::read(cancel_fd, &v, sizeof v) > 0) {
      }  // a stale signal for an earlier piece
      if (p.cancelled.load(std::memory_order_seq_cst)) return -ECANCELED;
      pollfd pf[2] = {{p.fd, short(p.write ? POLLOUT : POLLIN), 0}, {cancel_fd, POLLIN, 0}};
      for (;;) {
        int n = ::poll(pf, 2, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (pf[1].revents) return -ECANCELED;
        break;
      }
    } else if (p.cancelled.load(std::memory_order_seq_cst)) {
      return -ECANCELED;
    }
    for (;;) {
      ssize_t n;
      if (p.stream) n = p.write ? ::write(p.fd, p.memory, p.length) : ::read(p.fd, p.memory, p.length);
      else
        n = p.write ? ::pwrite(p.fd, p.memory, p.length, off_t(p.offset))
                    : ::pread(p.fd, p.memory, p.length, off_t(p.offset));
      if (n >= 0) return int(n);
      if (errno != EINTR) return -errno;
    }
  }

  std::function<void()> wake_;
  std::vector<worker> workers_;
  // Loop only: pieces submitted since the last flush.
  file_piece* pending_ = nullptr;
  file_piece** pending_tail_ = &pending_;
  std::uint64_t pending_count_ = 0;
  int work_fd_ = -1;  // the workers' semaphore: one token per queued piece, one per worker at stop
  std::mutex mutex_;  // queue_ (the loop appends, workers take)
  file_piece* queue_ = nullptr;
  file_piece** queue_tail_ = &queue_;
  std::atomic<bool> stop_{false};
  atomic_intrusive_stack<file_piece, &file_piece::next> done_;
};

}  // namespace

std::unique_ptr<file_engine> file_engine::make_pool(unsigned threads, std::function<void()> wake) {
  return std::make_unique<file_pool>(threads, std::move(wake));
}

}  // namespace xrtio::detail
