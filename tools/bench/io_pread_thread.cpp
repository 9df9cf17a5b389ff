// pread-thread: the simplest code. One thread, a blocking pread() loop; at
// any queue depth it is still one thread with one request in flight.
#include <thread>

#include "io_common.hpp"
#include "io_contenders.hpp"
#include "io_pattern.hpp"
#include "process_usage.hpp"

namespace bench::io {

io_result run_pread_thread(const io_spec& s) {
  cell_file file(s);
  auto buf = make_aligned(s.bytes());
  const std::size_t n = s.bytes();
  std::thread t([&] {
    set_thread_name("c:pread");
    offset_gen offsets(s, 0x5eed0001);
    while (!stopping()) {
      std::uint64_t off = offsets.next();
      poison(buf.get(), n, off);
      auto t0 = clk::now();
      ssize_t got = ::pread(file.fd(), buf.get(), n, off_t(off));
      complete(t0, got == ssize_t(n) && verify(buf.get(), n, off));
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
