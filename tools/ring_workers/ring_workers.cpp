// What handing cached reads to io_uring's workers (IOSQE_ASYNC) buys,
// measured below xrtio: sequential reads of BLOCK bytes from a page-cache-hot
// file at a given queue depth, each slot with its own destination, on one
// io_uring, first submitted plainly (a cached read is copied inside
// io_uring_enter, by the submitting thread), then with IOSQE_ASYNC (the
// kernel's io-wq workers copy, on any free core). The ceiling behind
// file_options::worker_read_min (docs/DESIGN.md, "Copies on the kernel's
// workers"; figures: docs/PERFORMANCE.md, "File I/O").
//
//   ring-workers FILE QUEUE_DEPTH BLOCK_KIB READS
// prints one line per mode: GiB/s and the process's CPU µs per GiB.
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ring_loop/ring_loop.hpp"

namespace {

int fail(const char* what, int err) {
  std::fprintf(stderr, "ring-workers: %s: %s\n", what, std::strerror(err));
  return 1;
}

int measure(int fd, std::uint64_t blocks, std::size_t block, unsigned depth, unsigned long reads, bool to_workers) {
  io_uring ring;
  if (int r = io_uring_queue_init(depth < 8 ? 8 : depth, &ring, 0); r < 0) return fail("io_uring_queue_init", -r);
  // One destination per slot, touched once so that no page fault is timed.
  std::vector<unsigned char*> dest(depth);
  for (auto& d : dest) {
    d = static_cast<unsigned char*>(std::aligned_alloc(4096, block));
    if (!d) return fail("aligned_alloc", ENOMEM);
    std::memset(d, 1, block);
  }
  std::uint64_t next = 0;
  auto prep = [&](unsigned slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read(sqe, fd, dest[slot], unsigned(block), (next++ % blocks) * block);
    if (to_workers) sqe->flags |= IOSQE_ASYNC;
    io_uring_sqe_set_data64(sqe, slot);
  };
  auto t = ring_loop::keep_in_flight(ring, depth, reads, int(block), "ring-workers", prep);
  double secs = t.seconds, cpu = t.cpu_seconds;
  double gib = double(reads) * double(block) / double(1u << 30);
  std::printf("%-8s qd=%-4u block=%zuK gib_per_s=%.3f cpu_us_per_gib=%.0f\n", to_workers ? "workers" : "plain", depth,
              block >> 10, gib / secs, 1e6 * cpu / gib);
  io_uring_queue_exit(&ring);
  for (auto* d : dest) std::free(d);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: ring-workers FILE QUEUE_DEPTH BLOCK_KIB READS\n");
    return 2;
  }
  unsigned depth = unsigned(std::strtoul(argv[2], nullptr, 10));
  std::size_t block = std::size_t(std::strtoul(argv[3], nullptr, 10)) << 10;
  unsigned long reads = std::strtoul(argv[4], nullptr, 10);
  if (depth == 0 || depth > 4096 || block == 0 || block > (std::size_t(1) << 30) || reads == 0)
    return fail("queue depth 1..4096, block 1 KiB..1 GiB, reads > 0", EINVAL);
  auto [fd, blocks] = ring_loop::open_blocks("ring-workers", argv[1], block, 0, true);  // the page cache holds it
  for (bool w : {false, true})
    if (int r = measure(fd, blocks, block, depth, reads, w)) return r;
  ::close(fd);
  return 0;
}
