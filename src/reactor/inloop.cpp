// xrtio::run(io, rt): the in-loop driver (see xrtio/inloop.hpp). The same
// reactor passes as the reactor thread's, run between the io_context's
// handlers; only resting differs (handlers, not the wait primitive).
#include "xrtio/inloop.hpp"

#include <unistd.h>

#include <asio/post.hpp>
#include <algorithm>
#include <atomic>
#include <asio/executor_work_guard.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <memory>
#include <cstdint>
#include <optional>

#include "util/cpu_relax.hpp"
#include "reactor.hpp"
#include "xrtio/detail/static_block_pool.hpp"

namespace xrtio {

namespace {
using clock = std::chrono::steady_clock;
using detail::reactor;
using detail::static_block_pool;

// Handlers run between two passes of the driver at most. poll_one() per
// handler costs a little more than one poll() for all: each call sets up
// Asio's thread state, and the handler memory Asio recycles lives for one
// call, so what one handler frees a later one no longer reuses (docs/
// DESIGN.md, "In-loop mode", item 3). At 256, in-loop throughput at 4096
// runs in flight was level with poll()'s (docs/PERFORMANCE.md, "In-loop: a
// bounded poll").
constexpr std::size_t handlers_per_pass = 256;

// First sleep once the spin budget is spent; doubles up to max_poll_interval.
constexpr std::chrono::nanoseconds first_sleep = std::chrono::microseconds(5);

// Detaches the driver however run() ends.
struct driver_guard {
  reactor& rx;
  ~driver_guard() { rx.attach_driver(nullptr, nullptr); }
};

// Lets a file ring completion end the driver's block: while ring pieces are
// in flight, a wait for readability on the eventfd the ring writes stays
// pending in io, so the io_context's own reactor (epoll, edge-triggered:
// every write is an edge) runs its handler and io.run_one() returns. The
// descriptor is registered once per run() call; arming a wait is a queue
// push in Asio, not a system call. Only the driver thread touches it.
//
// The descriptor object is made on the first ring piece, not before, unless
// the io_context already has its epoll reactor (a server's sockets or
// timers): making it starts that reactor, whose task then runs in every
// round of handlers of the driver, one epoll_wait(0) system call per pass:
// 16 % of the driver's samples at one run in flight on the XRT no-op device
// (docs/PERFORMANCE.md, "In-loop mode"). Where the reactor exists it is made
// as soon as the ring is (prepare), so that the first ring piece, perhaps
// in a server's steady state, allocates nothing (docs/DESIGN.md, "File
// I/O", "The engine").
class file_watch {
  // The wait's completion: records its generation. Its memory comes from a
  // static pool: the wait is started outside any handler, where Asio's
  // recycling allocator takes a new block from the heap each time (one
  // allocation per ring completion in xrtio-inloop's cold cells).
  struct fired_handler {
    std::shared_ptr<std::atomic<std::uint64_t>> fired;
    std::uint64_t gen;
    using allocator_type = detail::static_block_allocator<void>;
    allocator_type get_allocator() const noexcept { return {}; }
    void operator()(const asio::error_code& ec) const {
      if (ec) return;
      auto seen = fired->load(std::memory_order_relaxed);
      while (seen < gen && !fired->compare_exchange_weak(seen, gen, std::memory_order_release)) {
      }
    }
  };

