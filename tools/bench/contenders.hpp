// The contenders: the ways of waiting for kernel runs that the bench compares,
// each run for one cell. Simulated device: contenders_sim.cpp; XRT no-op
// device: contenders_xrt.cpp; names and dispatch: contenders.cpp.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "measurement.hpp"

// The XRT cells exist when tools/CMakeLists.txt found XRT (XRTIO_BENCH_RAW_XRT)
// and the library has its XRT backend (XRTIO_HAS_XRT).
#if defined(XRTIO_BENCH_RAW_XRT) && defined(XRTIO_HAS_XRT)
#define BENCH_XRT 1
#else
#define BENCH_XRT 0
#endif

namespace bench {

constexpr int max_threads = 256;  // blocking-threads and raw-xrt-wait: at most this many threads
int pool_size();                  // pool-offload's thread_pool: 2 x cores, at most 64

// Every contender, in the default sweep order.
const std::vector<std::string>& all_contenders();
bool is_xrt_contender(const std::string& n);

// Runs one cell: a fresh device (and runtime), c workers, one measured window.
// nullopt: no such contender in this build. L is ignored by the XRT contenders
// (their delay is the process's one --xrt-delay-us).
std::optional<result> run_contender(const std::string& name, std::chrono::microseconds latency, int c);

// XRT no-op device set-up for the XRT contenders, once per process: the
// completion delay and an xclbin synthesized by xrtio-mkxclbin (mkxclbin:
// its path, or empty for the built one). False (with a message printed) when
// they cannot run; false without a message when the bench has no XRT.
bool prepare_xrt(long delay_us, std::string mkxclbin);

// The contenders' run functions.
result run_xrtio(std::chrono::nanoseconds lat, int c);
result run_xrtio_inloop(std::chrono::nanoseconds lat, int c);
result run_blocking(std::chrono::nanoseconds lat, int c);
result run_pool(std::chrono::nanoseconds lat, int c);
result run_loop_poll(std::chrono::nanoseconds lat, int c);
#if BENCH_XRT
result run_raw_xrt(int c);
result run_raw_xrt_wait(int c);
result run_xrtio_xrt(int c);
result run_prepared_xrt(int c);
result run_xrtio_inloop_xrt(int c);
#endif

}  // namespace bench
