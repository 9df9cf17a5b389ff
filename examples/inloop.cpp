// In-loop mode, as the README shows it: one io_context thread drives the
// runtime itself (xrtio::run), so completions need no reactor thread and no
// wake-up hop. Prints how many runs completed and what the runtime counted.
#include <asio.hpp>
#include <cstdio>

#include <xrtio/xrtio.hpp>

int main() {
  xrtio::runtime rt(xrtio::runtime_options{.reactor_thread = false});
  auto ctx = xrtio::sim::open();
  ctx.bind(rt);
  asio::io_context io;
  int done = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 1000; ++i) {
      co_await xrtio::async_run(ctx.kernel("noop"), asio::use_awaitable);
      ++done;
    }
  }, asio::detached);
  xrtio::run(io, rt);  // returns when io is out of work and no run is in flight
  auto s = rt.stats();
  std::printf("in-loop: %d runs completed (runtime: %llu completed, %llu in flight)\n", done,
              static_cast<unsigned long long>(s.completed), static_cast<unsigned long long>(s.in_flight));
  return done == 1000 && s.completed == 1000 && s.in_flight == 0 ? 0 : 1;
}
