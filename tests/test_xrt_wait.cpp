// The XRT backend's bounded wait (src/backends/xrt/xrt_wait.hpp) with
// stand-in run types: one shaped like current XRT's xrt::run (wait2 +
// command_error), one like XRT 2.13's (wait only). XRT 2.13 has no wait2 and
// the no-op device never ends a run in anything but COMPLETED, so the wait2
// branch and the failure states can only be driven this way. The real
// xrt::run's wait2 branch is compiled by xrt.current_api_syntax.
#include <doctest/doctest.h>
#include <xrt/xrt_kernel.h>

#include <chrono>
#include <condition_variable>
#include <optional>
#include <stdexcept>
#include <string>

#include "xrt_wait.hpp"

using namespace std::chrono_literals;
using xrtio::run_state;
using xrtio::xrt_backend::detail::has_wait2;
using xrtio::xrt_backend::detail::wait_and_read;

namespace {

// Like current XRT: wait2 returns cv_status or throws command_error.
struct current_run {
  class command_error : public std::exception {
   public:
    explicit command_error(ert_cmd_state s) : s_(s) {}
    ert_cmd_state get_command_state() const { return s_; }
    const char* what() const noexcept override { return "command_error"; }

   private:
    ert_cmd_state s_;
  };
  // What the next wait2 does: return this status, or throw this state, or throw a runtime_error.
  std::optional<std::cv_status> returns;
  std::optional<ert_cmd_state> throws_state;
  bool throws_other = false;
  ert_cmd_state current = ERT_CMD_STATE_RUNNING;
  bool state_throws = false;
  mutable std::chrono::milliseconds waited{-1};
  mutable int waits = 0, reads = 0;

  std::cv_status wait2(const std::chrono::milliseconds& ms) const {
    waited = ms;
    ++waits;
    if (throws_state) throw command_error(*throws_state);
    if (throws_other) throw std::runtime_error("driver went away");
    return *returns;
  }
  ert_cmd_state state() const {
    ++reads;
    if (state_throws) throw std::runtime_error("state");
    return current;
  }
  // Present too, as on real XRT: must not be the one used.
  ert_cmd_state wait(const std::chrono::milliseconds&) const {
    FAIL("wait() used although wait2() exists");
    return ERT_CMD_STATE_ERROR;
  }
};

// Like XRT 2.13: wait only.
struct legacy_run {
  ert_cmd_state result = ERT_CMD_STATE_COMPLETED;
  bool throws = false;
  ert_cmd_state current = ERT_CMD_STATE_RUNNING;
  mutable std::chrono::milliseconds waited{-1};
  mutable int reads = 0;
  ert_cmd_state wait(const std::chrono::milliseconds& ms) const {
    waited = ms;
    if (throws) throw std::runtime_error("wait");
    return result;
  }
  ert_cmd_state state() const {
    ++reads;
    return current;
  }
};

}  // namespace

TEST_CASE("xrt wait: wait2 is detected on the run type, not by version") {
  CHECK(has_wait2<current_run>);
  CHECK_FALSE(has_wait2<legacy_run>);
  // The installed XRT: Debian's 2.13 has no wait2 (current XRT does; its
  // branch is compiled by xrt.current_api_syntax).
#if __has_include(<xrt/xrt_hw_context.h>)
  MESSAGE("installed XRT has hw_context; wait2 detected: " << has_wait2<xrt::run>);
#else
  CHECK_FALSE(has_wait2<xrt::run>);
#endif
}

TEST_CASE("xrt wait: wait2 no_timeout is COMPLETED, timeout re-reads the run state") {
  current_run r;
  r.returns = std::cv_status::no_timeout;
  CHECK(wait_and_read(r, 5ms, run_state::running) == run_state::completed);
  CHECK(r.waited == 5ms);
  r.returns = std::cv_status::timeout;
  r.current = ERT_CMD_STATE_RUNNING;
  CHECK(wait_and_read(r, 5ms, run_state::new_) == run_state::running);
  CHECK(r.reads == 1);
  // The wait timed out but the run finished just after: the read sees it.
  r.current = ERT_CMD_STATE_COMPLETED;
  CHECK(wait_and_read(r, 5ms, run_state::running) == run_state::completed);
}