 public:
  explicit file_watch(asio::io_context& io) : io_(io) {}
  ~file_watch() { close(); }
  // Takes `fd` into the io_context ahead of the first wait, which would
  // otherwise make the descriptor's state (an allocation) when the first
  // ring piece is in flight. Only where the io_context has its epoll
  // reactor already (above).
  void prepare(int fd) noexcept {
    if (fd < 0 || failed_) return;
    try {
      assign(fd);
    } catch (...) {
      failed_ = true;  // the io_context cannot watch it: the driver polls
    }
  }
  // Called before blocking: arms the wait for `fd`, or with -1 (no ring piece
  // in flight) cancels it so that the io_context can run out of work. Returns
  // whether ring completions will end the block (false: poll for them).
  bool update(int fd) noexcept {
    if (fd < 0) {
      if (live()) {
        asio::error_code ec;
        sd_->cancel(ec);
        cancelled_ = true;
      }
      return true;
    }
    if (failed_) return false;
    try {
      assign(fd);
      if (!live()) {
        // Empty the eventfd first. Asio starts each wait with an
        // EPOLL_CTL_MOD of the descriptor, which reports it anew while it is
        // still readable, and nothing else reads it in this mode: left
        // full after a first completion, every wait fired at once and the
        // driver never slept with ring pieces in flight (459,435 blocks in
        // half a second in 'file io: a ring completion wakes a blocked
        // driver...'). A completion the drain swallows is in the ring's
        // completion queue, which block_begin reads before blocking; one
        // after it writes the eventfd again and fires the new wait.
        std::uint64_t count;
        [[maybe_unused]] auto n = ::read(fd, &count, sizeof count);  // non-blocking (wait_primitive)
        // Each wait has its own generation, so that neither a cancelled one
        // whose handler has not run yet nor a late handler is taken for the
        // wait now pending.
        std::uint64_t gen = ++armed_;
        cancelled_ = false;
        sd_->async_wait(asio::posix::descriptor_base::wait_read, fired_handler{fired_, gen});
      }
      return true;
    } catch (...) {
      failed_ = true;  // the io_context cannot watch it: the driver polls
      return false;
    }
  }
  // Gives the descriptor back (it belongs to the wait primitive), cancelling
  // a pending wait.
  void close() noexcept {
    if (sd_ && sd_->is_open()) sd_->release();
  }

 private:
  void assign(int fd) {
    if (!sd_) sd_.emplace(io_);
    if (!sd_->is_open()) sd_->assign(fd);
  }
  // A wait is pending that has neither fired nor been cancelled.
  bool live() const noexcept {
    return armed_ != 0 && !cancelled_ && fired_->load(std::memory_order_acquire) < armed_;
  }
  asio::io_context& io_;
  std::optional<asio::posix::stream_descriptor> sd_;
  std::uint64_t armed_ = 0;  // generation of the last wait started
  bool cancelled_ = false;   // ... and it was cancelled
  // The newest generation that fired; shared with the handlers (which run on
  // whichever thread runs io, possibly after run() returned).
  std::shared_ptr<std::atomic<std::uint64_t>> fired_ = std::make_shared<std::atomic<std::uint64_t>>(0);
  bool failed_ = false;
};

// Ends a timed block on time once the io_context has its own epoll reactor
// (the user's sockets and timers). io.run_one_until() then waits in
// epoll_wait, whose timeout Asio rounds up to whole milliseconds
// ((usec - 1) / 1000 + 1 in epoll_reactor::run): the driver's backoff, which
// starts at 5 us, slept at least 1 ms from its first step, and a run that
// outlived inloop_spin was seen up to 1 ms late in a server (a p50 of
// 1227-1232 us at inloop_spin 0, one connection; docs/SERVER.md). A
// steady_timer is kept in that reactor's timerfd, which expires to the
// microsecond, so the block waits for it with an untimed io.run_one().
// Without the epoll reactor (no descriptor in io) run_one_until waits on a
// condition variable, which is exact, and making a timer would start the
// epoll reactor (an epoll_wait per pass; see file_watch), so it is not used.
// The timer's own handlers are not the user's: they are counted apart, so
// that a block the timer ended counts as no activity.
class deadline_timer {
  struct fired_handler {
    std::shared_ptr<std::atomic<std::size_t>> own;
    using allocator_type = detail::static_block_allocator<void>;  // see file_watch
    allocator_type get_allocator() const noexcept { return {}; }
    void operator()(const asio::error_code&) const { own->fetch_add(1, std::memory_order_relaxed); }
  };

