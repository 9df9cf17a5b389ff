// The reactor's blocking wait (see wait_primitive.hpp).
#include "wait_primitive.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "xrtio/error.hpp"

namespace xrtio::detail {

namespace {
template <class TS>
void set_timespec(TS& ts, std::chrono::nanoseconds left) noexcept {
  auto s = std::chrono::duration_cast<std::chrono::seconds>(left);
  ts.tv_sec = s.count();
  ts.tv_nsec = (left - s).count();
}
}  // namespace

wait_primitive::wait_primitive(bool try_io_uring) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw error(errc::backend_failure, "runtime: eventfd failed");
  // Where io_uring is refused, or lacks timed waits (IORING_FEAT_EXT_ARG,
  // Linux 5.11), fall back to eventfd + ppoll; stats() says which.
  if (try_io_uring && io_uring_queue_init(ring_entries, &ring_, 0) == 0) {
    if (ring_.features & IORING_FEAT_EXT_ARG) uring_ = true;
    else io_uring_queue_exit(&ring_);
  }
}

wait_primitive::~wait_primitive() {
  if (uring_) io_uring_queue_exit(&ring_);
  for (auto& w : watches_)
    if (w.serial) ::close(w.fd);
  ::close(wake_fd_);
}

void wait_primitive::notify() noexcept {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
}

unsigned wait_primitive::watches() const noexcept {
  unsigned n = 0;
  for (auto& w : watches_) n += w.serial != 0;
  return n;
}

bool wait_primitive::wait(clock::time_point until, std::span<backend::native_device* const> sources) noexcept {
  bool woken = uring_ ? wait_uring(until, sources) : wait_ppoll(until, sources);
  if (woken) {
    std::uint64_t v;
    [[maybe_unused]] auto n = ::read(wake_fd_, &v, sizeof v);
  }
  return woken;
}

bool wait_primitive::watch_source(backend::native_device* d, bool& pending) noexcept {
  auto serial = d->event_serial();
  if (serial == 0) return false;
  watch* w = nullptr;
  for (auto& x : watches_)
    if (x.serial == serial) {
      w = &x;
      break;
    }
  if (!w && !(w = new_watch(d))) return false;
  if (w->fired) {
    // It fired while no wait listed it (its write may be a run of ours that
    // was pushed but not yet taken in): acknowledge it now that the device
    // is known to be alive, and scan before sleeping.
    w->fired = 0;
    d->event_seen();
    pending = true;
  }
  if (!w->armed) arm(*w);
  return w->armed;
}

