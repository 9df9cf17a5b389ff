// What the --io contenders share (no Asio here: the asio-file child process
// includes it): opening the file for a cell, aligned request buffers, and
// the exception that says a contender cannot run on this host.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "io_workload.hpp"

namespace bench::io {

// Thrown by a contender that cannot run here (no io_uring, say): the cell
// is reported as skipped with the message, not as a result.
struct unavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The file opened read-only for a cell: O_DIRECT when cold.
class cell_file {
 public:
  explicit cell_file(const io_spec& s) : fd_(::open(s.path.c_str(), O_RDONLY | O_CLOEXEC | (s.cold ? O_DIRECT : 0))) {
    if (fd_ < 0) throw std::runtime_error("open " + s.path + ": " + std::strerror(errno));
  }
  cell_file(const cell_file&) = delete;
  cell_file& operator=(const cell_file&) = delete;
  ~cell_file() { ::close(fd_); }
  int fd() const noexcept { return fd_; }

 private:
  int fd_;
};

// Page-aligned request buffers (O_DIRECT needs at least the logical block size).
struct free_deleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
using aligned_buffer = std::unique_ptr<std::byte, free_deleter>;
inline aligned_buffer make_aligned(std::size_t n) {
  auto* p = static_cast<std::byte*>(std::aligned_alloc(4096, (n + 4095) & ~std::size_t(4095)));
  if (!p) throw std::bad_alloc();
  return aligned_buffer(p);
}

}  // namespace bench::io
