// The bench's per-cell hang watchdog (cell_watchdog.hpp).
#include "cell_watchdog.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace bench {
namespace {
using clock = std::chrono::steady_clock;
std::mutex m;  // once per cell: not on any measured path
std::string current;
clock::time_point since{};
}  // namespace

void cell_watchdog_start(double limit_s) {
  if (limit_s <= 0) return;
  std::thread([limit_s] {
    auto limit = std::chrono::duration<double>(limit_s);
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::string what;
      {
        std::lock_guard lock(m);
        if (since == clock::time_point{} || clock::now() - since < limit) continue;
        what = current;
      }
      std::fprintf(stderr, "\nxrtio-bench watchdog: %s still running after %.0f s; every thread's stack follows\n",
                   what.c_str(), limit_s);
      std::fflush(stderr);
      std::string cmd = "gdb -p " + std::to_string(::getpid()) +
                        " -batch -nx -ex 'set pagination off' -ex 'thread apply all bt' 1>&2 2>/dev/null";
      if (std::system(cmd.c_str()) != 0)
        std::fprintf(stderr, "xrtio-bench watchdog: gdb could not attach (is gdb installed, ptrace allowed?)\n");
      std::fflush(stderr);
      std::_Exit(124);
    }
  }).detach();
}

void cell_watchdog_enter(const std::string& what) {
  std::lock_guard lock(m);
  current = what;
  since = clock::now();
}

void cell_watchdog_leave() {
  std::lock_guard lock(m);
  since = {};
}

}  // namespace bench