TEST_CASE("xrt wait: never waits 0 ms (XRT's wait-forever)") {
  current_run r;
  r.returns = std::cv_status::no_timeout;
  (void)wait_and_read(r, 0ms, run_state::running);
  CHECK(r.waited == 1ms);
  legacy_run l;
  (void)wait_and_read(l, 0ms, run_state::running);
  CHECK(l.waited == 1ms);
}

TEST_CASE("xrt wait: wait2's command_error becomes the final state it carries, not an exception") {
  struct row {
    ert_cmd_state ert;
    run_state want;
  };
  for (auto [ert, want] : {row{ERT_CMD_STATE_ERROR, run_state::error}, row{ERT_CMD_STATE_ABORT, run_state::abort},
                           row{ERT_CMD_STATE_TIMEOUT, run_state::timeout},
                           row{ERT_CMD_STATE_NORESPONSE, run_state::no_response},
                           row{ERT_CMD_STATE_SKERROR, run_state::skerror},
                           row{ERT_CMD_STATE_SKCRASHED, run_state::skcrashed}}) {
    CAPTURE(static_cast<int>(ert));
    current_run r;
    r.throws_state = ert;
    r.current = ERT_CMD_STATE_RUNNING;  // a stale read must not win over the exception's state
    CHECK(wait_and_read(r, 2ms, run_state::running) == want);
    // Each maps to its own error code (invariant 3).
    CHECK(xrtio::state_error(want) != xrtio::state_error(run_state::completed));
  }
  // The device's TIMEOUT state and the wait timing out are told apart.
  CHECK(xrtio::state_error(run_state::timeout) == xrtio::errc::run_timeout_state);
}

TEST_CASE("xrt wait: a command_error without a final state, or another exception, falls back to state()") {
  current_run r;
  r.throws_state = ERT_CMD_STATE_RUNNING;
  r.current = ERT_CMD_STATE_ERROR;
  CHECK(wait_and_read(r, 2ms, run_state::running) == run_state::error);
  current_run o;
  o.throws_other = true;
  o.current = ERT_CMD_STATE_ABORT;
  CHECK(wait_and_read(o, 2ms, run_state::running) == run_state::abort);
  CHECK(o.reads == 1);
  // state() throwing too: the last known state, never a made-up final one.
  o.state_throws = true;
  CHECK(wait_and_read(o, 2ms, run_state::queued) == run_state::queued);
  // A value past the known states (ERT_CMD_STATE_MAX) is not taken for a final state.
  current_run u;
  u.throws_state = ERT_CMD_STATE_MAX;
  u.current = ERT_CMD_STATE_MAX;
  CHECK(wait_and_read(u, 2ms, run_state::running) == run_state::running);
}

TEST_CASE("xrt wait: without wait2, a TIMEOUT from wait() is re-read and other final states are taken") {
  legacy_run l;
  l.result = ERT_CMD_STATE_COMPLETED;
  CHECK(wait_and_read(l, 3ms, run_state::running) == run_state::completed);
  CHECK(l.waited == 3ms);
  CHECK(l.reads == 0);
  l.result = ERT_CMD_STATE_ERROR;
  CHECK(wait_and_read(l, 3ms, run_state::running) == run_state::error);
  // TIMEOUT from wait() may be the wait's own: the run is still running.
  l.result = ERT_CMD_STATE_TIMEOUT;
  l.current = ERT_CMD_STATE_RUNNING;
  CHECK(wait_and_read(l, 3ms, run_state::running) == run_state::running);
  CHECK(l.reads == 1);
  l.throws = true;
  l.current = ERT_CMD_STATE_COMPLETED;
  CHECK(wait_and_read(l, 3ms, run_state::running) == run_state::completed);
}
