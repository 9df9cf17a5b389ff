// xrtio-server: kernels over HTTP/1.1 (docs/SERVER.md).
//   xrtio-server --port PORT [--threads N] [--sim-latency-us L] [--baseline] [--xrt-noop] [--trace FILE]
// With --port 0 it binds a free port; either way it prints
// "listening on 127.0.0.1:PORT" once it accepts connections.
#include <cstdio>
#include <exception>

#include "options.hpp"
#include "server.hpp"
#include "xrtio/xrtio.hpp"
#if XRTIO_HAS_XRT
#include "xrtio/xrt.hpp"
#endif

namespace {

xrtio::context open_device(const server::options& o) {
  xrtio::memory_budget budget(o.budget_bytes);
  if (o.xrt_noop) {
#if XRTIO_HAS_XRT && defined(XRTIO_SERVER_XCLBIN)
    // The no-op device completes each run after the delay without running
    // the kernel: responses then carry whatever the output buffer held.
    xrtio::xrt_backend::use_noop_device(std::chrono::microseconds(o.sim_latency_us));
    return xrtio::xrt_backend::open({.xclbin_path = XRTIO_SERVER_XCLBIN}, budget);
#else
    throw std::runtime_error("--xrt-noop: this build has no XRT backend");
#endif
  }
  xrtio::sim::device_config cfg;
  cfg.compute_units = o.compute_units;
  cfg.latency.fixed = std::chrono::microseconds(o.sim_latency_us);
  return xrtio::sim::open(std::move(cfg), budget);
}

}  // namespace

int main(int argc, char** argv) {
  auto opts = server::parse_options(argc, argv);
  if (!opts) return 2;
  if (!opts->trace_file.empty()) {
    std::fprintf(stderr, "xrtio-server: --trace needs the library's trace support, not in this build\n");
    return 2;
  }
  try {
    xrtio::runtime rt;
    auto ctx = open_device(*opts);
    ctx.bind(rt);
    server::kernel_set kernels{ctx.kernel("vadd"), ctx.kernel("scale"), ctx.kernel("matmul"), ctx.kernel("checksum"),
                               opts->xrt_noop ? std::size_t{4096} : std::size_t{1}};
    server::http_server srv(*opts, ctx, std::move(kernels), rt);
    std::printf("listening on 127.0.0.1:%u (%s, %u io threads, sim latency %ld us%s)\n", srv.port(),
                opts->baseline ? "baseline: blocking start()+wait() on a thread pool" : "xrtio: co_await async_run",
                opts->threads, opts->sim_latency_us, opts->xrt_noop ? ", XRT no-op device" : "");
    std::fflush(stdout);
    srv.run();
    auto s = rt.stats();
    std::printf("stopped: %llu runs submitted, %llu completed, %llu timed out, %llu cancelled\n",
                static_cast<unsigned long long>(s.submitted), static_cast<unsigned long long>(s.completed),
                static_cast<unsigned long long>(s.timed_out), static_cast<unsigned long long>(s.cancelled));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xrtio-server: %s\n", e.what());
    return 1;
  }
}
