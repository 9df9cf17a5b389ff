// The host limits: spin ping-pong, eventfd ping-pong, asio::post into a
// sleeping io_context, and the one-hop and two-hop wake-ups of sleeping
// threads as the contenders pay them at one run in flight; each a median of
// many samples.
#include "host_limits.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <asio.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "measurement.hpp"
#include "process_usage.hpp"

namespace bench {
namespace {

constexpr int warm_up_rounds = 200;  // not sampled

// The CPU's spin-wait hint (the library's cpu_relax is internal).
inline void spin_hint() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#else
  __asm__ __volatile__("" ::: "memory");
#endif
}

// Spins until v holds want; yields now and then, so that a host with fewer
// free cores than spinners still makes progress.
template <class T>
void spin_until(const std::atomic<T>& v, T want) {
  for (unsigned n = 1; v.load(std::memory_order_acquire) != want; ++n) {
    spin_hint();
    if (n % 4096 == 0) std::this_thread::yield();
  }
}

double us_since(clk::time_point t0, clk::time_point t1) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

// The CPUs for a measured pair of threads: two distinct ones (distinct) or
// one for both; {-1, -1} (not pinned) when the process may run on fewer.
// Pinned, the numbers do not depend on where the scheduler puts the pair
// (unpinned they flip between the one-CPU and the two-CPU cost, run to run).
std::pair<int, int> pick_cpus(bool distinct) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return {-1, -1};
  int found[2] = {-1, -1}, n = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && n < 2; ++cpu)
    if (CPU_ISSET(cpu, &set)) found[n++] = cpu;
  if (!distinct && n >= 1) return {found[0], found[0]};
  return n == 2 ? std::pair{found[0], found[1]} : std::pair{-1, -1};
}

