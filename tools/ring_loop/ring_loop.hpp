// What the bare-ring probes share (ring-registration, ring-workers,
// ring-split): opening their file and warming the page cache with it, the
// process's CPU time, and the measuring loop that keeps a queue depth of
// reads in flight on one io_uring until a number of them completed and
// reports the wall time and CPU time they took.
#pragma once

#include <fcntl.h>
#include <liburing.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace ring_loop {

inline double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/// A file opened read-only for reads of `block` bytes: its descriptor and
/// how many whole blocks it holds.
struct block_file {
  int fd;
  std::uint64_t blocks;
};

/// Opens `path` (with `flags` added to O_RDONLY | O_CLOEXEC) and, if `warm`,
/// reads every byte once so that the page cache holds the file. A failure
/// or a file shorter than one block ends the process with a message naming
/// `tool`.
inline block_file open_blocks(const char* tool, const char* path, std::size_t block, int flags, bool warm) {
  auto die = [tool](const char* what, int err) {
    std::fprintf(stderr, "%s: %s: %s\n", tool, what, std::strerror(err));
    std::exit(1);
  };
  int fd = ::open(path, O_RDONLY | O_CLOEXEC | flags);
  if (fd < 0) die(path, errno);
  struct stat st{};
  if (::fstat(fd, &st) != 0) die("fstat", errno);
  std::uint64_t blocks = std::uint64_t(st.st_size) / block;
  if (blocks == 0) die("file shorter than one block", EINVAL);
  if (warm) {
    std::vector<unsigned char> b(1 << 20);
    for (off_t o = 0; o < st.st_size; o += off_t(b.size()))
      if (::pread(fd, b.data(), b.size(), o) < 0) die("pread", errno);
  }
  return {fd, blocks};
}

struct timing {
  double seconds = 0, cpu_seconds = 0;
};

/// `prep(slot)` queues one read into slot `slot` (its user data the slot).
/// The first `depth` slots are filled, then each completion's slot is
/// refilled until `reads` were issued. A completion other than `expect`
/// bytes ends the process with a message naming `tool`.
template <class Prep>
timing keep_in_flight(io_uring& ring, unsigned depth, unsigned long reads, int expect, const char* tool, Prep prep) {
  auto t0 = std::chrono::steady_clock::now();
  double c0 = cpu_seconds();
  unsigned long issued = 0, done = 0;
  for (unsigned i = 0; i < depth && issued < reads; ++i, ++issued) prep(i);
  while (done < reads) {
    io_uring_submit_and_wait(&ring, 1);
    io_uring_cqe* cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      ++seen;
      if (cqe->res != expect) {
        std::fprintf(stderr, "%s: read returned %d\n", tool, cqe->res);
        std::exit(1);
      }
      if (issued < reads) {
        prep(unsigned(io_uring_cqe_get_data64(cqe)));
        ++issued;
      }
    }
    io_uring_cq_advance(&ring, seen);
    done += seen;
  }
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), cpu_seconds() - c0};
}

}  // namespace ring_loop
