// xrtio-bench's main: parse the arguments, set up, measure the host limits,
// run the sweep, report. The header comment below describes the bench.
//
// xrtio-bench: xrtio's async_run against the ways people wait for kernel
// runs without it, on the simulated device (and XRT's no-op device when
// built with XRT). See docs/PERFORMANCE.md for the targets and results.
//
//   xrtio-bench [--quick] [--repeat N] [--window S] [--json FILE] [--plot FILE.png]
//               [--latencies US,US,..] [--in-flight C,C,..] [--contenders a,b,..]
//               [--no-xrt] [--xrt-delay-us US] [--mkxclbin PATH] [--spin-us US] [--no-spin-trials] [--doze-us US] [--max-poll-us US] [--predict|--no-predict]
//               [--trace-capacity N] [--latency-histograms]
//   xrtio-bench --io [--quick] [--repeat N] [--window S] [--warm S] [--json FILE] [--io-dir DIR] [--io-size BYTES]
//               [--io-cases rand4k,seq1m] [--io-cache hot,cold] [--io-depths D,..] [--contenders a,b,..]
//
// --io: file reads instead of kernel runs (io_bench.cpp describes that sweep).
//
// --spin-us / --max-poll-us set the xrtio runtime's spin_window and
// max_poll_interval (runtime_options) for experiments, --no-spin-trials
// turns spin_trials off; defaults: the library's.
//
// Cells: every (contender, device latency L, runs in flight C). In each cell
// a fresh device (and runtime) is made, C workers each run the noop kernel
// in a loop; after a warm-up (every worker has completed a run), one
// measurement window of --window seconds counts completions, heap
// allocations (global operator new is replaced: alloc_count.cpp), CPU time
// (process, and per thread role from /proc/self/task/*/schedstat), resume
// latency (run_result::device_completed to the moment the waiting code runs
// again) and resident memory. Each metric is the median over --repeat sweeps.
// Before the sweep, the host limits (host_limits.hpp): three thread hand-offs
// and two wake-up chains (one hop, two hops through a relay thread)
// the contenders' resume latencies are read against.
//
// Contenders:
//   xrtio            async_run + use_awaitable, C coroutines on one io_context thread
//   blocking-threads one thread per in-flight run in xrtio::start(k).wait(), at most 256 threads
//   pool-offload     coroutine on one io_context thread: post to a thread_pool, wait() there, post back
//   loop-poll        xrtio::start on the io_context thread; a re-posted poller checks
//                    run_handle::state() and resumes the waiting coroutines
//   raw-xrt          (XRT no-op device) C xrt::run objects, start() + state() polling on one thread
//   raw-xrt-wait     (XRT no-op device) one thread per in-flight run (capped), start() + wait()
//   xrtio            on the XRT no-op device as well ("xrtio@xrt" in the table)
//   xrtio-prepared   prepare() once, async_execute() per run, on the XRT no-op device ("xrtio-prepared@xrt")
#include <cstdlib>

#include "alloc_count.hpp"
#include "cell_watchdog.hpp"
#include "contenders.hpp"
#include "host_limits.hpp"
#include "idle_wakeups.hpp"
#include "io_bench.hpp"
#include "measurement.hpp"
#include "options.hpp"
#include "process_usage.hpp"
#include "report.hpp"
#include "sweep.hpp"

namespace {

using namespace bench;

// Samples per host limit (0.5 s for all three on the 2-core VM, quick or not).
constexpr int host_limit_samples = 20000;

void set_up_process(const options& o) {
  g_opts = o.bench;
  init_sampling();
  set_thread_name("main");
  arm_alloc_trace_from_env();
}

}  // namespace

int main(int argc, char** argv) {
  auto opts = parse_options(argc, argv);
  if (!opts) return 2;
  const options& o = *opts;
  set_up_process(o);
  // A cell that takes minutes has hung (cells take a window plus set-up).
  double watchdog_s = 120;
  if (const char* w = std::getenv("XRTIO_BENCH_WATCHDOG_S")) watchdog_s = std::atof(w);
  cell_watchdog_start(watchdog_s);
  if (o.io) return io::run_io_bench(o);
  bool xrt = o.wants_xrt() && prepare_xrt(o.xrt_delay_us, o.mkxclbin);
  print_preamble(o, xrt);
  auto limits = measure_host_limits(host_limit_samples);
  print_host_limits(limits);

  auto cells = make_cells(o, xrt);
  run_sweep(cells, o.repeat);
  take_medians(cells);
  print_table(cells);
  print_ratios(cells, o, xrt);
  print_limit_ratios(cells, limits);
  double idle = median_idle_wakeups_per_s(o.repeat, o.quick);
  print_process_summary(idle);

  if (!o.json.empty() && !write_json(o.json, cells, limits, idle)) return 1;
  if (!o.plot.empty() && !plot_sweep(o.plot, cells, o, xrt)) return 1;
  return 0;
}