void pin_this_thread(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// Runs round(i) on one new thread and partner(i) on another (named name, and
// pinned to cpus when given), warm-up rounds then `samples` rounds; the
// median of the round trips round returns. The caller's thread is untouched.
template <class Round, class Partner>
double median_round_trip(const char* name, int samples, Round round, Partner partner,
                         std::pair<int, int> cpus = {-1, -1}) {
  const int rounds = warm_up_rounds + samples;
  std::vector<double> us;
  us.reserve(std::size_t(samples));
  std::thread measuring([&] {
    set_thread_name(name);
    pin_this_thread(cpus.first);
    for (int i = 0; i < rounds; ++i) {
      double x = round(i);
      if (i >= warm_up_rounds) us.push_back(x);
    }
  });
  std::thread answering([&] {
    set_thread_name(name);
    pin_this_thread(cpus.second);
    for (int i = 0; i < rounds; ++i) partner(i);
  });
  measuring.join();
  answering.join();
  return median(std::move(us));
}

double spin_pingpong_p50_us(int samples) {
  std::atomic<int> ball{0};  // 2i + 1: served in round i; 2i + 2: returned
  return median_round_trip(
      "h:spin", samples,
      [&](int i) {
        auto t0 = clk::now();
        ball.store(2 * i + 1, std::memory_order_release);
        spin_until(ball, 2 * i + 2);
        return us_since(t0, clk::now());
      },
      [&](int i) {
        spin_until(ball, 2 * i + 1);
        ball.store(2 * i + 2, std::memory_order_release);
      },
      pick_cpus(true));
}

void signal_fd(int fd) {
  std::uint64_t one = 1;
  [[maybe_unused]] auto w = ::write(fd, &one, sizeof one);
}
void await_fd(int fd) {  // blocks in read() until the partner signals
  std::uint64_t v;
  [[maybe_unused]] auto r = ::read(fd, &v, sizeof v);
}

double eventfd_pingpong_p50_us(int samples) {
  int ping = ::eventfd(0, EFD_CLOEXEC), pong = ::eventfd(0, EFD_CLOEXEC);
  double p50 = NAN;
  if (ping >= 0 && pong >= 0)
    p50 = median_round_trip(
        "h:efd", samples,
        [&](int) {
          auto t0 = clk::now();
          signal_fd(ping);
          await_fd(pong);
          return us_since(t0, clk::now());
        },
        [&](int) {
          await_fd(ping);
          signal_fd(pong);
        },
        pick_cpus(false));
  if (ping >= 0) ::close(ping);
  if (pong >= 0) ::close(pong);
  return p50;
}

// The state letter of the thread whose /proc/self/task/<tid>/stat is open as
// fd ('S': asleep, 'R': running or runnable), 0 when it cannot be read.
char task_state(int fd) {
  char buf[512];
  auto n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // "tid (comm) S ...": comm may hold ')'
  return p && p[1] == ' ' ? p[2] : 0;
}

// Returns once the thread sleeps; when its state cannot be read, after a
// pause (and stat_fd is closed and set to -1). Yields while it waits: the
// thread may be runnable on this CPU.
// A thread never seen asleep for a second (stopped by a debugger: 't')
// counts as unreadable from then on.
void until_asleep(int& stat_fd) {
  auto give_up = clk::now() + std::chrono::seconds(1);
  for (char s; stat_fd >= 0; std::this_thread::yield()) {
    if ((s = task_state(stat_fd)) == 'S') return;
    if (!s || clk::now() > give_up) {
      ::close(stat_fd);
      stat_fd = -1;
    }
  }
  std::this_thread::sleep_for(std::chrono::microseconds(200));
}

int open_task_stat(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", int(tid));
  return ::open(path, O_RDONLY | O_CLOEXEC);
}

// The poster's side: waits until the io thread sleeps, posts, spins until the
// handler ran; the post -> handler times of the sampled rounds.
std::vector<double> post_rounds(asio::io_context& io, pid_t io_tid, int samples) {
  int stat_fd = open_task_stat(io_tid);
  std::atomic<int> ran{0};  // the last round whose handler has run
  clk::time_point ran_at;   // when it ran (written before ran)
  std::vector<double> us;
  us.reserve(std::size_t(samples));
  for (int i = 1; i <= warm_up_rounds + samples; ++i) {
    until_asleep(stat_fd);
    auto t0 = clk::now();
    asio::post(io, [&, i] {
      ran_at = clk::now();
      ran.store(i, std::memory_order_release);
    });
    spin_until(ran, i);
    if (i > warm_up_rounds) us.push_back(us_since(t0, ran_at));
  }
  if (stat_fd >= 0) ::close(stat_fd);
  return us;
}

double asio_post_sleeping_p50_us(int samples) {
  auto cpus = pick_cpus(false);
  asio::io_context io(1);
  auto guard = asio::make_work_guard(io);
  std::atomic<pid_t> io_tid{0};
  std::thread sleeper([&] {
    set_thread_name("h:io");
    pin_this_thread(cpus.second);
    io_tid.store(::gettid());
    io.run();
  });
  while (io_tid.load() == 0) std::this_thread::yield();
  std::vector<double> us;
  std::thread poster([&] {
    set_thread_name("h:post");
    pin_this_thread(cpus.first);
    us = post_rounds(io, io_tid.load(), samples);
  });
  poster.join();
  guard.reset();
  sleeper.join();
  return median(std::move(us));
}


// The two wake-up chains below: the signaling thread (a device's, which
// sleeps between runs) waits until every thread of the chain is asleep,
// stamps, writes `signal`, and sleeps in read() on `back` until the last
// thread has stamped. Not pinned: the scheduler places the threads as it
// places the contenders' (on an idle CPU of this VM a wake-up costs several
// times one on a busy one, and that is what a run's completion meets).
struct wake_cost {
  double p50_us = NAN;
  double cpu_us = NAN;  // per round, the woken threads'
};

struct wake_chain {
  int signal = ::eventfd(0, EFD_CLOEXEC);
  int back = ::eventfd(0, EFD_CLOEXEC);
  // The chain's end (clk ticks), stored before `back` is written.
  std::atomic<clk::rep> stamped{0};
  std::atomic<double> cpu_us{0};  // the woken threads' CPU time, all rounds
  ~wake_chain() {
    if (signal >= 0) ::close(signal);
    if (back >= 0) ::close(back);
  }
  bool ok() const { return signal >= 0 && back >= 0; }
  void end() {
    stamped.store(clk::now().time_since_epoch().count(), std::memory_order_release);
    signal_fd(back);
  }
  // `sleepers`: the chain's threads (their tids), each asleep before a round.
  std::vector<double> rounds(int samples, std::vector<pid_t> sleepers) {
    std::vector<int> stat_fds;
    for (pid_t t : sleepers) stat_fds.push_back(open_task_stat(t));
    std::vector<double> us;
    us.reserve(std::size_t(samples));
    for (int i = 0; i < warm_up_rounds + samples; ++i) {
      for (int& fd : stat_fds) until_asleep(fd);
      auto t0 = clk::now();
      signal_fd(signal);
      await_fd(back);
      auto t1 = clk::time_point(clk::duration(stamped.load(std::memory_order_acquire)));
      if (i >= warm_up_rounds) us.push_back(us_since(t0, t1));
    }
    for (int fd : stat_fds)
      if (fd >= 0) ::close(fd);
    return us;
  }
};

double thread_cpu_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) / 1e3;
}

// Adds the calling thread's CPU time since `from` to c.cpu_us.
void add_cpu(wake_chain& c, double from) {
  double add = thread_cpu_us() - from, cur = c.cpu_us.load();
  while (!c.cpu_us.compare_exchange_weak(cur, cur + add)) {
  }
}

template <class T>
pid_t start_and_get_tid(std::thread& t, T body) {
  std::atomic<pid_t> tid{0};
  t = std::thread([&tid, body]() mutable {
    tid.store(::gettid());
    body();
  });
  while (tid.load() == 0) std::this_thread::yield();
  return tid.load();
}

