// The reactor's blocking wait (see wait_primitive.hpp).
#include "wait_primitive.hpp"

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
  ::close(wake_fd_);
}

void wait_primitive::notify() noexcept {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
}

bool wait_primitive::wait(clock::time_point until, std::span<backend::native_device* const> sources) noexcept {
  bool woken = uring_ ? wait_uring(until, sources) : wait_ppoll(until, sources);
  if (woken) {
    std::uint64_t v;
    [[maybe_unused]] auto n = ::read(wake_fd_, &v, sizeof v);
  }
  return woken;
}

bool wait_primitive::wait_uring(clock::time_point until, std::span<backend::native_device* const> sources) noexcept {
  bool forever = until == clock::time_point::max();
  if (!wake_armed_) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_poll_add(sqe, wake_fd_, POLLIN);
    io_uring_sqe_set_data64(sqe, wake_tag);
    wake_armed_ = true;
  }
  // Device polls are one-shot and tagged with this wait's number; those
  // left armed by the previous wait are removed in the same submission.
  ++wait_seq_;
  for (unsigned i = 0; i < armed_count_; ++i) {
    if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) {
      io_uring_prep_poll_remove(sqe, armed_tags_[i]);
      io_uring_sqe_set_data64(sqe, removal_tag);
    }
  }
  armed_count_ = 0;
  for (unsigned i = 0; i < sources.size() && i < max_sources; ++i) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) break;
    std::uint64_t tag = (wait_seq_ << 8) | (first_source_tag + i);
    io_uring_prep_poll_add(sqe, sources[i]->event_fd(), POLLIN);
    io_uring_sqe_set_data64(sqe, tag);
    armed_tags_[armed_count_++] = tag;
  }
  // The completions of removed polls also end a wait: wait again, for what
  // is left of the time, until a notify, a device event or the time limit.
  bool woken = false, event = false;
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
