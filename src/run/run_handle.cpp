// Synchronous runs: xrtio::start and run_handle (wait, abort on destruction,
// retention when the device will not let go).
#include <thread>

#include "run/retained_registry.hpp"
#include "util/saturating_deadline.hpp"
#include "xrtio/error.hpp"
#include "xrtio/run.hpp"

namespace xrtio {

namespace {
// A handle's own storage for its argument slots and lease requests.
struct sync_run_storage {
  std::vector<detail::arg_slot> slots;
  std::vector<detail::access_request> reqs;
};
// After an abort the device reports done, how long to wait for it to publish
// the final state, and how often to look meanwhile: bounded, because the
// destructor and wait() must never hang on a device that does not.
constexpr auto abort_settle_limit = std::chrono::seconds(1);
constexpr auto abort_settle_step = std::chrono::milliseconds(10);
// wait() blocks in slices of at most this, so a deadline is met without
// trusting one long native wait.
constexpr auto wait_slice = std::chrono::milliseconds(100);
// When the backend's wait_for throws (the interface allows it), wait() looks
// at state() this often instead, until its deadline.
constexpr auto wait_poll_step = std::chrono::milliseconds(1);
// A wait() timeout this long (or more, up to nanoseconds::max()) means "no
// limit": adding it to now() would overflow.
constexpr auto wait_forever = std::chrono::hours(24 * 365);
}  // namespace

struct run_handle::impl {
  sync_run_storage storage;
  detail::run_core core;
  run_result last{};
  std::error_code error{};  // what wait() reported once final; repeated as is
  bool final = false;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();  // run_options::timeout
  std::chrono::nanoseconds run_timeout{0};  // run_options::timeout, for messages
  static sync_run_storage make_storage(std::vector<detail::arg_slot> s) {
    std::vector<detail::access_request> reqs(s.size());
    return {std::move(s), std::move(reqs)};
  }
  impl(const kernel& k, std::vector<detail::arg_slot> s)
      : storage(make_storage(std::move(s))), core(k, storage.slots, storage.reqs) {}
};

namespace detail {
run_handle make_sync_run(const kernel& k, std::vector<arg_slot> slots, std::size_t given,
                         const run_options& options) {
  auto p = std::make_unique<run_handle::impl>(k, std::move(slots));
  p->core.validate(given, options);
  if (options.timeout.count() > 0) p->deadline = saturating_deadline(std::chrono::steady_clock::now(), options.timeout);
  p->run_timeout = options.timeout;
  std::string why;
  auto st = p->core.acquire(&why);
  if (st != acquire_status::acquired) throw error(acquire_error(st), "start: " + why);
  try {
    p->core.start();
  } catch (...) {
    p->core.release();  // never submitted: nothing on the device
    throw;
  }
  return run_handle(std::move(p));
}
}  // namespace detail

run_handle::run_handle() noexcept = default;
run_handle::run_handle(std::unique_ptr<impl> p) noexcept : impl_(std::move(p)) {}
run_handle::run_handle(run_handle&&) noexcept = default;

namespace {
// Aborts a run that must not outlive its handle; retains it when the device
// will not let go (invariant 5). Returns the state reached, if final.
run_state abort_or_retain(detail::run_core& core, bool& retained) {
  retained = false;
  auto* r = core.native();
  backend::abort_outcome o;
  try {
    o = r->abort();
  } catch (...) {
    o = backend::abort_outcome::refused;
  }
  if (o == backend::abort_outcome::done) {
    // Give the device a bounded time to publish the final state.
    auto until = std::chrono::steady_clock::now() + abort_settle_limit;
    run_state s = r->state();
    // wait_for may throw (the backend interface allows it), and this runs
    // in noexcept callers (wait(ec), the destructor): a throw there ended
    // the process. Then state() alone is polled, in the same steps.
    while (!is_final(s) && std::chrono::steady_clock::now() < until) {
      try {
        s = r->wait_for(abort_settle_step);
      } catch (...) {
        std::this_thread::sleep_for(abort_settle_step);
        s = r->state();
      }
    }
    if (is_final(s)) return s;
  }
  retained = true;
  // No ticket: the abort is over (refused, or done without a final state
  // in time), which is what no ticket means to reap_retained(). A ticket
  // made here was an allocation in noexcept callers (wait(ec), the
  // destructor) for no information.
  core.retain(nullptr);
  return run_state::running;
}
}  // namespace

run_handle& run_handle::operator=(run_handle&& o) noexcept {
  if (this != &o) {
    run_handle dying(std::move(*this));
    impl_ = std::move(o.impl_);
  }
  return *this;
}

run_handle::~run_handle() {
  if (!impl_ || impl_->final) return;
  auto* r = impl_->core.native();
  if (r && !is_final(r->state())) {
    bool retained;
    abort_or_retain(impl_->core, retained);
    if (retained) return;
  }
  impl_->core.release();
}

run_result run_handle::wait(std::chrono::nanoseconds timeout, std::error_code& ec) noexcept {
  ec.clear();
  if (!impl_) {
    ec = errc::invalid_size;
    return {};
  }
  if (timeout.count() < 0) {  // never taken as "already passed": that would abort the run
    ec = errc::invalid_option;
    return impl_->last;
  }
  auto& d = *impl_;
  if (d.final) {
    // The native run is gone (released or retained): repeat the recorded
    // outcome rather than re-deriving it from the bare state.
    ec = d.error;
    return d.last;
  }
  auto* r = d.core.native();
  auto start = std::chrono::steady_clock::now();
  auto deadline = timeout >= wait_forever ? std::chrono::steady_clock::time_point::max() : start + timeout;
  deadline = std::min(deadline, d.deadline);  // run_options::timeout, counted from start()
  run_state s = r->state();
  // A throw from wait_for used to end the wait at once: the run was then
  // aborted long before the caller's timeout (test "sync run: a backend
  // whose wait_for throws...").
  while (!is_final(s)) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    auto left = std::min<std::chrono::nanoseconds>(deadline - now, wait_slice);
    try {
      s = r->wait_for(left);
    } catch (...) {
      std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(left, wait_poll_step));
      s = r->state();
    }
  }
  if (is_final(s)) {
    d.last = d.core.result(s);
    d.final = true;
    ec = d.error = r->final_error(s);
    d.core.release();
    return d.last;
  }
  bool retained;
  s = abort_or_retain(d.core, retained);
  d.final = true;
  if (retained) {
    d.last = run_result{};
    d.last.state = s;
    d.last.submitted = d.core.submitted();
    d.last.observed = std::chrono::steady_clock::now();
  } else {
    d.last = d.core.result(s);
  }
  // A run that completed while the abort was on its way succeeded: report
  // the real outcome (invariant 3), as async_run does.
  ec = d.error = retained ? std::error_code(errc::abort_failed)
                          : s == run_state::completed ? std::error_code() : std::error_code(errc::timed_out);
  if (!retained) d.core.release();
  return d.last;
}