 public:
  explicit deadline_timer(asio::io_context& io) : io_(io) {}
  // Whether timed blocks need the timer (the io_context's epoll reactor
  // exists). has_service locks the service registry: asked until the answer
  // is yes, which it then stays (a service lives as long as its context).
  bool needed() {
    if (!reactor_seen_) reactor_seen_ = asio::has_service<asio::detail::reactor>(io_);
    return reactor_seen_;
  }
  // A wait that ends at `until` at the latest is pending. An earlier pending
  // wait is kept (it only ends a block early); a later one is replaced.
  void arm(clock::time_point until) {
    if (!timer_) timer_.emplace(io_);
    if (pending() && timer_->expiry() <= until) return;
    timer_->expires_at(until);  // cancels a later pending wait: its handler counts as own
    timer_->async_wait(fired_handler{own_});
    ++armed_;
  }
  // Lets the io_context run out of work when nothing is in flight.
  void cancel() {
    if (timer_ && pending()) timer_->cancel();
  }
  // How many of the handlers just run were the timer's (since the last call).
  std::size_t take_own() noexcept {
    std::size_t n = own_->exchange(0, std::memory_order_relaxed);
    finished_ += n;
    return n;
  }

 private:
  bool pending() const noexcept { return armed_ > finished_ + own_->load(std::memory_order_relaxed); }
  asio::io_context& io_;
  std::optional<asio::steady_timer> timer_;
  bool reactor_seen_ = false;
  std::size_t armed_ = 0, finished_ = 0;  // waits started, and whose handler ran (counted by take_own)
  std::shared_ptr<std::atomic<std::size_t>> own_ = std::make_shared<std::atomic<std::size_t>>(0);
};

// The waker's last resort: one block of its own, for when its wake-up's
// function can be had neither from the static pool (all 64 blocks taken)
// nor from the heap. The waker is called in a noexcept function
// (reactor::wake_driver); a std::bad_alloc from it ended the process (found
// by a helper's audit). A wake-up lost instead could leave a driver asleep
// with a run submitted. The block cannot be taken twice: while one wake-up
// in it is queued, the driver's block ends anyway (a handler is ready), so
// a second wake-up is not needed then. Held by shared_ptr, from the
// allocator the queued function keeps, as the io_context may run or
// destroy that function after run() returned.
struct wake_reserve {
  std::atomic<bool> taken{false};
  alignas(std::max_align_t) std::byte block[static_block_pool::block_size];
};

template <class T>
struct reserve_allocator {
  using value_type = T;
  std::shared_ptr<wake_reserve> reserve;
  explicit reserve_allocator(std::shared_ptr<wake_reserve> r) noexcept : reserve(std::move(r)) {}
  template <class U>
  reserve_allocator(const reserve_allocator<U>& o) noexcept : reserve(o.reserve) {}
  T* allocate(std::size_t n) {
    if (n * sizeof(T) > sizeof reserve->block || reserve->taken.exchange(true, std::memory_order_acquire))
      throw std::bad_alloc();
    return reinterpret_cast<T*>(reserve->block);
  }
  void deallocate(T*, std::size_t) noexcept { reserve->taken.store(false, std::memory_order_release); }
  template <class U>
  bool operator==(const reserve_allocator<U>& o) const noexcept {
    return reserve == o.reserve;
  }
};

struct driver_wake {
  asio::io_context& io;
  std::shared_ptr<wake_reserve> reserve = std::make_shared<wake_reserve>();