// A free slot, else the least recently listed watch of a device this wait
// does not list.
wait_primitive::watch* wait_primitive::new_watch(backend::native_device* d) noexcept {
  watch* slot = nullptr;
  for (auto& x : watches_) {
    if (x.serial == 0) {
      slot = &x;
      break;
    }
    if (x.seen != wait_seq_ && (!slot || x.seen < slot->seen)) slot = &x;
  }
  if (!slot || (slot->serial && !drop(*slot))) return nullptr;
  int fd = ::fcntl(d->event_fd(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  slot->serial = d->event_serial();
  slot->fd = fd;
  slot->dev = d;
  slot->seen = wait_seq_;
  return slot;
}

void wait_primitive::arm(watch& w) noexcept {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (!sqe) return;
  w.tag = watch_bit | (++armings_ << 8) | std::uint64_t(&w - watches_);
  io_uring_prep_poll_multishot(sqe, w.fd, POLLIN);
  io_uring_sqe_set_data64(sqe, w.tag);
  w.armed = true;
}

bool wait_primitive::drop(watch& w) noexcept {
  if (w.armed) {
    // With no room for the removal the watch stays as it is: closing the
    // duplicate would leave its poll armed for the ring's life.
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) return false;
    io_uring_prep_poll_remove(sqe, w.tag);
    io_uring_sqe_set_data64(sqe, removal_tag);
  }
  // The poll holds the file until its removal completes; its last
  // completion then carries a tag no slot has any more.
  ::close(w.fd);
  w = watch{};
  return true;
}

bool wait_primitive::watch_fired(const io_uring_cqe& cqe) noexcept {
  std::uint64_t tag = cqe.user_data;
  watch& w = watches_[(tag & 0xff) % max_watches];
  if (w.serial == 0 || w.tag != tag) return false;  // a dropped watch's, or an earlier arming's
  if (!(cqe.flags & IORING_CQE_F_MORE)) w.armed = false;  // ended (an overflowing CQ): armed again next wait
  if (cqe.res < 0) {
    if (cqe.res != -EINVAL) return false;
    refuse_multishot();
    return true;  // end the wait: the next one polls the devices one-shot
  }
  if (w.seen == wait_seq_) {
    w.dev->event_seen();
    return true;
  }
  // Not listed by this wait: the device may be gone, so it is not touched.
  // A device that keeps firing while this reactor has no runs on it (runs
  // of another runtime) loses its watch; the next wait that lists it
  // watches it again.
  if (++w.fired >= 2) (void)drop(w);
  return false;
}

void wait_primitive::refuse_multishot() noexcept {
  multishot_ = false;
  for (auto& w : watches_)
    if (w.serial) {
      w.armed = false;  // refused: nothing to remove
      (void)drop(w);
    }
}

bool wait_primitive::wait_uring(clock::time_point until, std::span<backend::native_device* const> sources) noexcept {
  bool forever = until == clock::time_point::max();
  // The wake fd keeps a one-shot poll, read after it fired: the file ring
  // writes it for every batch of its completions (file_ring.cpp), which a
  // multishot poll would turn into a completion and a task_work on this
  // thread each, reaped by nobody while the loop spins over file I/O.
  if (!wake_armed_) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_poll_add(sqe, wake_fd_, POLLIN);
    io_uring_sqe_set_data64(sqe, wake_tag);
    wake_armed_ = true;
  }
  // One-shot device polls are tagged with this wait's number; those left
  // armed by the previous wait are removed in the same submission.
  ++wait_seq_;
  for (unsigned i = 0; i < armed_count_; ++i) {
    if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) {
      io_uring_prep_poll_remove(sqe, armed_tags_[i]);
      io_uring_sqe_set_data64(sqe, removal_tag);
    }
  }
  armed_count_ = 0;
  bool woken = false, event = false;
  // Listed devices' watches are marked first, so that a new watch made for
  // one of them never evicts another's.
  for (unsigned i = 0; i < sources.size() && i < max_sources; ++i)
    if (auto serial = sources[i]->event_serial())
      for (auto& x : watches_)
        if (x.serial == serial) {
          x.dev = sources[i];
          x.seen = wait_seq_;
          break;
        }
  for (unsigned i = 0; i < sources.size() && i < max_sources; ++i) {
    if (multishot_ && watch_source(sources[i], event)) continue;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) break;
    std::uint64_t tag = (wait_seq_ << 8) | (first_source_tag + i);
    io_uring_prep_poll_add(sqe, sources[i]->event_fd(), POLLIN);
    io_uring_sqe_set_data64(sqe, tag);
    armed_tags_[armed_count_++] = tag;
  }
  if (event) {
    io_uring_submit(&ring_);
    return false;
  }
  // The completions of removed polls also end a wait: wait again, for what
  // is left of the time, until a notify, a device event or the time limit.
  for (;;) {
    __kernel_timespec kts{};
    if (!forever) {
      auto rest = until - clock::now();
      set_timespec(kts, std::max<clock::duration>(rest, clock::duration::zero()));
    }
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, forever ? nullptr : &kts, nullptr);
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      std::uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == wake_tag) {
        wake_armed_ = false;
        woken = true;
      } else if (tag & watch_bit) {
        if (watch_fired(*cqe)) event = true;
      } else if (tag >> 8 == wait_seq_ && (tag & 0xff) >= first_source_tag && cqe->res >= 0) {
        unsigned i = unsigned(tag & 0xff) - first_source_tag;
        for (unsigned j = 0; j < armed_count_; ++j)
          if (armed_tags_[j] == tag) armed_tags_[j] = armed_tags_[--armed_count_];
        if (i < sources.size()) sources[i]->consume_event();
        event = true;
      }
    }
    io_uring_cq_advance(&ring_, seen);
    if (woken || event || rc == -ETIME || (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)) break;
    if (!forever && clock::now() >= until) break;
  }
  return woken;
}

bool wait_primitive::wait_ppoll(clock::time_point until, std::span<backend::native_device* const> sources) noexcept {
  bool forever = until == clock::time_point::max();
  timespec ts{};
  if (!forever) set_timespec(ts, std::max<clock::duration>(until - clock::now(), clock::duration::zero()));
  pollfd pfd[1 + max_sources];
  unsigned n = std::min<unsigned>(unsigned(sources.size()), max_sources);
  pfd[0] = {wake_fd_, POLLIN, 0};
  for (unsigned i = 0; i < n; ++i) pfd[1 + i] = {sources[i]->event_fd(), POLLIN, 0};
  bool woken = false;
  if (::ppoll(pfd, 1 + n, forever ? nullptr : &ts, nullptr) > 0) {
    woken = pfd[0].revents != 0;
    for (unsigned i = 0; i < n; ++i)
      if (pfd[1 + i].revents) sources[i]->consume_event();
  }
  return woken;
}

}  // namespace xrtio::detail
