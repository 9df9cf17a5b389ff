#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "xrtio/detail/abort_ticket.hpp"
#include "xrtio/error.hpp"
#include "xrtio/prepared.hpp"
#include "xrtio/run.hpp"

namespace xrtio {
namespace detail {
namespace {

// Runs kept for good (invariant 5). Allocated once and never destroyed, so
// LeakSanitizer sees every retained record as reachable and no static
// destructor frees memory a device may still write at exit.
struct retained_record {
  xrtio::kernel kernel;
  std::vector<xrtio::buffer> buffers;
  std::vector<access_request> reqs;
  backend::native_run_ptr run;
  std::shared_ptr<prepared_state> prepared;  // a retained execution of a prepared run
  std::shared_ptr<abort_ticket> ticket;
  backend::native_run* native() const noexcept { return run ? run.get() : prepared ? prepared->run.get() : nullptr; }
};
struct retained_registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<retained_record>> records;
};
retained_registry& registry() {
  static auto* r = new retained_registry;
  return *r;
}

}  // namespace

run_core::~run_core() = default;

void throw_acquire(acquire_status st, const std::string& why) {
  if (st == acquire_status::retained) throw error(errc::range_retained, why);
  throw error(errc::range_in_use, why);
}

void run_core::validate(std::size_t given, const run_options& options) {
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
      if (!options.cross_context && s.buffer.state()->context != kernel_.context_state())
        throw error(errc::foreign_context, where() + ": buffer belongs to another context (run_options::cross_context "
                                                   "allows it on the same device)");
      auto& q = reqs_[r++];
      q.tracker = s.buffer.state()->tracker.get();
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
    if (s.buffer) r.set_arg(i, *s.buffer.state()->native);
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
  if (prepared_) {
    prepared_->in_flight.store(false, std::memory_order_release);
    prepared_.reset();
  }
  run_.reset();
}

run_result run_core::result(run_state s) const noexcept {
  run_result r;
  r.state = s;
  r.submitted = submitted_;
  r.observed = std::chrono::steady_clock::now();
  if (auto* n = native()) r.device_completed = n->device_completed_at();
  if (r.device_completed == std::chrono::steady_clock::time_point{}) r.device_completed = r.observed;
  return r;
}

void run_core::retain(std::shared_ptr<abort_ticket> ticket) noexcept {
  auto& reg = registry();
  std::lock_guard lock(reg.mutex);
  try {
    auto rec = std::make_unique<retained_record>();
    rec->kernel = kernel_;
    for (auto& s : slots_)
      if (s.buffer) rec->buffers.push_back(s.buffer);
    if (leased_)
      for (auto& q : reqs_) {
        q.tracker->mark_retained(q.id);
        rec->reqs.push_back(q);
      }
    rec->run = std::move(run_);
    rec->prepared = std::move(prepared_);  // stays "in flight" for good
    rec->ticket = std::move(ticket);
    reg.records.push_back(std::move(rec));
  } catch (...) {
    // Out of memory while retaining: better to stop the process than to
    // free memory the device may still write.
    std::fputs("xrtio: out of memory while retaining a run the device will not release\n", stderr);
    std::abort();
  }
  leased_ = false;
}

}  // namespace detail

std::size_t retained_runs() noexcept {
  auto& reg = detail::registry();
  std::lock_guard lock(reg.mutex);
  return reg.records.size();
}

std::size_t reap_retained() noexcept {
  auto& reg = detail::registry();
  std::vector<std::unique_ptr<detail::retained_record>> done;
  {
    std::lock_guard lock(reg.mutex);
    auto& v = reg.records;
    for (std::size_t i = 0; i < v.size();) {
      auto& r = *v[i];
      bool abort_busy = r.ticket && r.ticket->get() == detail::abort_ticket::pending;
      auto* n = r.native();
      if (!abort_busy && n && is_final(n->state())) {
        done.push_back(std::move(v[i]));
        v[i] = std::move(v.back());
        v.pop_back();
      } else {
        ++i;
      }
    }
  }
  for (auto& r : done) {
    for (auto& q : r->reqs) q.tracker->release(q.id);
    r->run.reset();
    if (r->prepared) r->prepared->in_flight.store(false, std::memory_order_release);
  }
  return done.size();
}

// ---- synchronous runs ------------------------------------------------------

struct run_handle::impl {
  detail::sync_run_storage storage;
  detail::run_core core;
  run_result last{};
  std::error_code error{};  // what wait() reported once final; repeated as is
  bool final = false;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();  // run_options::timeout
  static detail::sync_run_storage make_storage(std::vector<detail::arg_slot> s) {
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
  if (options.timeout.count() > 0) p->deadline = std::chrono::steady_clock::now() + options.timeout;
  std::string why;
  auto st = p->core.acquire(&why);
  if (st != acquire_status::acquired) throw_acquire(st, "start: " + why);
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
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    run_state s = r->state();
    while (!is_final(s) && std::chrono::steady_clock::now() < until) s = r->wait_for(std::chrono::milliseconds(10));
    if (is_final(s)) return s;
  }
  retained = true;
  auto ticket = std::make_shared<detail::abort_ticket>();
  ticket->set(detail::abort_ticket::refused);
  core.retain(std::move(ticket));
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
  auto& d = *impl_;
  if (d.final) {
    // The native run is gone (released or retained): repeat the recorded
    // outcome rather than re-deriving it from the bare state.
    ec = d.error;
    return d.last;
  }
  auto* r = d.core.native();
  auto start = std::chrono::steady_clock::now();
  auto deadline = timeout >= std::chrono::hours(24 * 365) ? std::chrono::steady_clock::time_point::max()
                                                         : start + timeout;
  deadline = std::min(deadline, d.deadline);  // run_options::timeout, counted from start()
  run_state s = r->state();
  try {
    while (!is_final(s)) {
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      auto left = std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(100));
      s = r->wait_for(left);
    }
  } catch (...) {
    s = r->state();
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
  if (ec) {
    std::string msg = "run of kernel " + (impl_ ? impl_->core.kernel().name() : std::string("?")) + ": final state " +
                      std::string(to_string(r.state));
    if (ec == make_error_code(errc::timed_out))
      msg = "run of kernel " + impl_->core.kernel().name() + " timed out after " +
            std::to_string(timeout.count()) + " ns and was aborted";
    if (ec == make_error_code(errc::abort_failed))
      msg = "run of kernel " + impl_->core.kernel().name() + " timed out after " + std::to_string(timeout.count()) +
            " ns; the device refused the abort and the run is retained with its buffers";
    throw error(ec, msg);
  }
  return r;
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

// ---- prepared runs -----------------------------------------------------------

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
const kernel& prepared_run::kernel() const noexcept { return state_->kernel; }
const run_options& prepared_run::options() const noexcept { return state_->options; }
}  // namespace xrtio
