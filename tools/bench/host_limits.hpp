// Host limits: what this machine's thread hand-offs cost, measured in the same
// run as the contenders, to read their resume latencies against.
#pragma once

#include <cmath>
#include <string>

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
  // The wake-up chains a run's completion meets at one run in flight, with
  // every thread asleep (the device's thread too, between rounds), not
  // pinned (the scheduler places them as it places the contenders'):
  int chain_samples = 0;  // per chain
  // One hop, as blocking-threads pays it: a thread asleep in read() on an
  // eventfd runs once another writes it.
  double eventfd_wake_p50_us = NAN;
  // Two hops, as a completion reactor thread pays them (xrtio's default
  // mode): a thread asleep in io_uring_enter on a poll of an eventfd wakes
  // at its write, reads it and posts into an io_context asleep in run():
  // write -> handler runs. What a design that observes the device on a
  // thread of its own pays when both its threads sleep at the completion
  // (not a floor: a thread still spinning then skips its wake-up).
  double relay_post_sleeping_p50_us = NAN;
  std::string relay_not_measured;  // why the relay is NaN ("": measured)
  // The same relay with its three threads (the writer's too) pinned to one
  // CPU: each wake-up lands on the core that is running, none on an idle
  // one. What the two hops cost when the reactor thread shares the io
  // thread's core, which the scheduler does not do by itself: it wakes a
  // thread on an idle core rather than on the waker's busy one, and on
  // this project's VM an idle vCPU halts, so that wake-up costs several
  // times the same-core one (docs/PERFORMANCE.md, "Two sleeping hops on one
  // core"). NaN when the relay is not measured, or no CPU can be chosen.
  double relay_one_core_p50_us = NAN;
  // CPU time of the woken threads (not the writer's) per round, on average:
  // what each chain costs the CPU besides the device's own thread.
  double eventfd_wake_cpu_us = NAN;
  double relay_post_sleeping_cpu_us = NAN;
};

// Measures the hand-offs: `samples` round trips (or posts) each, and
// samples / 4 rounds of each wake-up chain.
host_limits measure_host_limits(int samples);

}  // namespace bench
