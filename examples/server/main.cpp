// xrtio-server: kernels over HTTP/1.1 (docs/SERVER.md).
//   xrtio-server --port PORT [--threads N] [--sim-latency-us L] [--baseline] [--inloop | --reactor]
//                [--no-run] [--xrt-noop] [--trace FILE] ... (--help lists every flag; docs/SERVER.md)
// One io thread (the default) drives the runtime itself (in-loop mode);
// --threads N > 1 (or --reactor) gives the runtime its reactor thread.
// With --port 0 it binds a free port; either way it prints
// "listening on 127.0.0.1:PORT" once it accepts connections. --trace FILE
// records the runs' timeline and writes it as Chrome trace-event JSON on exit.
#include <malloc.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>

#include "options.hpp"
#include "server.hpp"
#include "xrtio/trace.hpp"
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

// The run timeline, for the Perfetto UI or chrome://tracing, into the file
// opened at the start (open_trace).
void write_trace(const xrtio::runtime& rt, std::ofstream& f, const std::string& path) {
  xrtio::write_chrome_trace(rt, f);
  f.close();
  if (!f) throw std::runtime_error("--trace: cannot write " + path);
  auto t = xrtio::trace_statistics(rt);
  std::printf("trace: %s (%llu events recorded, %llu dropped)\n", path.c_str(),
              static_cast<unsigned long long>(t.recorded), static_cast<unsigned long long>(t.dropped));
}

// Opened before the server listens: a path that cannot be written is refused
// at once (exit 1), not found out at shutdown after the whole run.
std::ofstream open_trace(const std::string& path) {
  std::ofstream f;
  if (path.empty()) return f;
  f.open(path);
  if (!f) throw std::runtime_error("--trace: cannot write " + path + ": " + std::strerror(errno));
  return f;
}

}  // namespace

// glibc returns the top of the main heap to the kernel (brk) whenever more
// than 128 KiB of it is free, and a request's buffers freed at the top then
// fault fresh zeroed pages back in for the next ones: at 1024 connections
// with --inloop (every allocation in the main arena) brk and its TLB flushes
// were 29 % of the server's samples, and it served 3,161-3,165 req/s against
// 16,017-19,406 with this threshold (L = 50 us, alternating 4 s runs;
// docs/SERVER.md). Both servers get it.
constexpr int heap_trim_threshold = 64 << 20;

int main(int argc, char** argv) {
  auto opts = server::parse_options(argc, argv);
  if (!opts) return 2;
  ::mallopt(M_TRIM_THRESHOLD, heap_trim_threshold);
  try {
    auto trace = open_trace(opts->trace_file);
    // The completion-to-resume histogram is opt-in (a clock read per run);
    // a server that exports /metrics wants it.
    // In-loop (one io thread, the default): no reactor thread; the io thread
    // drives the runtime (server.cpp).
    xrtio::runtime rt(xrtio::runtime_options{.reactor_thread = !opts->inloop,
                                             .trace_capacity = opts->trace_file.empty() ? 0 : opts->trace_capacity,
                                             .latency_histograms = true});
    auto ctx = open_device(*opts);
    ctx.bind(rt);
    server::kernel_set kernels{ctx.kernel("vadd"), ctx.kernel("scale"), ctx.kernel("matmul"), ctx.kernel("checksum"),
                               opts->xrt_noop ? std::size_t{4096} : std::size_t{1}};
    server::http_server srv(*opts, ctx, std::move(kernels), rt);
    std::printf("listening on 127.0.0.1:%u (%s, %u io threads, sim latency %ld us%s)\n", srv.port(),
                opts->no_run     ? "no run: kernels are not run"
                : opts->baseline ? "baseline: blocking start()+wait() on a thread pool"
                : opts->inloop ? "xrtio: co_await async_run, in-loop runtime"
                               : "xrtio: co_await async_run, reactor thread",
                opts->threads, opts->sim_latency_us, opts->xrt_noop ? ", XRT no-op device" : "");
    std::fflush(stdout);
    srv.run();
    if (!opts->trace_file.empty()) write_trace(rt, trace, opts->trace_file);
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
