// run_core: validating a run's arguments, taking and releasing its leases,
// binding and starting its native run, retaining it (docs/DESIGN.md,
// invariants 2, 5, 6, 8).
#include "xrtio/detail/run_core.hpp"

#include "memory/lease_batch.hpp"
#include "run/retained_registry.hpp"
#include "xrtio/error.hpp"
#include "xrtio/prepared.hpp"

namespace xrtio::detail {

run_core::~run_core() = default;

void check_options(const run_options& options) {
  if (options.timeout.count() < 0)
    throw error(errc::invalid_option, "run_options::timeout is " + std::to_string(options.timeout.count()) +
                                          " ns: negative (0 means no deadline)");
}

void run_core::validate(std::size_t given, const run_options& options) {
  if (!kernel_) throw error(errc::invalid_size, "empty kernel handle (default-constructed or moved-from)");
  check_options(options);
  const auto& name = kernel_.name();
  if (given > max_arguments)
    throw error(errc::too_many_arguments, "kernel " + name + ": " + std::to_string(given) +
                                              " arguments given, at most " + std::to_string(max_arguments));
  const auto& defs = kernel_.args();
  if (given != defs.size())
    throw error(errc::argument_count, "kernel " + name + " takes " + std::to_string(defs.size()) +
                                          " arguments, " + std::to_string(given) + " given");
  std::size_t r = 0;
  for (std::size_t i = 0; i < given; ++i) {
    auto& s = slots_[i];
    auto& d = defs[i];
    // Built only on the error paths: validation allocates nothing per run.
    auto where = [&] { return "kernel " + name + " argument " + std::to_string(i) + " (" + d.name + ")"; };
    if (d.kind == backend::arg_kind::buffer) {
      if (s.scalar_size != 0)
        throw error(errc::argument_kind, where() + " is a buffer; a " + std::to_string(s.scalar_size) +
                                             "-byte scalar was given");
      if (!s.buffer) throw error(errc::invalid_size, where() + ": empty buffer handle");
      if (!options.cross_context && access::state(s.buffer)->context != access::context_state(kernel_))
        throw error(errc::foreign_context, where() + ": buffer belongs to another context (run_options::cross_context "
                                                   "allows it on the same device)");
      auto& q = reqs_[r++];
      q.tracker = access::state(s.buffer)->tracker.get();
      q.begin = s.buffer.offset();
      q.end = s.buffer.offset() + s.buffer.size();
      q.mode = s.mode;
      q.id = 0;
    } else {
      if (s.buffer) throw error(errc::argument_kind, where() + " is a " + std::to_string(d.size) +
                                                         "-byte scalar; a buffer was given");
      if (s.scalar_size != d.size)
        throw error(errc::argument_kind, where() + " is a " + std::to_string(d.size) + "-byte scalar; " +
                                             std::to_string(s.scalar_size) + " bytes were given");
    }
  }
  reqs_ = reqs_.first(r);
  slots_ = slots_.first(given);
}

acquire_status run_core::acquire(std::string* why, const access_waiter* waiter) noexcept {
  acquire_status st;
  try {
    st = access_tracker::acquire(reqs_, holder_kind::run, why, waiter);
  } catch (...) {  // only allocation failure (messages, queue growth)
    return acquire_status::conflict;
  }
  if (st == acquire_status::acquired) leased_ = true;
  return st;
}

backend::native_run* run_core::native() const noexcept { return prepared_ ? prepared_->run.get() : run_.get(); }

void run_core::bind(backend::native_run& r) {
  unsigned i = 0;
  for (auto& s : slots_) {
    if (s.buffer) r.set_arg(i, *access::state(s.buffer)->native);
    else r.set_arg(i, s.scalar.data(), s.scalar_size);
    ++i;
  }
}

void run_core::use_prepared(std::shared_ptr<prepared_state> p) noexcept {
  slots_ = p->slots;
  reqs_ = p->reqs;
  prepared_ = std::move(p);
}

void run_core::start() {
  if (prepared_) {  // bound once by prepare(): no allocation, no set_arg
    submitted_ = std::chrono::steady_clock::now();
    prepared_->run->start();
    return;
  }
  if (!run_) run_ = kernel_.native().make_run();
  bind(*run_);
  submitted_ = std::chrono::steady_clock::now();
  run_->start();
}

void run_core::release() noexcept {
  // Leases first, then the native run, then (with the owner) the buffers.
  if (leased_)
    for (auto& q : reqs_) q.tracker->release(q.id);
  leased_ = false;
  release_run();
}

void run_core::release(lease_batch& later) noexcept {
  if (prepared_) return release();
  if (leased_)
    for (auto& q : reqs_) later.add(q.tracker, q.id);
  leased_ = false;
}

void run_core::release_run() noexcept {
  if (prepared_) {
    prepared_->in_flight.store(false, std::memory_order_release);
    prepared_.reset();
  }
  run_.reset();
}

run_result run_core::result(run_state s) const noexcept { return result(s, std::chrono::steady_clock::now()); }

run_result run_core::result(run_state s, std::chrono::steady_clock::time_point observed) const noexcept {
  run_result r;
  r.state = s;
  r.submitted = submitted_;
  r.observed = observed;
  if (auto* n = native()) r.device_completed = n->device_completed_at();
  // No device time (XRT): the observation stands for it (stamped later when
  // `observed` is left empty).
  if (r.device_completed == std::chrono::steady_clock::time_point{}) r.device_completed = r.observed;
  return r;
}

void run_core::retain(std::shared_ptr<abort_ticket> ticket) noexcept {
  std::unique_ptr<retained_record> rec;
  try {
    rec = std::make_unique<retained_record>();
    rec->kernel = kernel_;
    for (auto& s : slots_)
      if (s.buffer) rec->buffers.push_back(s.buffer);
    if (leased_)
      for (auto& q : reqs_) {
        q.id = q.tracker->mark_retained(q.id);
        rec->reqs.push_back(q);
      }
  } catch (...) {
    retention_out_of_memory();
  }
  rec->run = std::move(run_);
  rec->prepared = std::move(prepared_);  // stays "in flight" for good
  rec->ticket = std::move(ticket);
  keep_retained(std::move(rec));
  leased_ = false;
}

}  // namespace xrtio::detail
