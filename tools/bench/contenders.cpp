// The contenders' names (the default sweep order) and the dispatch from a
// name to the function that runs its cell.
#include "contenders.hpp"

namespace bench {

const std::vector<std::string>& all_contenders() {
  static const std::vector<std::string> names = {
      "xrtio",   "xrtio-inloop", "blocking-threads", "pool-offload",       "loop-poll",
      "raw-xrt", "raw-xrt-wait", "xrtio@xrt",        "xrtio-prepared@xrt", "xrtio-inloop@xrt"};
  return names;
}

bool is_xrt_contender(const std::string& n) {
  return n == "raw-xrt" || n == "raw-xrt-wait" || n == "xrtio@xrt" || n == "xrtio-prepared@xrt" ||
         n == "xrtio-inloop@xrt";
}

std::optional<result> run_contender(const std::string& name, std::chrono::microseconds lat, int c) {
  if (name == "xrtio") return run_xrtio(lat, c);
  if (name == "xrtio-inloop") return run_xrtio_inloop(lat, c);
  if (name == "blocking-threads") return run_blocking(lat, c);
  if (name == "pool-offload") return run_pool(lat, c);
  if (name == "loop-poll") return run_loop_poll(lat, c);
#if BENCH_XRT
  if (name == "raw-xrt") return run_raw_xrt(c);
  if (name == "xrtio@xrt") return run_xrtio_xrt(c);
  if (name == "raw-xrt-wait") return run_raw_xrt_wait(c);
  if (name == "xrtio-prepared@xrt") return run_prepared_xrt(c);
  if (name == "xrtio-inloop@xrt") return run_xrtio_inloop_xrt(c);
#endif
  return std::nullopt;
}

}  // namespace bench
