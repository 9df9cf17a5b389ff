// Built against an installed xrtio by find_package: proves the package config.
// It also uses Asio's deprecated API (io_service, io_context::work): linking
// xrtio must not take any of Asio away from the user's own files.
#include <asio.hpp>
#include <xrtio/xrtio.hpp>
#include <cstdio>
int main() {
  auto ctx = xrtio::sim::open();
  auto a = ctx.alloc(16), b = ctx.alloc(16), c = ctx.alloc(16);
  std::uint32_t va[4] = {1, 2, 3, 4}, vb[4] = {10, 20, 30, 40}, vc[4] = {};
  a.write(std::span<const std::uint32_t>(va));
  b.write(std::span<const std::uint32_t>(vb));
  xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{4}).wait();
  c.read(std::span<std::uint32_t>(vc));
  std::printf("%u %u %u %u\n", vc[0], vc[1], vc[2], vc[3]);
  asio::io_service io;
  auto work = std::make_unique<asio::io_context::work>(io);
  bool ran = false;
  xrtio::async_run(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{4},
                   asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                     ran = !ec;
                     work.reset();
                   }));
  io.run();
  std::printf("async_run on an io_service: %s\n", ran ? "ok" : "failed");
  return vc[3] == 44 && ran ? 0 : 1;
}
