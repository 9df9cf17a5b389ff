// What registered files and fixed buffers buy on io_uring, measured below
// xrtio: 4 KiB random reads from a page-cache-hot file at a given queue
// depth, with plain descriptors and buffers (IORING_OP_READ), a registered
// file (IOSQE_FIXED_FILE), and a registered file plus fixed buffers
// (IORING_OP_READ_FIXED). The ceiling of what xrtio's file engine could gain
// from file_options::register_with_ring (figures: docs/PERFORMANCE.md, "File
// I/O"; why it is not done: docs/DESIGN.md, "File I/O").
//
//   ring-registration FILE QUEUE_DEPTH READS [direct]
// prints one line per mode: mode, reads per second, CPU µs per read. With
// `direct` the file is opened with O_DIRECT (page cache bypassed: fixed
// buffers then spare the per-request pinning of the user pages).
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "ring_loop/ring_loop.hpp"

namespace {

constexpr unsigned block = 4096;
bool direct_ = false;

enum class mode { plain, files, fixed };
const char* name(mode m) { return m == mode::plain ? "plain" : m == mode::files ? "files" : "files+fixed"; }

int fail(const char* what, int err) {
  std::fprintf(stderr, "ring-registration: %s: %s\n", what, std::strerror(err));
  return 1;
}

int measure(int fd, std::uint64_t blocks, unsigned depth, unsigned long reads, mode m) {
  io_uring ring;
  if (int r = io_uring_queue_init(depth < 8 ? 8 : depth, &ring, 0); r < 0) return fail("io_uring_queue_init", -r);
  // Page-aligned, as O_DIRECT needs.
  auto* memory = static_cast<unsigned char*>(std::aligned_alloc(block, std::size_t(depth) * block));
  std::memset(memory, 0, std::size_t(depth) * block);
  std::vector<iovec> iov(depth);
  for (unsigned i = 0; i < depth; ++i) iov[i] = {memory + std::size_t(i) * block, block};
  if (m != mode::plain)
    if (int r = io_uring_register_files(&ring, &fd, 1); r < 0) return fail("io_uring_register_files", -r);
  if (m == mode::fixed)
    if (int r = io_uring_register_buffers(&ring, iov.data(), depth); r < 0)
      return fail("io_uring_register_buffers", -r);
  std::mt19937_64 rng(42);
  auto prep = [&](unsigned slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    std::uint64_t off = (rng() % blocks) * block;
    if (m == mode::fixed) io_uring_prep_read_fixed(sqe, 0, iov[slot].iov_base, block, off, int(slot));
    else if (m == mode::files) io_uring_prep_read(sqe, 0, iov[slot].iov_base, block, off);
    else io_uring_prep_read(sqe, fd, iov[slot].iov_base, block, off);
    if (m != mode::plain) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, slot);
  };
  auto t = ring_loop::keep_in_flight(ring, depth, reads, int(block), "ring-registration", prep);
  double secs = t.seconds, cpu = t.cpu_seconds;
  std::printf("%-12s %s qd=%-4u reads_per_s=%.0f cpu_us_per_read=%.3f\n", name(m), direct_ ? "direct" : "hot", depth, double(reads) / secs,
              1e6 * cpu / double(reads));
  io_uring_queue_exit(&ring);
  std::free(memory);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool direct = argc == 5 && std::strcmp(argv[4], "direct") == 0;
  if (argc != 4 && !direct) {
    std::fprintf(stderr, "usage: ring-registration FILE QUEUE_DEPTH READS [direct]\n");
    return 2;
  }
  direct_ = direct;
  unsigned depth = unsigned(std::strtoul(argv[2], nullptr, 10));
  unsigned long reads = std::strtoul(argv[3], nullptr, 10);
  if (depth == 0 || depth > 4096 || reads == 0) return fail("queue depth 1..4096, reads > 0", EINVAL);
  // Hot: the page cache holds it; direct: it bypasses the cache.
  auto [fd, blocks] = ring_loop::open_blocks("ring-registration", argv[1], block, direct ? O_DIRECT : 0, !direct);
  for (mode m : {mode::plain, mode::files, mode::fixed})
    if (int r = measure(fd, blocks, depth, reads, m)) return r;
  ::close(fd);
  return 0;
}