  static void wake(void* p) noexcept {
    auto& d = *static_cast<driver_wake*>(p);
    auto ex = asio::require(d.io.get_executor(), asio::execution::blocking.never);
    try {
      asio::execution::execute(asio::prefer(ex, asio::execution::allocator(detail::static_block_allocator<void>())),
                               [] {});
    } catch (...) {
      try {
        asio::execution::execute(asio::prefer(ex, asio::execution::allocator(reserve_allocator<void>(d.reserve))),
                                 [] {});
      } catch (...) {
        // The reserve's wake-up is still queued: it ends the block.
      }
    }
  }
};

// Sleeps in the io_context until a handler ran, a wake-up (a no-op handler
// posted by reactor::wake) or `until`. Returns the user's handlers run.
std::size_t block(asio::io_context& io, reactor& rx, deadline_timer& timer, clock::time_point until) {
  bool timed = until != clock::time_point::max();
  bool by_timer = timed && timer.needed();
  if (by_timer) timer.arm(until);
  if (!rx.block_begin()) return 0;
  std::size_t n = !timed || by_timer ? io.run_one() : io.run_one_until(until);
  rx.block_end();
  return n - std::min(n, timer.take_own());
}
}  // namespace

std::size_t run(asio::io_context& io, runtime& rt) {
  auto& rx = *detail::access::reactor(rt);
  if (!rx.driven())
    throw error(errc::not_supported, "xrtio::run: this runtime has its own reactor thread "
                                     "(make it with runtime_options::reactor_thread = false)");
  // The waker runs on other threads (submitters, pool workers, device
  // callbacks) while the driver blocks: there Asio has no recycled memory,
  // and a plain post took a heap block per wake-up (a pool read's every
  // completion). Its no-op function takes a block of the static pool, or
  // the driver's reserve (driver_wake).
  driver_wake waker{io};
  rx.attach_driver(&driver_wake::wake, &waker);
  driver_guard guard{rx};
  file_watch watch(io);  // destroyed before guard: released while attached
  deadline_timer timer(io);
  // timer.needed(): the io_context has its epoll reactor (file_watch).
  if (timer.needed()) watch.prepare(rx.file_ring_fd());  // a ring made before this run()
  const auto& opts = rx.options();
  std::size_t handlers = 0;
  // While rt has runs in flight the io_context must not run out of work
  // (their handlers may live elsewhere): then only io.stop() stops it.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> hold;
  auto last_activity = clock::now();
  auto backoff = first_sleep;
  for (;;) {
    // One clock read per iteration (0.1 µs on this project's VM): the pass
    // and the spin decision share it. When handlers in the poll ran long,
    // last_activity is taken a little early and the spin ends that much
    // sooner, which costs nothing but a sleep.
    auto now = clock::now();
    auto d = rx.drive(now);  // completions it posts to io run in the poll below
    if (d.file_ring_made && timer.needed()) watch.prepare(rx.file_ring_fd());
    if (d.busy && !hold) hold.emplace(io.get_executor());
    if (!d.busy) hold.reset();
    // At most handlers_per_pass handlers, then a pass: io.poll() runs until
    // the queue is empty, which a handler chain that always posts its next
    // step (a loop of co_await asio::post) never lets happen, and the runs'
    // completions waited for it to end (docs/DESIGN.md, "In-loop mode").
    std::size_t ran = 0;
    while (ran < handlers_per_pass && io.poll_one()) ++ran;
    ran -= std::min(ran, timer.take_own());
    handlers += ran;
    if (io.stopped()) break;  // io.stop(), or out of work with nothing in flight
    if (d.activity || ran) {
      last_activity = now;
      backoff = first_sleep;
      continue;
    }
    // Pieces on the ring end a block through the watch; with none in
    // flight, a pending watch is cancelled here so that io can run out of work.
    int ring_fd = rx.file_watch_fd();
    bool files_wake = watch.update(ring_fd);
    if (!d.busy) {
      timer.cancel();
      handlers += block(io, rx, timer, clock::time_point::max());
      continue;
    }
    // Ring pieces wake the driver through the watch: with nothing else to
    // poll for, it blocks at once rather than spin. Spinning bought nothing
    // here and cost much: 4 KiB O_DIRECT reads at queue depth 1 took
    // 110.8 us (p50) with the spin against 68.5 us blocked, at 2.3x the CPU
    // per GiB; a completion that comes while this thread spins is seen
    // ~40 us late on this project's VM, and not because of io_uring's task
    // work interrupt (with COOP_TASKRUN, the flag checked every pass, still
    // 110.5 us) (docs/PERFORMANCE.md, "File I/O", "In-loop: no spin on the
    // disk").
    if (!d.polled && files_wake && ring_fd >= 0) {
      handlers += block(io, rx, timer, d.next_deadline);
      continue;
    }
    if (now - last_activity < opts.inloop_spin) {
      detail::cpu_relax();
      continue;
    }
    // Runs on the device end unseen (their event fds are not watched): poll
    // them with the backoff. The thread pool's completions are also polled
    // with the backoff: added when, under qemu-user, one seemed missed now
    // and then; the cause was the handler's io_context stopped by a late
    // tracked-work release (fixed in run_op::send; docs/DESIGN.md, "File I/O").
    handlers += block(io, rx, timer, std::min(d.next_deadline, now + backoff));
    backoff = std::min<std::chrono::nanoseconds>(backoff * 2, opts.max_poll_interval);
  }
  return handlers;
}

}  // namespace xrtio
