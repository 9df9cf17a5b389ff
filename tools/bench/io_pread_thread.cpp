// pread-thread: the simplest code. One thread, a blocking pread() loop; at
// any queue depth it is still one thread with one request in flight. It
// reads into queue-depth destinations in turn, the memory every other
// contender fills (one buffer per request in flight): a program that loads
// a file keeps what it read, so its destinations do not stay in the CPU's
// cache. pread-thread-1buf is the same loop into one buffer, which does
// (1 MiB fits in L2): shown beside it, but not an alternative the goals
// count, since it keeps none of what it read (docs/PERFORMANCE.md, "pread-thread
// reads into the memory the others fill").
#include <thread>
#include <vector>

#include "io_common.hpp"
#include "io_contenders.hpp"
#include "io_pattern.hpp"
#include "process_usage.hpp"

namespace bench::io {

io_result run_pread_thread(const io_spec& s, bool one_buffer) {
  cell_file file(s);
  std::vector<aligned_buffer> bufs;
  int slots = one_buffer ? 1 : s.depth;
  for (int i = 0; i < slots; ++i) bufs.push_back(make_aligned(s.bytes()));
  const std::size_t n = s.bytes();
  std::thread t([&] {
    set_thread_name("c:pread");
    offset_gen offsets(s, 0x5eed0001);
    std::size_t next = 0;
    while (!stopping()) {
      std::uint64_t off = offsets.next();
      std::byte* buf = bufs[next].get();
      next = next + 1 == bufs.size() ? 0 : next + 1;
      poison(buf, n, off);
      auto t0 = clk::now();
      ssize_t got = ::pread(file.fd(), buf, n, off_t(off));
      complete(t0, got == ssize_t(n) && verify(buf, n, off));
    }
  });
  io_result r = measure_window(s.warm_s, s.window_s, n, 1);
  t.join();
  finish_cell(r);
  r.effective_depth = 1;
  r.direct = s.cold;
  return r;
}

}  // namespace bench::io
