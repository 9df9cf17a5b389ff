// Must not compile: Asio's older executor model (asio::io_context::strand)
// cannot promise a non-blocking post, which a completion needs (invariant 1).
// The CTest "compile fail: ..." builds it and expects xrtio's static_assert.
#include <asio.hpp>
#include <xrtio/xrtio.hpp>

int main() {
  asio::io_context io;
  asio::io_context::strand legacy(io);
  auto ctx = xrtio::sim::open();
  xrtio::async_run(ctx.kernel("noop"), asio::bind_executor(legacy, [](std::error_code, xrtio::run_result) {}));
}
