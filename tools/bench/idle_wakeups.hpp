// Idle wake-ups: how often an xrtio reactor with nothing to wait for wakes up
// or goes to sleep (runtime::stats()), per second.
#pragma once

namespace bench {

// One measurement over secs, after 100 runs finished and the spin window passed.
double idle_wakeups_per_s(double secs);
// The median of min(repeat, 3) measurements of 0.5 s (quick) or 1 s.
double median_idle_wakeups_per_s(int repeat, bool quick);

}  // namespace bench