run_result run_handle::wait(std::chrono::nanoseconds timeout) {
  std::error_code ec;
  auto r = wait(timeout, ec);
  if (!ec) return r;
  if (!impl_) throw error(ec, "run_handle::wait on an empty run_handle (default-constructed or moved-from)");
  if (ec == make_error_code(errc::invalid_option))
    throw error(ec, "run_handle::wait: timeout is " + std::to_string(timeout.count()) + " ns: negative");
  std::string what = "run of kernel " + (impl_ ? impl_->core.kernel().name() : std::string("?"));
  if (ec != make_error_code(errc::timed_out) && ec != make_error_code(errc::abort_failed))
    throw error(ec, what + ": final state " + std::string(to_string(r.state)));
  // Name the limit that ran out: wait()'s own, or run_options::timeout when
  // wait() was given none (or a longer one).
  auto limit = timeout;
  std::string whose = "wait()'s timeout";
  if (impl_->run_timeout.count() > 0 && (timeout >= wait_forever || impl_->run_timeout <= timeout)) {
    limit = impl_->run_timeout;
    whose = "run_options::timeout";
  }
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(limit).count();
  what += " outlived " + whose + " (" + std::to_string(us) + " us)";
  if (ec == make_error_code(errc::timed_out)) throw error(ec, what + " and was aborted");
  throw error(ec, what + "; the device refused the abort and the run is retained with its buffers");
}

const run_result& run_handle::result() const noexcept {
  static const run_result none{};
  return impl_ ? impl_->last : none;
}

run_state run_handle::state() const noexcept {
  if (!impl_) return run_state::new_;
  if (impl_->final) return impl_->last.state;
  return impl_->core.native()->state();
}

}  // namespace xrtio
