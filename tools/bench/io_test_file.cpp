// Making the --io test file, probing O_DIRECT, warming the page cache.
#include "io_test_file.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "io_common.hpp"
#include "io_pattern.hpp"

namespace bench::io {
namespace {

constexpr std::size_t chunk = 1 << 20;

aligned_buffer aligned(std::size_t n) { return make_aligned(n); }

std::string sys_error(const char* what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

// O_DIRECT: the open and an aligned 4 KiB read must both work (tmpfs
// refuses the open with EINVAL; some file systems accept it and fail reads).
// tmpfs accepts O_DIRECT since Linux 6.6, but its files live in memory: no
// read there is cold.
void probe_direct(test_file& f) {
  struct statfs fs {};
  if (::statfs(f.path.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
    f.direct_reason = "the file system is tmpfs: the file lives in memory, no read is cold";
    return;
  }
  int fd = ::open(f.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    f.direct_reason = std::string("open(O_DIRECT) failed: ") + std::strerror(errno);
    return;
  }
  auto buf = aligned(4096);
  ssize_t n = ::pread(fd, buf.get(), 4096, 0);
  if (n != 4096) f.direct_reason = n < 0 ? std::string("pread(O_DIRECT) failed: ") + std::strerror(errno)
                                         : "pread(O_DIRECT) came up short";
  else if (!verify(buf.get(), 4096, 0)) f.direct_reason = "pread(O_DIRECT) returned other data than was written";
  else f.direct_ok = true;
  ::close(fd);
}

}  // namespace

test_file::~test_file() {
  if (!path.empty()) ::unlink(path.c_str());
}

std::string default_io_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : ".";
}

bool make_test_file(const std::string& dir, std::uint64_t size, test_file& f, std::string& error) {
  size = (size + chunk - 1) / chunk * chunk;
  if (size == 0) size = chunk;
  std::string path = dir + "/xrtio-bench-io." + std::to_string(::getpid()) + ".dat";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    error = sys_error("cannot create", path);
    return false;
  }
  f.path = path;  // removed by ~test_file from here on
  auto buf = aligned(chunk);
  for (std::uint64_t off = 0; off < size; off += chunk) {
    for (std::size_t w = 0; w < chunk; w += 8) {
      std::uint64_t v = pattern_word(off + w);
      std::memcpy(buf.get() + w, &v, 8);
    }
    if (::pwrite(fd, buf.get(), chunk, off_t(off)) != ssize_t(chunk)) {
      error = sys_error("cannot write", path);
      ::close(fd);
      return false;
    }
  }
  // On disk before the cold cells: O_DIRECT reads must find the data there.
  if (::fsync(fd) != 0) {
    error = sys_error("cannot fsync", path);
    ::close(fd);
    return false;
  }
  ::close(fd);
  f.size = size;
  probe_direct(f);
  return true;
}

void warm_page_cache(const test_file& f) {
  int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  auto buf = aligned(chunk);
  for (std::uint64_t off = 0; off < f.size; off += chunk)
    if (::pread(fd, buf.get(), chunk, off_t(off)) <= 0) break;
  ::close(fd);
}

}  // namespace bench::io
