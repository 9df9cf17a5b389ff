// Prepared runs: arguments checked and bound to one native run once, then
// executed many times (prepare, async_execute).
#include "xrtio/prepared.hpp"

namespace xrtio {
namespace detail {
prepared_state::~prepared_state() = default;

std::shared_ptr<prepared_state> make_prepared(const kernel& k, std::vector<arg_slot> slots, std::size_t given,
                                              const run_options& options) {
  auto p = std::make_shared<prepared_state>();
  p->kernel = k;
  p->slots = std::move(slots);
  p->reqs.resize(p->slots.size());
  p->options = options;
  run_core core(k, p->slots, p->reqs);
  core.validate(given, options);
  std::size_t nreq = 0;
  for (auto& s : p->slots) nreq += s.buffer ? 1 : 0;
  p->reqs.resize(nreq);
  p->run = k.native().make_run();
  core.bind(*p->run);  // once, for every execution
  return p;
}
}  // namespace detail

bool prepared_run::in_flight() const noexcept { return state_ && state_->in_flight.load(std::memory_order_acquire); }
// An empty prepared_run answers with an empty kernel and default options, so
// that async_execute (and a chain holding it) can refuse it with invalid_size.
const kernel& prepared_run::kernel() const noexcept {
  static const xrtio::kernel none;
  return state_ ? state_->kernel : none;
}
const run_options& prepared_run::options() const noexcept {
  static const run_options none;
  return state_ ? state_->options : none;
}
}  // namespace xrtio
