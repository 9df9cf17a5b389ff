// Host limits: what this machine's thread hand-offs cost, measured in the same
// run as the contenders, to read their resume latencies against.
#pragma once

#include <cmath>

namespace bench {

// Each a median over its samples, in microseconds (NaN: could not be measured).
struct host_limits {
  int samples = 0;  // per hand-off
  // Two spinning threads, on two CPUs, bounce one atomic: the round trip.
  // The floor for a hop from one thread to another.
  double spin_pingpong_p50_us = NAN;
  // Two threads blocked in read() on eventfds wake each other: the round trip
  // (two wake-ups). Both on one CPU: the wake-up without a cross-CPU interrupt.
  double eventfd_pingpong_p50_us = NAN;
  // asio::post from a spinning thread into an io_context whose one thread is
  // asleep in run() (work guard): post until the handler runs. Both on one
  // CPU, like eventfd_pingpong. The limit for a completion that must wake a
  // sleeping loop.
  double asio_post_sleeping_p50_us = NAN;
};

// Measures the three hand-offs, `samples` round trips (or posts) each.
host_limits measure_host_limits(int samples);

}  // namespace bench
