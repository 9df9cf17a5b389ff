// xrtio-bench-asio-file: the asio-file contender of `xrtio-bench --io`, run
// by it as a child process for each cell.
//
// Why a separate executable: Asio's random_access_file needs ASIO_HAS_IO_URING,
// and that macro changes what asio::io_context is (its scheduler and
// services). A translation unit compiled with it and one compiled without it
// (the xrtio library, the rest of the bench) would hold two different
// definitions of the same inline functions and classes in one program: an ODR
// violation the linker resolves silently by picking one. So every TU of this
// executable is compiled with ASIO_HAS_IO_URING, no TU of xrtio-bench is, and
// neither links the other. This file and what it links (io_measure.cpp,
// alloc_count.cpp, process_usage.cpp) include neither xrtio nor, apart from
// this file, Asio.
//
//   xrtio-bench-asio-file PATH CASE(rand4k|seq1m) COLD(0|1) DEPTH FILE_SIZE WARM_S WINDOW_S
//
// One io_context thread keeps DEPTH async_read_some_at requests outstanding,
// one per asio::random_access_file (made from a descriptor opened with
// O_DIRECT when COLD, and its dups: see file_cell). Prints one line: "asio-file-result key=value ..." (the
// window's figures; CPU is this process's, getrusage(RUSAGE_SELF) over the
// window), or "asio-file-unavailable: REASON" and exits with 3.
#include <asio.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "io_common.hpp"
#include "io_measure.hpp"
#include "io_pattern.hpp"
#include "process_usage.hpp"

#if !defined(ASIO_HAS_IO_URING) || !defined(ASIO_HAS_FILE)
#error "xrtio-bench-asio-file must be compiled with ASIO_HAS_IO_URING (tools/CMakeLists.txt)"
#endif

namespace bench::io {
namespace {

// Asio's io_uring service keeps one operation per kind per I/O object in the
// ring; the others wait in the object's queue (io_uring_service::start_op in
// asio/detail/impl/io_uring_service.ipp). With one random_access_file, depth
// 16 would still be one read in flight, so each slot has its own file object
// on its own descriptor (dup of the cell's).
struct file_cell {
  const io_spec& s;
  asio::io_context io{1};
  offset_gen offsets;

  struct slot {
    file_cell* cell;
    asio::random_access_file file;
    aligned_buffer buf;
    std::uint64_t off = 0;
    clk::time_point issued;

    void issue() {
      auto& c = *cell;
      off = c.offsets.next();
      poison(buf.get(), c.s.bytes(), off);
      issued = clk::now();
      file.async_read_some_at(off, asio::buffer(buf.get(), c.s.bytes()),
                              [this](const asio::error_code& ec, std::size_t n) { done(ec, n); });
    }
    void done(const asio::error_code& ec, std::size_t n) {
      auto& c = *cell;
      complete(issued, !ec && n == c.s.bytes() && verify(buf.get(), n, off));
      if (!stopping()) issue();
    }
  };
  std::vector<slot> slots;

  // Each slot's file gets its own dup of fd (the caller keeps fd).
  file_cell(const io_spec& spec, int fd) : s(spec), offsets(spec, 0x5eed0004) {
    slots.reserve(std::size_t(s.depth));
    for (int i = 0; i < s.depth; ++i) {
      int d = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
      if (d < 0) throw std::runtime_error(std::string("dup: ") + std::strerror(errno));
      slots.push_back(slot{this, asio::random_access_file(io, d), make_aligned(s.bytes()), 0, {}});
    }
  }
};

bool parse(int argc, char** argv, io_spec& s) {
  if (argc != 8) return false;
  s.path = argv[1];
  if (!std::strcmp(argv[2], "rand4k")) s.kind = io_case::rand4k;
  else if (!std::strcmp(argv[2], "seq1m")) s.kind = io_case::seq1m;
  else return false;
  s.cold = std::atoi(argv[3]) != 0;
  s.depth = std::atoi(argv[4]);
  s.file_size = std::strtoull(argv[5], nullptr, 10);
  s.warm_s = std::atof(argv[6]);
  s.window_s = std::atof(argv[7]);
  return s.depth > 0 && s.file_size >= s.bytes();
}

int run(const io_spec& s) {
  reset_cell();
  int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC | (s.cold ? O_DIRECT : 0));
  if (fd < 0) {
    std::fprintf(stderr, "xrtio-bench-asio-file: open %s: %s\n", s.path.c_str(), std::strerror(errno));
    return 1;
  }
  std::unique_ptr<file_cell> c;
  try {
    c = std::make_unique<file_cell>(s, fd);
    ::close(fd);
  } catch (const std::exception& e) {
    // io_uring refused (an old kernel, seccomp, qemu-user): asio throws here.
    std::printf("asio-file-unavailable: %s\n", e.what());
    ::close(fd);
    return 3;
  }
  for (auto& sl : c->slots) sl.issue();
  std::thread t([&] {
    set_thread_name("c:io");
    c->io.run();  // returns when every slot saw the stop and issued nothing more
  });
  io_result r = measure_window(s.warm_s, s.window_s, s.bytes(), std::uint64_t(s.depth));
  t.join();
  finish_cell(r);
  std::printf(
      "asio-file-result requests=%llu iops=%.9g gib_per_s=%.9g cpu_us_per_gib=%.9g p50_us=%.9g p99_us=%.9g "
      "allocs_per_request=%.9g verified=%llu errors=%llu\n",
      static_cast<unsigned long long>(r.requests), r.iops, r.gib_per_s, r.cpu_us_per_gib, r.p50_us, r.p99_us,
      r.allocs_per_request, static_cast<unsigned long long>(r.verified), static_cast<unsigned long long>(r.errors));
  return 0;
}

}  // namespace
}  // namespace bench::io

int main(int argc, char** argv) {
  bench::io::io_spec s;
  if (!bench::io::parse(argc, argv, s)) {
    std::fprintf(stderr, "usage: xrtio-bench-asio-file PATH rand4k|seq1m COLD DEPTH FILE_SIZE WARM_S WINDOW_S\n");
    return 2;
  }
  bench::set_thread_name("main");
  return bench::io::run(s);
}