// One hop, as a thread blocked on its run pays it (blocking-threads): a
// thread asleep in read() on an eventfd runs once it is written.
wake_cost eventfd_wake(int samples) {
  wake_chain c;
  if (!c.ok()) return {};
  const int rounds = warm_up_rounds + samples;
  std::thread waiter;
  pid_t tid = start_and_get_tid(waiter, [&c, rounds] {
    set_thread_name("h:wake");
    double cpu0 = thread_cpu_us();
    for (int i = 0; i < rounds; ++i) {
      await_fd(c.signal);
      c.end();
    }
    add_cpu(c, cpu0);
  });
  std::vector<double> us;
  std::thread signaler([&] {
    set_thread_name("h:dev");
    us = c.rounds(samples, {tid});
  });
  signaler.join();
  waiter.join();
  return {median(std::move(us)), c.cpu_us.load() / rounds};
}

// Two hops, as a completion reactor thread pays them (xrtio's default mode
// at one run in flight): a thread asleep in io_uring_enter on a poll of an
// eventfd wakes at its write, reads it and posts into an io_context asleep
// in run(); the chain ends when the handler runs. NaN, with the reason in
// `why`, without io_uring (qemu-user, a seccomp filter) or if the ring
// fails later: the relay then finishes its rounds with blocking reads, so
// that the writer is never left waiting. `cpu` >= 0: all three threads run
// on that CPU only.
wake_cost relay_post_sleeping(int samples, std::string& why, int cpu = -1) {
  wake_chain c;
  if (!c.ok()) {
    why = "eventfd failed";
    return {};
  }
  io_uring ring;
  if (int e = io_uring_queue_init(4, &ring, 0); e != 0) {
    why = std::string("io_uring_queue_init: ") + std::strerror(-e);
    return {};
  }
  std::atomic<int> ring_error{0};
  const int rounds = warm_up_rounds + samples;
  asio::io_context io(1);
  auto guard = asio::make_work_guard(io);
  std::thread io_thread, relay;
  pid_t io_tid = start_and_get_tid(io_thread, [&io, &c, cpu] {
    set_thread_name("h:io");
    pin_this_thread(cpu);
    double cpu0 = thread_cpu_us();
    io.run();
    add_cpu(c, cpu0);
  });
  pid_t relay_tid = start_and_get_tid(relay, [&c, &ring, &io, &ring_error, rounds, cpu] {
    set_thread_name("h:relay");
    pin_this_thread(cpu);
    double cpu0 = thread_cpu_us();
    for (int i = 0; i < rounds; ++i) {
      if (!ring_error.load(std::memory_order_relaxed)) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        int r = -EBUSY;  // no free entry: a poll left armed by an interrupted wait
        if (sqe) {
          io_uring_prep_poll_add(sqe, c.signal, POLLIN);
          r = io_uring_submit_and_wait(&ring, 1);
        }
        if (r < 0 && r != -EINTR) ring_error.store(-r, std::memory_order_relaxed);
        io_uring_cqe* cqe = nullptr;
        while (io_uring_peek_cqe(&ring, &cqe) == 0) io_uring_cqe_seen(&ring, cqe);
      }
      await_fd(c.signal);  // readable after the poll; blocks without the ring
      asio::post(io, [&c] { c.end(); });
    }
    add_cpu(c, cpu0);
  });
  std::vector<double> us;
  std::thread signaler([&] {
    set_thread_name("h:dev");
    pin_this_thread(cpu);
    us = c.rounds(samples, {relay_tid, io_tid});
  });
  signaler.join();
  relay.join();
  guard.reset();
  io_thread.join();
  io_uring_queue_exit(&ring);
  if (int e = ring_error.load()) {
    why = std::string("the relay's ring failed: ") + std::strerror(e);
    return {};
  }
  return {median(std::move(us)), c.cpu_us.load() / rounds};
}

}  // namespace

host_limits measure_host_limits(int samples) {
  host_limits h;
  h.samples = samples;
  h.spin_pingpong_p50_us = spin_pingpong_p50_us(samples);
  h.eventfd_pingpong_p50_us = eventfd_pingpong_p50_us(samples);
  h.asio_post_sleeping_p50_us = asio_post_sleeping_p50_us(samples);
  // Each round of these waits for sleeping threads (tens of µs): fewer.
  h.chain_samples = std::max(1, samples / 4);
  auto one = eventfd_wake(h.chain_samples);
  h.eventfd_wake_p50_us = one.p50_us;
  h.eventfd_wake_cpu_us = one.cpu_us;
  auto two = relay_post_sleeping(h.chain_samples, h.relay_not_measured);
  h.relay_post_sleeping_p50_us = two.p50_us;
  h.relay_post_sleeping_cpu_us = two.cpu_us;
  if (h.relay_not_measured.empty()) {
    std::string why;
    if (int cpu = pick_cpus(false).first; cpu >= 0)
      h.relay_one_core_p50_us = relay_post_sleeping(h.chain_samples, why, cpu).p50_us;
  }
  return h;
}

}  // namespace bench
