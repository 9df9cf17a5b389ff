// xrtio::runtime (one reactor thread), the default runtime, binding a
// context to a runtime, and the entry points run_op.hpp declares.
#include "reactor.hpp"
#include "xrtio/context.hpp"

namespace xrtio::detail {

std::shared_ptr<reactor> reactor_for(const xrtio::kernel& k, const run_options& o) {
  if (o.runtime) return access::reactor(*o.runtime);
  if (!k) return access::reactor(default_runtime());  // an empty kernel: refused there (run_core::validate)
  if (auto& r = access::context_state(k)->bound_reactor) return r;
  return access::reactor(default_runtime());
}
bool reactor_submit(reactor& r, run_op_base* op) noexcept { return r.submit(op); }
at_once_outcome reactor_read_at_once(reactor& r, run_op_base* op, completion_registry& reg) noexcept {
  return r.read_at_once(op, reg);
}
void reactor_ungather(reactor& r, run_op_base* op) noexcept { r.ungather(op); }
void reactor_reject(reactor& r, run_op_base* op, std::error_code ec) noexcept { r.reject(op, ec); }
void reactor_cancel(reactor& r, run_op_base* op, asio::cancellation_type t) noexcept { r.cancel(op, t); }
void reactor_handlers_queued(reactor& r, std::size_t n) noexcept { r.handlers_queued(n); }
void reactor_handlers_begun(reactor& r, std::size_t n) noexcept { r.handlers_begun(n); }

}  // namespace xrtio::detail

namespace xrtio {

namespace {
// Durations are lengths of time: a negative one is a mistake, refused before
// any thread starts. Huge ones saturate where they are added to now().
runtime_options checked(runtime_options o) {
  auto check = [](std::chrono::nanoseconds d, const char* name) {
    if (d.count() < 0)
      throw_error(errc::invalid_option,
                  std::string("runtime_options::") + name + " is " + std::to_string(d.count()) + " ns: negative");
  };
  check(o.spin_window, "spin_window");
  check(o.backlog_doze, "backlog_doze");
  check(o.max_poll_interval, "max_poll_interval");
  check(o.event_poll_interval, "event_poll_interval");
  check(o.timer_slack, "timer_slack");
  check(o.abort_grace, "abort_grace");
  check(o.shutdown_grace, "shutdown_grace");
  check(o.refresh_interval, "refresh_interval");
  check(o.refresh_wait, "refresh_wait");
  check(o.prediction_margin, "prediction_margin");
  check(o.predict_max_run_time, "predict_max_run_time");
  check(o.inloop_spin, "inloop_spin");
  return o;
}
}  // namespace

runtime::runtime(runtime_options options) : reactor_(std::make_shared<detail::reactor>(checked(options))) {}
runtime::~runtime() { reactor_->stop(); }
runtime_stats runtime::stats() const noexcept { return reactor_->stats(); }
const runtime_options& runtime::options() const noexcept { return reactor_->options(); }

runtime& default_runtime() {
  static runtime* rt = new runtime();  // never destroyed: see runtime.hpp
  return *rt;
}

void context::bind(runtime& rt) {
  if (!state_) throw_error(errc::invalid_size, "context::bind on an empty context (default-constructed or moved-from)");
  state_->bound_reactor = detail::access::reactor(rt);
}

}  // namespace xrtio
