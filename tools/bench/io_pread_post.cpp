// pread-post, a bound for the cached cells rather than an alternative: each
// request is one pread() on the io_context thread itself, its completion
// posted through that io_context, as the Asio rule (never complete inside
// the initiating call) asks of any asynchronous read. It is what xrtio does
// with a read the page cache holds (one preadv2(RWF_NOWAIT), then a post:
// docs/DESIGN.md, "File I/O"), minus the library's own work (the lease, the
// completion's registration, the sync to the device), so xrtio's ratio to it
// is what that work costs. Queue depth slots, one destination each, as the
// others; the reads still happen one at a time, blocking the loop, which is
// why no user should read a file this way unless it is cached.
#include <asio.hpp>
#include <thread>
#include <vector>

#include "io_common.hpp"
#include "io_contenders.hpp"
#include "io_pattern.hpp"
#include "process_usage.hpp"

namespace bench::io {
namespace {

struct post_cell {
  const io_spec& s;
  int fd;
  asio::io_context io{1};
  offset_gen offsets;

  struct slot {
    post_cell* cell;
    aligned_buffer buf;
    std::uint64_t off = 0;
    clk::time_point issued;

    void issue() {
      auto& c = *cell;
      off = c.offsets.next();
      poison(buf.get(), c.s.bytes(), off);
      issued = clk::now();
      ssize_t got = ::pread(c.fd, buf.get(), c.s.bytes(), off_t(off));
      asio::post(c.io, [this, got] { done(got); });
    }
    void done(ssize_t got) {
      auto& c = *cell;
      complete(issued, got == ssize_t(c.s.bytes()) && verify(buf.get(), c.s.bytes(), off));
      if (!stopping()) issue();
    }
  };
  std::vector<slot> slots;

  post_cell(const io_spec& spec, int file) : s(spec), fd(file), offsets(spec, 0x5eed0006) {
    slots.reserve(std::size_t(s.depth));
    for (int i = 0; i < s.depth; ++i) slots.push_back(slot{this, make_aligned(s.bytes()), 0, {}});
  }
};

}  // namespace

io_result run_pread_post(const io_spec& s) {
  cell_file file(s);
  post_cell c(s, file.fd());
  asio::post(c.io, [&c] {
    for (auto& sl : c.slots) sl.issue();
  });
  std::thread t([&] {
    set_thread_name("c:io");
    c.io.run();  // returns when every slot saw the stop and posted nothing more
  });
  io_result r = measure_window(s.warm_s, s.window_s, s.bytes(), std::uint64_t(s.depth));
  t.join();
  finish_cell(r);
  r.effective_depth = 1;
  r.direct = s.cold;
  return r;
}

}  // namespace bench::io
