// The reactor's adaptive spin (src/reactor/spin_policy.hpp; docs/DESIGN.md,
// "Adaptive spinning"): a unit test of the policy the reactor follows.
#include <doctest/doctest.h>

#include "../src/reactor/resubmit_policy.hpp"
#include "../src/reactor/spin_policy.hpp"
#include "xrtio/runtime.hpp"

using namespace std::chrono_literals;
using xrtio::detail::resubmit_policy;
using xrtio::detail::spin_policy;

TEST_CASE("spin policy: spins the whole window until a spin finds nothing") {
  spin_policy p(20us);
  CHECK(p.budget() == 20us);
  p.activity_after(5us);  // caught within the window
  CHECK(p.budget() == 20us);
}

TEST_CASE("spin policy: each spin that finds nothing halves the next, down to none") {
  spin_policy p(20us);
  p.missed();
  CHECK(p.budget() == 10us);
  p.missed();
  CHECK(p.budget() == 5us);
  p.missed();
  p.missed();
  CHECK(p.budget() == 1250ns);
  p.missed();  // 625 ns: below one pass, not worth starting
  CHECK(p.budget() == 0ns);
  p.missed();
  CHECK(p.budget() == 0ns);
}

TEST_CASE("spin policy: activity after a gap longer than the window keeps it off, a shorter gap restores it") {
  spin_policy p(20us);
  for (int i = 0; i < 8; ++i) p.missed();
  CHECK(p.budget() == 0ns);
  p.activity_after(50us);  // 50 us runs: a spin would not have caught it
  CHECK(p.budget() == 0ns);
  p.activity_after(19us);  // the next would have been caught by a full spin
  CHECK(p.budget() == 20us);
}

TEST_CASE("spin policy: a zero window never spins") {
  spin_policy p(0ns);
  CHECK(p.budget() == 0ns);
  p.activity_after(1ns);
  CHECK(p.budget() == 0ns);
}

// The spin after posting completions, for the next submissions
// (src/reactor/resubmit_policy.hpp).
TEST_CASE("resubmit policy: spins while runs are shorter than the window, not once they take longer") {
  resubmit_policy p(20us);
  CHECK(p.budget() == 20us);  // nothing learned: runs assumed short
  for (int i = 0; i < 40; ++i) p.learn(std::chrono::nanoseconds(50us).count());  // 50 us runs
  CHECK(p.budget() == 0ns);
  for (int i = 0; i < 40; ++i) p.learn(std::chrono::nanoseconds(2us).count());
  CHECK(p.budget() == 20us);
}

TEST_CASE("resubmit policy: one long run does not turn the spin off, a run of them does") {
  resubmit_policy p(20us);
  for (int i = 0; i < 40; ++i) p.learn(std::chrono::nanoseconds(1us).count());
  p.learn(std::chrono::nanoseconds(100us).count());  // average now ~13 us
  CHECK(p.budget() == 20us);
  p.learn(std::chrono::nanoseconds(100us).count());
  p.learn(std::chrono::nanoseconds(100us).count());
  CHECK(p.budget() == 0ns);
}

TEST_CASE("resubmit policy: a spin that finds no submission halves the next, a quick submission restores it") {
  resubmit_policy p(20us);
  p.missed();
  CHECK(p.budget() == 10us);
  p.missed();
  CHECK(p.budget() == 5us);
  p.activity_after(200us);  // the handler took long: leave it
  CHECK(p.budget() == 5us);
  p.activity_after(8us);  // a full spin would have caught this one
  CHECK(p.budget() == 20us);
}

// The default window (runtime_options::spin_window, 40 us) decides which runs
// the reactor and a lingering io thread stay awake for. Runs of 20-40 us on
// the device (kernels that short, or a simulated device whose unit wakes up
// that late) count as short; a 50 us kernel at one run in flight does not,
// so the loop sleeps through it (docs/PERFORMANCE.md, "Two basins at L = 0,
// C = 1").
TEST_CASE("resubmit policy: with the default window, runs of 30 us are short, runs of 50 us are not") {
  auto window = xrtio::runtime_options{}.spin_window;
  resubmit_policy p(window);
  for (int i = 0; i < 40; ++i) p.learn(std::chrono::nanoseconds(30us).count());
  CHECK(p.short_runs());
  CHECK(p.budget() == window);
  for (int i = 0; i < 40; ++i) p.learn(std::chrono::nanoseconds(50us).count());
  CHECK_FALSE(p.short_runs());
  CHECK(p.budget() == 0ns);
}
