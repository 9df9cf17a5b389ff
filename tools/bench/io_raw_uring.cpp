// raw-uring, the host limit: a bare liburing loop on one thread keeping
// queue_depth reads in flight. The file and the buffers are registered with
// the ring (IORING_OP_READ_FIXED on a fixed file) when the kernel allows it,
// the best case of what io_uring gives; no completion crosses a thread.
#include <liburing.h>
#include <sys/uio.h>

#include <thread>
#include <vector>

#include "io_common.hpp"
#include "io_contenders.hpp"
#include "io_pattern.hpp"
#include "process_usage.hpp"

namespace bench::io {
namespace {

struct uring_slot {
  aligned_buffer buf;
  std::uint64_t off = 0;
  clk::time_point issued;
};

class uring_cell {
 public:
  explicit uring_cell(const io_spec& s, int fd) : s_(s), fd_(fd), offsets_(s, 0x5eed0003) {
    int e = io_uring_queue_init(unsigned(s.depth), &ring_, 0);
    if (e < 0) throw unavailable(std::string("io_uring_queue_init: ") + std::strerror(-e));
    slots_.resize(std::size_t(s.depth));
    std::vector<iovec> iov;
    for (auto& sl : slots_) {
      sl.buf = make_aligned(s.bytes());
      iov.push_back({sl.buf.get(), s.bytes()});
    }
    fixed_ = io_uring_register_buffers(&ring_, iov.data(), unsigned(iov.size())) == 0 &&
             io_uring_register_files(&ring_, &fd_, 1) == 0;
  }
  uring_cell(const uring_cell&) = delete;
  uring_cell& operator=(const uring_cell&) = delete;
  ~uring_cell() { io_uring_queue_exit(&ring_); }

  void loop() {
    std::size_t in_flight = 0;
    for (std::size_t i = 0; i < slots_.size(); ++i, ++in_flight) prep(i);
    while (in_flight) {
      io_uring_cqe* cqe;
      int e = io_uring_submit_and_wait(&ring_, 1);
      if (e < 0 && e != -EINTR) {
        g_failed.fetch_add(in_flight);
        return;
      }
      unsigned head, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        auto i = std::size_t(cqe->user_data);
        auto& sl = slots_[i];
        complete(sl.issued, cqe->res == int(s_.bytes()) && verify(sl.buf.get(), s_.bytes(), sl.off));
        if (stopping()) --in_flight;
        else prep(i);
      }
      io_uring_cq_advance(&ring_, seen);
    }
  }
  bool fixed() const noexcept { return fixed_; }

 private:
  void prep(std::size_t i) {
    auto& sl = slots_[i];
    sl.off = offsets_.next();
    poison(sl.buf.get(), s_.bytes(), sl.off);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: depth SQEs, at most depth in flight
    if (fixed_) {
      io_uring_prep_read_fixed(sqe, 0, sl.buf.get(), unsigned(s_.bytes()), sl.off, int(i));
      sqe->flags |= IOSQE_FIXED_FILE;
    } else {
      io_uring_prep_read(sqe, fd_, sl.buf.get(), unsigned(s_.bytes()), sl.off);
    }
    sqe->user_data = i;
    sl.issued = clk::now();
  }

  const io_spec& s_;
  int fd_;
  offset_gen offsets_;
  io_uring ring_{};
  std::vector<uring_slot> slots_;
  bool fixed_ = false;
};

}  // namespace

io_result run_raw_uring(const io_spec& s) {
  cell_file file(s);
  uring_cell c(s, file.fd());
  std::thread t([&] {
    set_thread_name("c:uring");
    c.loop();
  });
  io_result r = measure_window(s.warm_s, s.window_s, s.bytes(), std::uint64_t(s.depth));
  t.join();
  finish_cell(r);
  r.effective_depth = s.depth;
  r.direct = s.cold;
  return r;
}

}  // namespace bench::io
