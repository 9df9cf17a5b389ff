// xrtio-lease-cost: what one lease costs on one thread, taken and given back
// in a loop with nothing else running, per path of the access tracker
// (docs/DESIGN.md, "A lone lease without the lock"), beside the host's own limits:
// a std::mutex lock and unlock, and one compare-and-swap plus one atomic
// and (what the lone lease does at least). Medians of repeats, in ns per
// pair, and each path's ratio to the mutex pair.
//   xrtio-lease-cost [--pairs N] [--repeat R]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "xrtio/detail/access_tracker.hpp"

namespace {
using namespace xrtio::detail;
using clk = std::chrono::steady_clock;

double median_ns(int repeat, long pairs, const std::function<void()>& pair) {
  std::vector<double> v;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = clk::now();
    for (long i = 0; i < pairs; ++i) pair();
    v.push_back(std::chrono::duration<double, std::nano>(clk::now() - t0).count() / double(pairs));
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void must(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "xrtio-lease-cost: %s\n", what);
    std::exit(1);
  }
}
}  // namespace

int main(int argc, char** argv) {
  long pairs = 2'000'000;
  int repeat = 7;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--pairs") && i + 1 < argc) pairs = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: xrtio-lease-cost [--pairs N] [--repeat R]\n");
      return 2;
    }
  }
  must(pairs > 0 && repeat > 0, "--pairs and --repeat must be positive");
  // A second thread, parked: glibc takes a mutex without atomic operations
  // while a process has one thread, which xrtio's never has (its reactor,
  // the device's threads), so alone the mutex pair would look cheaper than it is.
  std::atomic<bool> done{false};
  std::thread parked([&] { done.wait(false); });
  constexpr std::size_t extent = 4096;

  std::mutex m;
  double mutex_pair = median_ns(repeat, pairs, [&] {
    m.lock();
    m.unlock();
  });
  std::atomic<std::uint64_t> word{0};
  double cas_pair = median_ns(repeat, pairs, [&] {
    std::uint64_t v = 0;
    word.compare_exchange_strong(v, 1, std::memory_order_acquire);
    word.fetch_and(0, std::memory_order_release);
  });

  // A file read's or a single-buffer run's write lease, nothing else on the allocation: lone.
  access_tracker lone_t(extent);
  double lone = median_ns(repeat, pairs, [&] {
    access_request r{&lone_t, 0, extent, access_mode::write, 0};
    must(access_tracker::acquire({&r, 1}, holder_kind::run, nullptr) == acquire_status::acquired, "lone: refused");
    lone_t.release(r.id);
  });
  // The same while another range of the allocation is held: the locked path, an entry.
  access_tracker locked_t(extent);
  access_request other{&locked_t, extent - 1, extent, access_mode::write, 0};
  must(access_tracker::acquire({&other, 1}, holder_kind::run, nullptr) == acquire_status::acquired, "held: refused");
  double locked = median_ns(repeat, pairs, [&] {
    access_request r{&locked_t, 0, extent - 1, access_mode::write, 0};
    must(access_tracker::acquire({&r, 1}, holder_kind::run, nullptr) == acquire_status::acquired, "locked: refused");
    locked_t.release(r.id);
  });
  locked_t.release(other.id);
  // A run's read of a whole allocation nobody writes: shared.
  access_tracker shared_t(extent);
  double shared = median_ns(repeat, pairs, [&] {
    access_request r{&shared_t, 0, extent, access_mode::read, 0};
    must(access_tracker::acquire({&r, 1}, holder_kind::run, nullptr) == acquire_status::acquired, "shared: refused");
    shared_t.release(r.id);
  });

  // A run's three buffers: two whole inputs and an output, one acquisition.
  access_tracker in1(extent), in2(extent), out(extent);
  double run3 = median_ns(repeat, pairs, [&] {
    access_request r[3] = {{&in1, 0, extent, access_mode::read, 0}, {&in2, 0, extent, access_mode::read, 0},
                           {&out, 0, extent, access_mode::write, 0}};
    must(access_tracker::acquire({r, 3}, holder_kind::run, nullptr) == acquire_status::acquired, "run: refused");
    for (auto& q : r) q.tracker->release(q.id);
  });

  std::printf("lease cost, one thread, ns per acquire+release (median of %d x %ld pairs)\n", repeat, pairs);
  std::printf("%-34s %8s %10s\n", "path", "ns", "/mutex");
  auto row = [&](const char* name, double ns) { std::printf("%-34s %8.1f %9.2fx\n", name, ns, ns / mutex_pair); };
  row("host: std::mutex lock+unlock", mutex_pair);
  row("host: CAS + fetch_and", cas_pair);
  row("lone (a write, nothing else held)", lone);
  row("locked (another range held)", locked);
  row("shared (a run's whole read)", shared);
  row("a run: 2 whole inputs + 1 output", run3);
  done = true;
  done.notify_one();
  parked.join();
  return 0;
}
