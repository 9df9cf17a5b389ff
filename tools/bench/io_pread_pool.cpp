// pread-pool: what an Asio user writes without an asynchronous file API.
// One io_context thread keeps queue_depth requests outstanding; each is a
// pread() posted to a pool of 4 threads, whose completion is posted back to
// the io_context thread (which checks it and issues the next). At most 4
// preads run at once; the rest wait in the pool's queue.
//
// pread-post, the same loop with each pread() done on the io_context thread
// itself and only its completion posted (Asio's rule: never complete inside
// the initiating call), is a bound for the cached cells rather than an
// alternative: it is what xrtio does with a read the page cache holds (one
// preadv2(RWF_NOWAIT), then a post: docs/DESIGN.md, "File I/O") minus the
// library's own work (the lease, the completion's registration, the sync to
// the device), so xrtio's ratio to it is what that work costs. Its reads
// block the loop one at a time, which is why no user should read a file
// this way unless it is cached.
#include <asio.hpp>
#include <thread>
#include <vector>

#include "io_common.hpp"
#include "io_contenders.hpp"
#include "io_pattern.hpp"
#include "process_usage.hpp"

namespace bench::io {
namespace {

struct pool_cell {
  const io_spec& s;
  int fd;
  bool on_io_thread;  // pread-post
  asio::io_context io{1};
  asio::thread_pool pool{pool_threads};
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(io);
  offset_gen offsets;
  int active = 0;  // slots with a request outstanding (io thread only)

  struct slot {
    pool_cell* cell;
    aligned_buffer buf;
    std::uint64_t off = 0;
    clk::time_point issued;

    void issue() {
      auto& c = *cell;
      off = c.offsets.next();
      poison(buf.get(), c.s.bytes(), off);
      issued = clk::now();
      if (c.on_io_thread) {
        ssize_t got = ::pread(c.fd, buf.get(), c.s.bytes(), off_t(off));
        asio::post(c.io, [this, got] { done(got); });
        return;
      }
      asio::post(c.pool, [this] {
        ssize_t got = ::pread(cell->fd, buf.get(), cell->s.bytes(), off_t(off));
        asio::post(cell->io, [this, got] { done(got); });
      });
    }
    void done(ssize_t got) {
      auto& c = *cell;
      complete(issued, got == ssize_t(c.s.bytes()) && verify(buf.get(), c.s.bytes(), off));
      if (!stopping()) return issue();
      if (--c.active == 0) c.guard.reset();
    }
  };
  std::vector<slot> slots;

  pool_cell(const io_spec& spec, int file, bool inline_reads)
      : s(spec), fd(file), on_io_thread(inline_reads), offsets(spec, 0x5eed0002) {
    slots.reserve(std::size_t(s.depth));
    for (int i = 0; i < s.depth; ++i) slots.push_back(slot{this, make_aligned(s.bytes()), 0, {}});
  }
};

}  // namespace

io_result run_pread_pool(const io_spec& s, bool on_io_thread) {
  cell_file file(s);
  pool_cell c(s, file.fd(), on_io_thread);
  for (int i = 0; i < pool_threads; ++i) asio::post(c.pool, [] { set_thread_name("c:pool"); });
  asio::post(c.io, [&c] {
    c.active = int(c.slots.size());
    for (auto& sl : c.slots) sl.issue();
  });
  std::thread t([&] {
    set_thread_name("c:io");
    c.io.run();
  });
  io_result r = measure_window(s.warm_s, s.window_s, s.bytes(), std::uint64_t(s.depth));
  t.join();
  c.pool.join();
  finish_cell(r);
  r.effective_depth = on_io_thread ? 1 : std::min(s.depth, pool_threads);
  r.direct = s.cold;
  return r;
}

}  // namespace bench::io
