// What the process uses: CPU time per thread role (threads are named by
// role), the whole process's CPU time, and its resident memory.
#pragma once

#include <pthread.h>

namespace bench {

void set_thread_name(const char* n);

// Runs f with this thread renamed, so threads it creates inherit the name
// (how the CPU time of the device's and the reactor's threads is told apart).
template <class F>
auto named(const char* n, F&& f) {
  char old[32] = "main";
  pthread_getname_np(pthread_self(), old, sizeof old);
  set_thread_name(n);
  struct restore {
    const char* o;
    ~restore() { set_thread_name(o); }
  } r{old};
  return f();
}

// CPU time (seconds) per thread role. Roles by name prefix: "c:" the
// contender's own threads, "l:dev" the simulated device, "l:rx" the xrtio
// reactor, the rest other.
struct cpu_split {
  double app = 0, dev = 0, rx = 0, other = 0;
};
cpu_split thread_cpu();   // from /proc/self/task/*/schedstat (ns resolution)
double process_cpu();     // getrusage(RUSAGE_SELF) user + sys, seconds
// Times any thread of the process blocked (getrusage: voluntary context
// switches). On a VM a block and its wake-up cost several microseconds of
// CPU, so this count bounds how cheap a completion path can be.
double process_sleeps();
double rss_bytes();       // resident now (/proc/self/statm)
double peak_rss_bytes();  // peak resident (ru_maxrss)

}  // namespace bench
