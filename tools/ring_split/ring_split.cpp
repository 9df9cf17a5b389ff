// Whether a lone cached read done on the caller's thread (file_try_inline)
// gets faster when a second core copies half of it: one read of BLOCK bytes
// at a time, sequential through a page-cache-hot file into one destination,
// three ways:
//   alone    one preadv2(RWF_NOWAIT) of the whole block on this thread (what
//            xrtio does today for a lone read up to inline_read_limit);
//   workers  the back half to io_uring's kernel workers (IOSQE_ASYNC, with
//            RWF_NOWAIT so a worker never waits for the disk), the front half
//            by preadv2 here, then a wait for the back half (spinning on the
//            completion queue, then blocking);
//   thread   the back half by a thread of this program that spins for work,
//            the front half here: the ceiling of two cores when the hand-off
//            costs nothing (a library cannot keep a core spinning for this).
// The measurement behind "Splitting a lone read across two cores: tried and
// dropped" in docs/PERFORMANCE.md ("File I/O").
//
//   ring-split FILE BLOCK_KIB SECONDS
// prints one line per mode: GiB/s, p50 and p99 per read (µs), CPU µs per GiB.
#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "ring_loop/ring_loop.hpp"

namespace {

using clk = std::chrono::steady_clock;
enum class mode { alone, workers, thread };
const char* name(mode m) { return m == mode::alone ? "alone" : m == mode::workers ? "workers" : "thread"; }

int fail(const char* what, int err) {
  std::fprintf(stderr, "ring-split: %s: %s\n", what, std::strerror(err));
  return 1;
}

// The spinning helper of mode::thread: reads [offset, offset + length) into
// `memory` each time `ticket` moves, then publishes `done`.
struct helper {
  int fd;
  std::atomic<long> ticket{0};
  std::atomic<long> done{0};
  std::atomic<bool> quit{false};
  unsigned char* memory = nullptr;
  std::size_t length = 0;
  std::uint64_t offset = 0;
  ssize_t result = 0;
  void loop() {
    long seen = 0;
    while (!quit.load(std::memory_order_relaxed)) {
      long t = ticket.load(std::memory_order_acquire);
      if (t == seen) continue;
      seen = t;
      result = ::pread(fd, memory, length, off_t(offset));
      done.store(t, std::memory_order_release);
    }
  }
};

int measure(int fd, std::uint64_t blocks, std::size_t block, double seconds, mode m) {
  io_uring ring;
  if (int r = io_uring_queue_init(8, &ring, 0); r < 0) return fail("io_uring_queue_init", -r);
  auto* dest = static_cast<unsigned char*>(std::aligned_alloc(4096, block));
  if (!dest) return fail("aligned_alloc", ENOMEM);
  std::memset(dest, 1, block);
  helper h{fd};
  std::thread spinner;
  if (m == mode::thread) spinner = std::thread([&h] { h.loop(); });
  const std::size_t front = block / 2, back = block - front;
  std::vector<double> lat;
  lat.reserve(1 << 20);
  unsigned long reads = 0, short_reads = 0;
  double c0 = ring_loop::cpu_seconds();
  const clk::time_point t0 = clk::now();
  const auto end = t0 + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(seconds));
  for (clk::time_point now = t0; now < end; ++reads) {
    std::uint64_t off = (reads % blocks) * block;
    auto a = clk::now();
    bool whole = false;
    if (m == mode::alone) {
      iovec v{dest, block};
      whole = ::preadv2(fd, &v, 1, off_t(off), RWF_NOWAIT) == ssize_t(block);
    } else if (m == mode::workers) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_read(sqe, fd, dest + front, unsigned(back), off + front);
      sqe->rw_flags = RWF_NOWAIT;
      sqe->flags |= IOSQE_ASYNC;
      io_uring_submit(&ring);
      iovec v{dest, front};
      ssize_t got_front = ::preadv2(fd, &v, 1, off_t(off), RWF_NOWAIT);
      io_uring_cqe* cqe = nullptr;
      for (int spins = 0; io_uring_peek_cqe(&ring, &cqe) != 0;)
        if (++spins > 100000) {
          if (int e = io_uring_wait_cqe(&ring, &cqe); e < 0) return fail("io_uring_wait_cqe", -e);
          break;
        }
      whole = got_front == ssize_t(front) && cqe->res == int(back);
      io_uring_cqe_seen(&ring, cqe);
    } else {
      h.memory = dest + front;
      h.length = back;
      h.offset = off + front;
      h.ticket.store(long(reads) + 1, std::memory_order_release);
      iovec v{dest, front};
      ssize_t got_front = ::preadv2(fd, &v, 1, off_t(off), RWF_NOWAIT);
      while (h.done.load(std::memory_order_acquire) != long(reads) + 1) {
      }
      whole = got_front == ssize_t(front) && h.result == ssize_t(back);
    }
    now = clk::now();
    lat.push_back(std::chrono::duration<double, std::micro>(now - a).count());
    short_reads += !whole;
  }
  double secs = std::chrono::duration<double>(clk::now() - t0).count();
  double cpu = ring_loop::cpu_seconds() - c0;
  h.quit = true;
  if (spinner.joinable()) spinner.join();
  std::sort(lat.begin(), lat.end());
  double gib = double(reads) * double(block) / double(1u << 30);
  std::printf("%-8s block=%zuK gib_per_s=%.3f p50_us=%.1f p99_us=%.1f cpu_us_per_gib=%.0f short=%lu\n", name(m),
              block >> 10, gib / secs, lat[lat.size() / 2], lat[lat.size() * 99 / 100], 1e6 * cpu / gib, short_reads);
  io_uring_queue_exit(&ring);
  std::free(dest);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: ring-split FILE BLOCK_KIB SECONDS\n");
    return 2;
  }
  std::size_t block = std::size_t(std::strtoul(argv[2], nullptr, 10)) << 10;
  double seconds = std::strtod(argv[3], nullptr);
  if (block < 8192 || block > (std::size_t(1) << 30) || !(seconds > 0))
    return fail("block 8 KiB..1 GiB, seconds > 0", EINVAL);
  auto [fd, blocks] = ring_loop::open_blocks("ring-split", argv[1], block, 0, true);  // the page cache holds it
  for (mode m : {mode::alone, mode::workers, mode::thread})
    if (int r = measure(fd, blocks, block, seconds, m)) return r;
  ::close(fd);
  return 0;
}
