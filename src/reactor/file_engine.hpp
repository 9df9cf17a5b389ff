// Where the reactor's file transfers are performed, piece by piece: the
// runtime's own io_uring ring (file_ring.cpp), or where io_uring is refused
// or turned off, a small thread pool doing pread/pwrite (file_pool.cpp).
// Only the loop (reactor thread or in-loop driver) calls an engine.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "ring_registrations.hpp"

namespace xrtio::detail {

class file_op_base;

/// One read or write of at most file_options::chunk_size bytes.
struct file_piece {
  file_op_base* op = nullptr;
  std::uint64_t offset = 0;  // file offset (ignored for streams)
  std::byte* memory = nullptr;
  std::size_t length = 0;
  std::size_t rel = 0;  // offset of memory within the transfer
  int fd = -1;
  int file_slot = -1;  // io_uring: fd's slot in the ring's file table (IOSQE_FIXED_FILE), -1: none
  int buf_index = -1;  // io_uring: the fixed buffer memory lies in (READ_FIXED / WRITE_FIXED), -1: none
  bool stream = false;
  bool write = false;
  bool to_workers = false;  // io_uring: IOSQE_ASYNC (file_options::worker_read_min)
  bool copied = false;      // a buffered read: its bytes count in reactor::copy_bytes_live_
  int result = 0;  // bytes, or -errno
  file_piece* op_next = nullptr;  // the op's pieces in flight
  file_piece* next = nullptr;     // engine queues, free list
  // Thread pool only: cancellation of a piece a worker may be blocked on.
  std::atomic<bool> cancelled{false};
  std::atomic<int> worker{-1};
};

class file_engine {
 public:
  virtual ~file_engine() = default;
  /// Most pieces in flight at once.
  virtual unsigned capacity() const noexcept = 0;
  /// Queues `p` (submitted by the next flush).
  virtual void submit(file_piece* p) noexcept = 0;
  /// Asks the kernel (or worker) to give up `p`; it completes all the same.
  virtual void cancel(file_piece* p) noexcept = 0;
  /// Hands queued pieces and cancellations to the kernel or the workers, all
  /// at once (the ring: one io_uring_submit; the pool: one write to its work
  /// eventfd for the queued pieces, cancellations being signalled by
  /// cancel() itself). Returns whether there was anything to hand over.
  virtual bool flush() noexcept = 0;
  /// Completed pieces, linked through next.
  virtual file_piece* reap() noexcept = 0;
  virtual bool uses_io_uring() const noexcept = 0;
  /// Completions are waiting to be reaped (io_uring: the completion queue,
  /// read without a system call; the pool: its stack of finished pieces).
  virtual bool ready() const noexcept { return false; }
  /// io_uring: the slot of `fd` (the file `owner` stands for) in the ring's
  /// file table, registered on the first call for this owner; -1 where it
  /// is not registered (the pool, no table, table full, refused).
  virtual int register_file(ring_registrations& owner, int fd, ring_registrations::event& ev) noexcept {
    ev = ring_registrations::event::none;
    (void)owner, (void)fd;
    return -1;
  }
  /// The same for memory [base, base + length) as a fixed buffer.
  virtual int register_buffer(ring_registrations& owner, void* base, std::size_t length,
                              ring_registrations::event& ev) noexcept {
    ev = ring_registrations::event::none;
    (void)owner, (void)base, (void)length;
    return -1;
  }

  /// An io_uring engine whose completions also write `notify_fd` (the
  /// reactor's wake eventfd), or null where io_uring or that registration
  /// is refused. `one_thread`: only one thread, for the ring's whole life,
  /// submits to it and reaps it (the reactor thread), so completions need
  /// not interrupt it (file_ring.cpp).
  static std::unique_ptr<file_engine> make_ring(int notify_fd, bool one_thread);
  /// `threads` workers; `wake` is called after each completion.
  static std::unique_ptr<file_engine> make_pool(unsigned threads, std::function<void()> wake);
};

}  // namespace xrtio::detail
