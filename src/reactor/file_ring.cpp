// The io_uring file engine: a ring per runtime, apart from the wait
// primitive's (whose submissions and waits are the reactor's sleep), with
// the reactor's wake eventfd registered so that a completion ends its sleep.
#include <liburing.h>

#include "file_engine.hpp"

namespace xrtio::detail {

namespace {

// A cancellation's own completion carries this tag (pieces carry their address).
constexpr std::uint64_t cancel_tag = 0;

class file_ring final : public file_engine {
 public:
  static constexpr unsigned entries = 256;

  file_ring() = default;
  bool init(int notify_fd) noexcept {
    if (io_uring_queue_init(entries, &ring_, 0) != 0) return false;
    ok_ = true;
    // Without the eventfd a sleeping reactor would never hear of a
    // completion (it sleeps with no timer): then the thread pool serves.
    return io_uring_register_eventfd(&ring_, notify_fd) == 0;
  }
  ~file_ring() override {
    if (ok_) io_uring_queue_exit(&ring_);
  }

  unsigned capacity() const noexcept override { return entries; }

  void submit(file_piece* p) noexcept override {
    io_uring_sqe* sqe = sqe_();
    // Streams have no offsets: -1 reads or writes at the current position.
    std::uint64_t off = p->stream ? std::uint64_t(-1) : p->offset;
    if (p->write) io_uring_prep_write(sqe, p->fd, p->memory, unsigned(p->length), off);
    else io_uring_prep_read(sqe, p->fd, p->memory, unsigned(p->length), off);
    io_uring_sqe_set_data(sqe, p);
  }

  void cancel(file_piece* p) noexcept override {
    io_uring_sqe* sqe = sqe_();
    io_uring_prep_cancel(sqe, p, 0);
    io_uring_sqe_set_data64(sqe, cancel_tag);
  }

  void flush() noexcept override {
    if (io_uring_sq_ready(&ring_) > 0) io_uring_submit(&ring_);
  }

  file_piece* reap() noexcept override {
    file_piece* head = nullptr;
    file_piece** tail = &head;
    unsigned h, seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, h, cqe) {
      ++seen;
      if (cqe->user_data == cancel_tag) continue;
      auto* p = static_cast<file_piece*>(io_uring_cqe_get_data(cqe));
      p->result = cqe->res;
      p->next = nullptr;
      *tail = p;
      tail = &p->next;
    }
    io_uring_cq_advance(&ring_, seen);
    return head;
  }

  bool uses_io_uring() const noexcept override { return true; }
  bool ready() const noexcept override { return io_uring_cq_ready(&ring_) > 0; }

 private:
  // A full submission queue is submitted to make room (the reactor keeps
  // pieces in flight under `entries`, and cancellations are few).
  io_uring_sqe* sqe_() noexcept {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (!sqe) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }

  io_uring ring_{};
  bool ok_ = false;
};

}  // namespace

std::unique_ptr<file_engine> file_engine::make_ring(int notify_fd) {
  auto r = std::make_unique<file_ring>();
  if (!r->init(notify_fd)) return nullptr;
  return r;
}

}  // namespace xrtio::detail
