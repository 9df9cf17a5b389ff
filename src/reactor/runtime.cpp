// xrtio::runtime (one reactor thread), the default runtime, binding a
// context to a runtime, and the entry points run_op.hpp declares.
#include "reactor.hpp"
#include "xrtio/context.hpp"

namespace xrtio::detail {

std::shared_ptr<reactor> reactor_for(const xrtio::kernel& k, const run_options& o) {
  if (o.runtime) return access::reactor(*o.runtime);
  if (auto& r = access::context_state(k)->bound_reactor) return r;
  return access::reactor(default_runtime());
}
void reactor_submit(reactor& r, run_op_base* op) noexcept { r.submit(op); }
void reactor_reject(reactor& r, run_op_base* op, std::error_code ec) noexcept { r.reject(op, ec); }
void reactor_cancel(reactor& r, run_op_base* op, asio::cancellation_type t) noexcept { r.cancel(op, t); }

}  // namespace xrtio::detail

namespace xrtio {

runtime::runtime(runtime_options options) : reactor_(std::make_shared<detail::reactor>(options)) {}
runtime::~runtime() { reactor_->stop(); }
runtime_stats runtime::stats() const noexcept { return reactor_->stats(); }
const runtime_options& runtime::options() const noexcept { return reactor_->options(); }

runtime& default_runtime() {
  static runtime* rt = new runtime();  // never destroyed: see runtime.hpp
  return *rt;
}

void context::bind(runtime& rt) { state_->bound_reactor = detail::access::reactor(rt); }

}  // namespace xrtio
