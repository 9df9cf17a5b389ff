// The README's first example, whole: a coroutine adds two vectors on the
// simulated device and checks the sum. Built and run by CTest
// (examples.quickstart) so that the README stays true.
#include <asio.hpp>
#include <cstdio>
#include <numeric>
#include <vector>

#include <xrtio/xrtio.hpp>

using namespace std::chrono_literals;

asio::awaitable<void> add(xrtio::context ctx, std::uint32_t n) {
  // Device buffers (host-mapped on the simulator and on the NPU).
  auto a = ctx.alloc(n * sizeof(std::uint32_t));
  auto b = ctx.alloc(n * sizeof(std::uint32_t));
  auto c = ctx.alloc(n * sizeof(std::uint32_t));
  std::vector<std::uint32_t> va(n), vb(n), vc(n);
  std::iota(va.begin(), va.end(), 0u);
  std::iota(vb.begin(), vb.end(), 100u);
  a.write(std::span<const std::uint32_t>(va));  // copies in, synced to the device
  b.write(std::span<const std::uint32_t>(vb));

  // in(): read lease, out(): write lease, held until the device lets go.
  xrtio::run_result r = co_await xrtio::async_run(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(c), n,
                                                  xrtio::run_options{.timeout = 5s}, asio::use_awaitable);
  // Resumed on this coroutine's executor. Errors throw std::system_error
  // here: its code() is an xrtio::errc, or asio::error::operation_aborted
  // when cancelled (catch std::system_error, not xrtio::error; or use
  // asio::experimental::as_tuple, from <asio/experimental/as_tuple.hpp>,
  // or redirect_error).
  c.read(std::span<std::uint32_t>(vc));  // synced from the device, copied out
  bool right = true;
  for (std::uint32_t i = 0; i < n; ++i) right = right && vc[i] == va[i] + vb[i];
  std::printf("vadd of %u u32 on %s: %s (state %s)\n", n, ctx.native().name().c_str(), right ? "correct" : "WRONG",
              std::string(xrtio::to_string(r.state)).c_str());
}

int main() {
  xrtio::runtime rt;                                                // one reactor thread
  auto ctx = xrtio::sim::open({}, xrtio::memory_budget(64 << 20));  // simulated device, 64 MiB budget
  ctx.bind(rt);                                                     // its runs go to rt
  asio::io_context io;
  asio::co_spawn(io, add(ctx, 1024), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
}
