#include <doctest/doctest.h>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/experimental/deferred.hpp>

#include "xrtio/xrtio.hpp"

using namespace std::chrono_literals;

TEST_CASE("smoke: async_run with a callback completes vadd") {
  xrtio::runtime rt;
  auto ctx = xrtio::sim::open();
  ctx.bind(rt);
  auto a = ctx.alloc(64), b = ctx.alloc(64), c = ctx.alloc(64);
  std::vector<std::uint32_t> va(16, 2), vb(16, 3), vc(16);
  a.write(std::span<const std::uint32_t>(va));
  b.write(std::span<const std::uint32_t>(vb));
  asio::io_context io;
  std::error_code got{xrtio::errc::busy};
  int calls = 0;
  xrtio::async_run(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{16},
                   asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result r) {
                     got = ec;
                     ++calls;
                     CHECK(r.state == xrtio::run_state::completed);
                   }));
  CHECK(calls == 0);
  io.run();
  CHECK(calls == 1);
  CHECK(!got);
  c.read(std::span<std::uint32_t>(vc));
  CHECK(vc[5] == 5);
}
