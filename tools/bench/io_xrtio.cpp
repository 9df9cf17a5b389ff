// xrtio: xrtio::async_read_file into simulated device buffers. One
// io_context thread keeps queue_depth reads in flight (each completion checks
// its buffer and issues the next); the runtime's reactor thread submits them
// to its io_uring and posts the completions back (a read the page cache holds
// whole, up to file_options::inline_read_limit, completes on the io thread
// itself: docs/DESIGN.md, "File I/O"). xrtio-inloop: the same with
// a runtime without a thread, driven by the io thread (xrtio::run): no hop. One buffer per slot,
// allocated before the window, like the other contenders' aligned buffers.
// xrtio-noreg, xrtio-inloop-noreg: file_options::register_with_ring off.
#include <asio.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "io_common.hpp"
#include "io_contenders.hpp"
#include "io_pattern.hpp"
#include "process_usage.hpp"
#include "xrtio/file.hpp"
#include "xrtio/inloop.hpp"
#include "xrtio/xrtio.hpp"

namespace bench::io {
namespace {

struct xrtio_cell {
  const io_spec& s;
  xrtio::file& file;
  asio::io_context io{1};
  offset_gen offsets;

  struct slot {
    xrtio_cell* cell;
    xrtio::buffer buf;
    std::byte* mem;  // buf.map(): touched only between a completion and the next issue
    std::uint64_t off = 0;
    clk::time_point issued;

    void issue() {
      auto& c = *cell;
      off = c.offsets.next();
      poison(mem, c.s.bytes(), off);
      issued = clk::now();
      // Bound to the io_context: a plain callback's associated executor would
      // be Asio's system executor (its own thread pool), not this loop.
      try {
        xrtio::async_read_file(c.file, off, xrtio::out(buf),
                               asio::bind_executor(c.io, [this](std::error_code ec, std::size_t n) { done(ec, n); }));
      } catch (const std::exception&) {
        g_failed.fetch_add(1);  // counted as an error; this slot issues nothing more
      }
    }
    void done(std::error_code ec, std::size_t n) {
      auto& c = *cell;
      complete(issued, !ec && n == c.s.bytes() && verify(mem, n, off));
      if (!stopping()) issue();
    }
  };
  std::vector<slot> slots;

  xrtio_cell(const io_spec& spec, xrtio::file& f, xrtio::context& ctx) : s(spec), file(f), offsets(spec, 0x5eed0005) {
    slots.reserve(std::size_t(s.depth));
    for (int i = 0; i < s.depth; ++i) {
      auto b = ctx.alloc(s.bytes());
      auto* m = b.map().data();
      slots.push_back(slot{this, std::move(b), m, 0, {}});
    }
  }
};

}  // namespace

io_result run_xrtio_file(const io_spec& s, bool inloop, bool registered) {
  xrtio::runtime_options ro;
  ro.reactor_thread = !inloop;
  auto rt = named("l:rx", [&] { return std::make_unique<xrtio::runtime>(ro); });
  auto ctx = named("l:dev", [] { return xrtio::sim::open(); });
  ctx.bind(*rt);
  xrtio::file_options fo;
  fo.direct = s.cold;
  fo.runtime = rt.get();
  fo.register_with_ring = registered;
  if (s.knobs.inline_limit >= 0) fo.inline_read_limit = std::size_t(s.knobs.inline_limit);
  if (s.knobs.worker_min >= 0) fo.worker_read_min = std::size_t(s.knobs.worker_min);
  if (s.knobs.worker_floor >= 0) fo.worker_in_flight_min = std::size_t(s.knobs.worker_floor);
  auto f = xrtio::file::open(s.path, xrtio::file_mode::read, fo);
  if (s.cold && !f.direct())
    throw std::runtime_error("xrtio::file is buffered, not O_DIRECT: " + std::string(f.direct_fallback_reason()));
  xrtio_cell c(s, f, ctx);
  asio::post(c.io, [&c] {
    for (auto& sl : c.slots) sl.issue();
  });
  std::thread t([&] {
    set_thread_name("c:io");
    // Both return when every slot saw the stop and issued nothing more.
    if (inloop) xrtio::run(c.io, *rt);
    else c.io.run();
  });
  io_result r = measure_window(s.warm_s, s.window_s, s.bytes(), std::uint64_t(s.depth));
  t.join();
  finish_cell(r);
  r.effective_depth = s.depth;
  r.direct = f.direct();
  return r;
}

}  // namespace bench::io
