// The calling thread's non-blocking read ring (see caller_ring.hpp).
#include "caller_ring.hpp"

#include <sys/uio.h>

#include <cerrno>
#include <memory>
#include <new>

namespace xrtio::detail {

std::atomic<int> caller_ring_fault{0};

namespace {
// The ring of this thread: made at its first use, closed at its exit.
// `slot_gone` (trivially destructible, so still readable) marks the slot
// destroyed: a flush run later on this thread (a static io_context
// destroyed at exit with one queued) finds no ring and hands its reads on.
struct thread_slot {
  std::unique_ptr<caller_ring> ring;
  bool refused = false;
  ~thread_slot();
};
thread_local bool slot_gone = false;
thread_local thread_slot this_thread;
thread_slot::~thread_slot() { slot_gone = true; }

// Takes a fault the test seam set, if it is `which`.
bool take_fault(int which) noexcept {
  if (caller_ring_fault.load(std::memory_order_relaxed) != which) return false;
  int expected = which;
  return caller_ring_fault.compare_exchange_strong(expected, 0);
}
}  // namespace

caller_ring* caller_ring::of_this_thread() noexcept {
  if (slot_gone) return nullptr;
  auto& slot = this_thread;
  if (slot.ring) return slot.ring->failed_ ? nullptr : slot.ring.get();
  if (slot.refused) return nullptr;
  std::unique_ptr<caller_ring> r(new (std::nothrow) caller_ring);
  if (!r || !r->init()) {
    slot.refused = true;
    return nullptr;
  }
  slot.ring = std::move(r);
  return slot.ring.get();
}

bool caller_ring::init() noexcept {
  if (take_fault(1)) return false;
  // SUBMIT_ALL (5.18): a request refused at submission gets its CQE and the
  // others go on, so a submission stops short only when the kernel is out
  // of resources. Older kernels refuse the flag: then without it.
  io_uring_params p{};
#ifdef IORING_SETUP_SUBMIT_ALL
  p.flags = IORING_SETUP_SUBMIT_ALL;
#endif
  if (io_uring_queue_init_params(entries, &ring_, &p) != 0) {
    io_uring_params plain{};
    if (io_uring_queue_init_params(entries, &ring_, &plain) != 0) return false;
  }
  open_ = true;
  return true;
}

void caller_ring::close() noexcept {
  if (open_) io_uring_queue_exit(&ring_);
  open_ = false;
  failed_ = true;
}

caller_ring::~caller_ring() {
  if (open_) io_uring_queue_exit(&ring_);
}

void caller_ring::read_all(std::span<request> rs) noexcept {
  if (rs.size() > entries) rs = rs.first(entries);
  for (auto& r : rs) r.result = -ECANCELED;
  if (rs.empty()) return;
  auto prep = [&](request& r) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: the queue is empty between calls
    io_uring_prep_read(sqe, r.fd, r.memory, r.length, r.offset);
    sqe->rw_flags = RWF_NOWAIT;
    io_uring_sqe_set_data(sqe, &r);
  };
  if (take_fault(2)) {
    // Test: the kernel takes the first request only; the rest stay queued.
    prep(rs[0]);
    io_uring_submit_and_wait(&ring_, 1);
    for (std::size_t i = 1; i < rs.size(); ++i) prep(rs[i]);
  } else {
    for (auto& r : rs) prep(r);
    // Waits for every completion, which NOWAIT reads post within the
    // submission, so the wait ends at once. A signal may end it early
    // (-EINTR) after the submission: what the kernel took is counted below
    // from the queue itself, not from this result.
    io_uring_submit_and_wait(&ring_, unsigned(rs.size()));
  }
  unsigned taken = unsigned(rs.size()) - io_uring_sq_ready(&ring_);
  bool lost = false;
  for (unsigned seen = 0; seen < taken;) {
    io_uring_cqe* cqe = nullptr;
    int e = io_uring_wait_cqe(&ring_, &cqe);
    if (e == -EINTR) continue;
    if (e != 0 || !cqe) {
      // Not seen on a sane kernel. The requests without a result go on
      // elsewhere (their NOWAIT copies are done or never happen), and
      // the ring must not report them later.
      lost = true;
      break;
    }
    static_cast<request*>(io_uring_cqe_get_data(cqe))->result = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    ++seen;
  }
  // Requests still queued would be submitted by the next call, after their
  // transfers went on elsewhere: close the ring instead. -EINVAL: this
  // kernel's io_uring takes no RWF_NOWAIT reads; the thread stops gathering.
  bool refused = false;
  for (auto& r : rs) refused |= r.result == -EINVAL;
  if (lost || refused || taken < rs.size()) close();
}

}  // namespace xrtio::detail
