// The io_uring file engine: a ring per runtime, apart from the wait
// primitive's (whose submissions and waits are the reactor's sleep), with
// the reactor's wake eventfd registered so that a completion ends its sleep.
// Files and buffers that allow it are registered with it (sparse tables,
// ring_table.hpp; docs/DESIGN.md, "Registered files and fixed buffers").
#include <liburing.h>

#include "file_engine.hpp"
#include "ring_table.hpp"

namespace xrtio::detail {

namespace {

// A cancellation's own completion carries this tag (pieces carry their address).
constexpr std::uint64_t cancel_tag = 0;

class file_ring final : public file_engine {
 public:
  static constexpr unsigned entries = 256;
  static constexpr std::size_t max_fixed_buffer = std::size_t(1) << 30;

  file_ring() = default;
  bool init(int notify_fd, bool one_thread) noexcept {
    // A completion is run as task work in the thread that submitted its
    // request. By default the kernel interrupts that thread (an IPI) when it
    // is running; with COOP_TASKRUN it does not, and the work runs at the
    // thread's next entry into the kernel, or at once if it sleeps. The
    // reactor thread enters the kernel on every submission and sleep, and
    // runs the work itself while it spins when TASKRUN_FLAG says some is
    // waiting (reap, ready). 4 KiB O_DIRECT reads at queue depth 128 in the
    // default mode: 0.563 / 0.559 GiB/s without, 0.728 / 0.739 with
    // (docs/PERFORMANCE.md, "File I/O", "Completions without interrupts").
    // Only with one thread: a request another thread submitted would wait
    // for that thread to enter the kernel (in-loop mode may change drivers).
    // Kernels before 5.19 refuse the flags: then without them.
    bool ready = false;
    if (one_thread) {
      coop_ = true;
      ready = io_uring_queue_init(entries, &ring_, IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG) == 0;
    }
    if (!ready) {
      coop_ = false;
      if (io_uring_queue_init(entries, &ring_, 0) != 0) return false;
    }
    ok_ = true;
    // Without the eventfd a sleeping reactor would never hear of a
    // completion (it sleeps with no timer): then the thread pool serves.
    if (io_uring_register_eventfd(&ring_, notify_fd) != 0) return false;
    // Empty tables now, filled at first use. Refused (kernels before 5.19):
    // tables that are off, nothing registered, every request names the
    // plain descriptor and address.
    int forced = ring_table_slots_override.load(std::memory_order_relaxed);
    files_ = ring_table::make(&ring_, ring_table::kind::files, forced >= 0 ? unsigned(forced) : ring_file_slots);
    buffers_ = ring_table::make(&ring_, ring_table::kind::buffers, forced >= 0 ? unsigned(forced) : ring_buffer_slots);
    return true;
  }
  ~file_ring() override {
    // Before the exit: an owner's destructor on another thread must not
    // call io_uring_register on a ring that is gone.
    if (files_) files_->kill();
    if (buffers_) buffers_->kill();
    if (ok_) io_uring_queue_exit(&ring_);
  }

  int register_file(ring_registrations& owner, int fd, ring_registrations::event& ev) noexcept override {
    if (!files_) {
      ev = ring_registrations::event::refused;
      return -1;
    }
    return owner.slot_in(files_, [&](std::uint64_t id) { return files_->add_file(fd, id); }, ev);
  }
  int register_buffer(ring_registrations& owner, void* base, std::size_t length,
                      ring_registrations::event& ev) noexcept override {
    if (!buffers_) {
      ev = ring_registrations::event::refused;
      return -1;
    }
    // io_uring takes at most 1 GiB per fixed buffer: larger memory is
    // remembered as refused, like a full table, without asking.
    return owner.slot_in(
        buffers_, [&](std::uint64_t id) { return length > max_fixed_buffer ? -1 : buffers_->add_buffer(base, length, id); },
        ev);
  }

  unsigned capacity() const noexcept override { return entries; }

  void submit(file_piece* p) noexcept override {
    io_uring_sqe* sqe = sqe_();
    // Streams have no offsets: -1 reads or writes at the current position.
    std::uint64_t off = p->stream ? std::uint64_t(-1) : p->offset;
    int fd = p->file_slot >= 0 ? p->file_slot : p->fd;
    if (p->buf_index >= 0) {
      if (p->write) io_uring_prep_write_fixed(sqe, fd, p->memory, unsigned(p->length), off, p->buf_index);
      else io_uring_prep_read_fixed(sqe, fd, p->memory, unsigned(p->length), off, p->buf_index);
    } else {
      if (p->write) io_uring_prep_write(sqe, fd, p->memory, unsigned(p->length), off);
      else io_uring_prep_read(sqe, fd, p->memory, unsigned(p->length), off);
    }
    if (p->file_slot >= 0) sqe->flags |= IOSQE_FIXED_FILE;
    // A large cached read would otherwise be copied inside this thread's
    // io_uring_submit, one after another; a worker copies it on whichever
    // core is free (docs/DESIGN.md, "Copies on the kernel's workers").
    if (p->to_workers) sqe->flags |= IOSQE_ASYNC;
    io_uring_sqe_set_data(sqe, p);
  }

  void cancel(file_piece* p) noexcept override {
    io_uring_sqe* sqe = sqe_();
    io_uring_prep_cancel(sqe, p, 0);
    io_uring_sqe_set_data64(sqe, cancel_tag);
  }

  bool flush() noexcept override {
    if (io_uring_sq_ready(&ring_) == 0) return false;
    io_uring_submit(&ring_);
    return true;
  }

  file_piece* reap() noexcept override {
    file_piece* head = nullptr;
    file_piece** tail = &head;
    unsigned h, seen = 0;
    io_uring_cqe* cqe;
    if (task_work_waiting()) io_uring_get_events(&ring_);
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
  bool ready() const noexcept override { return io_uring_cq_ready(&ring_) > 0 || task_work_waiting(); }

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

  // COOP_TASKRUN: completions the kernel holds until this thread enters it.
  bool task_work_waiting() const noexcept {
    return coop_ && (IO_URING_READ_ONCE(*ring_.sq.kflags) & IORING_SQ_TASKRUN) != 0;
  }

  io_uring ring_{};
  bool ok_ = false;
  bool coop_ = false;
  std::shared_ptr<ring_table> files_;    // null: no registered files on this ring
  std::shared_ptr<ring_table> buffers_;  // null: no fixed buffers

};

}  // namespace

std::unique_ptr<file_engine> file_engine::make_ring(int notify_fd, bool one_thread) {
  auto r = std::make_unique<file_ring>();
  if (!r->init(notify_fd, one_thread)) return nullptr;
  return r;
}

}  // namespace xrtio::detail
