#include "round.hpp"

#include <asio.hpp>
#include <asio/experimental/deferred.hpp>
#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "canary_regions.hpp"
#include "plan.hpp"
#include "stall_detector.hpp"
#include "xrtio/inloop.hpp"
#include "xrtio/xrtio.hpp"

namespace soak {
namespace {

using namespace std::chrono_literals;
namespace sim = xrtio::sim;
using strand_t = asio::strand<asio::io_context::executor_type>;
using retention = canary_regions::retention;

/// Lanes per round, by completion token.
constexpr unsigned coroutine_lanes = 10, deferred_lanes = 4, pool_lanes = 6, pool_threads = 2;
/// How long the round's end waits for retained runs to become reapable
/// (their devices finish within tens of milliseconds).
constexpr auto reap_limit = 20s;
/// The cut endings (io_context or runtime destroyed) happen once this share
/// of the quota (per mille) has been launched.
constexpr std::uint64_t cut_per_mille = 800;
/// run_handle::wait's limit for an accepted abort to settle before the run
/// is retained (abort_settle_limit in src/run/run_handle.cpp).
constexpr auto sync_abort_settle_limit = 1s;

// One opened simulated device and what the round keeps on it.
struct epoch {
  std::uint64_t id = 0;
  xrtio::context ctx;
  sim::device* dev = nullptr;
  xrtio::kernel vadd, checksum, noop, scale, late_marker;
  xrtio::buffer in, out, prep_out;
  std::vector<xrtio::prepared_run> prepared;
  std::unique_ptr<canary_regions> canary;
};

// Whether one asynchronous operation's handler was called or destroyed.
struct op_record {
  std::atomic<int> calls{0}, destroyed{0};
  bool io_bound = false;  // the handler lives on the round's io_context
  bool sync = false;      // a synchronous run: no handler
};

struct world {
  const options& o;
  const round_spec& spec;
  xrtio::memory_budget& budget;
  tally& t;
  std::unique_ptr<xrtio::runtime> rt;
  std::unique_ptr<asio::io_context> io;
  std::shared_ptr<std::atomic<bool>> io_alive = std::make_shared<std::atomic<bool>>(true);
  asio::thread_pool pool{pool_threads};
  std::mutex epoch_mutex;
  std::shared_ptr<epoch> current;       // the asynchronous lanes' device
  std::shared_ptr<epoch> sync_current;  // the synchronous lane's (its abort limit differs)
  std::vector<std::shared_ptr<epoch>> epochs;
  std::unique_ptr<op_record[]> records;
  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> stop{false};
  std::atomic<int> launching{0};
  std::atomic<int> lanes{0};
  bool io_destroyed_pending = false;

  world(const options& opt, const round_spec& s, xrtio::memory_budget& b, tally& ta)
      : o(opt), spec(s), budget(b), t(ta), records(new op_record[s.quota]) {}

  // A run index to launch, or none (quota met or the round is stopping).
  // Launches between begin_launch and end_launch are waited for before a
  // runtime is destroyed.
  std::optional<std::uint64_t> begin_launch() {
    launching.fetch_add(1);
    if (stop.load()) {
      launching.fetch_sub(1);
      return std::nullopt;
    }
    auto i = next.fetch_add(1);
    if (i >= spec.quota) {
      launching.fetch_sub(1);
      return std::nullopt;
    }
    t.launched.fetch_add(1, std::memory_order_relaxed);
    return i;
  }
  void end_launch() { launching.fetch_sub(1); }

  run_plan plan(std::uint64_t i) const { return plan_run(o.seed, spec.first_run + i); }

  std::shared_ptr<epoch> epoch_now(bool sync = false) {
    std::lock_guard lock(epoch_mutex);
    return sync ? sync_current : current;
  }
  void open_epoch_locked(bool sync);
  // A new device in place of a lost one (not once the runtime is going:
  // this counts as a launch, which its destruction waits for).
  void reopen_if(epoch* lost) {
    launching.fetch_add(1);
    if (!stop.load()) {
      std::lock_guard lock(epoch_mutex);
      if (current.get() == lost || sync_current.get() == lost) {
        open_epoch_locked(sync_current.get() == lost);
        t.reopened.fetch_add(1);
      }
    }
    launching.fetch_sub(1);
  }
};

void world::open_epoch_locked(bool sync) {
  auto e = std::make_shared<epoch>();
  e->id = spec.index * 4096 + epochs.size();
  rng r(o.seed ^ mix(e->id + 17));
  sim::device_config cfg;
  cfg.compute_units = 4;
  cfg.latency.fixed = std::chrono::microseconds(r.below(20));
  cfg.latency.jitter = std::chrono::microseconds(r.below(40));
  cfg.latency.seed = r.next();
  // What xrtio allows an accepted abort before it retains the run: the
  // runtime's abort_grace, or for a synchronous wait abort_settle_limit.
  cfg.long_abort_threshold = sync ? std::chrono::nanoseconds(sync_abort_settle_limit)
                                  : std::chrono::nanoseconds(o.abort_grace);
  auto seed = o.seed;
  auto id = e->id;
  auto long_abort = std::chrono::nanoseconds(o.abort_grace) * 4;  // retained whatever the host's timer lateness
  auto* tp = &t;
  cfg.fault_selector = [seed, id, long_abort, tp](std::string_view kernel, std::uint64_t n) {
    auto f = pick_fault(seed, id, kernel, n, long_abort);
    tp->device_runs.fetch_add(1, std::memory_order_relaxed);
    switch (f.what) {
      case sim::fault::fail: tp->fault_fail.fetch_add(1, std::memory_order_relaxed); break;
      case sim::fault::hang: tp->fault_hang.fetch_add(1, std::memory_order_relaxed); break;
      case sim::fault::refuse_abort: tp->fault_refuse.fetch_add(1, std::memory_order_relaxed); break;
      case sim::fault::slow_abort:
        (f.abort_delay == long_abort ? tp->fault_slow_long : tp->fault_slow).fetch_add(1, std::memory_order_relaxed);
        break;
      case sim::fault::device_lost: tp->fault_lost.fetch_add(1, std::memory_order_relaxed); break;
      case sim::fault::none: break;
    }
    return f;
  };
  e->ctx = sim::open(std::move(cfg), budget);
  e->ctx.bind(*rt);
  e->dev = &sim::device_of(e->ctx);
  e->vadd = e->ctx.kernel("vadd");
  e->checksum = e->ctx.kernel("checksum");
  e->noop = e->ctx.kernel("noop");
  e->scale = e->ctx.kernel("scale");
  e->late_marker = e->ctx.kernel("late_marker");
  e->in = e->ctx.alloc(shared_in_bytes);
  e->out = e->ctx.alloc(shared_out_bytes);
  e->prep_out = e->ctx.alloc(4096);
  std::vector<std::uint32_t> words(shared_in_bytes / 4);
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = static_cast<std::uint32_t>(i);
  e->in.write(std::span<const std::uint32_t>(words));
  for (unsigned i = 0; i < prepared_per_device; ++i) {
    // Neighbours overlap (256-byte views 192 bytes apart); half wait, half fail.
    xrtio::run_options po{.timeout = 60ms,
                          .on_conflict = i % 2 ? xrtio::conflict_policy::wait : xrtio::conflict_policy::fail};
    e->prepared.push_back(xrtio::prepare(e->vadd, xrtio::in(e->in.sub(256, i * 64)), xrtio::in(e->in.sub(256, 0)),
                                         xrtio::out(e->prep_out.sub(256, i * 192)), std::uint32_t{64}, po));
  }
  e->canary = std::make_unique<canary_regions>(e->ctx, r.next());
  epochs.push_back(e);
  (sync ? sync_current : current) = std::move(e);
}

// Launches a run that completes with void(error_code, run_result): a single
// run, a prepared execution or a canary (region >= 0).
template <class Token>
auto launch_run(epoch& e, const run_plan& p, int region, Token&& tok) {
  if (region >= 0) {
    return xrtio::async_run(e.late_marker, e.canary->view(region), e.canary->expected(region), p.salt, p.hold_us,
                            p.late_us, p.options, std::forward<Token>(tok));
  }
  if (p.kind == run_kind::prepared) {
    return xrtio::async_execute(e.prepared[p.prepared_index], p.options, std::forward<Token>(tok));
  }
  switch (p.kernel) {
    case kernel_kind::vadd: {
      auto a = e.in.sub(p.out_size, p.in_offset);
      return xrtio::async_run(e.vadd, xrtio::in(a), xrtio::in(a), xrtio::out(e.out.sub(p.out_size, p.out_offset)),
                              static_cast<std::uint32_t>(p.out_size / 4), p.options, std::forward<Token>(tok));
    }
    case kernel_kind::checksum:
      return xrtio::async_run(e.checksum, xrtio::in(e.in.sub(p.out_size, p.in_offset)),
                              xrtio::out(e.out.sub(view_align, p.out_offset)), static_cast<std::uint32_t>(p.out_size),
                              p.options, std::forward<Token>(tok));
    case kernel_kind::scale:
      return xrtio::async_run(e.scale, xrtio::in(e.in.sub(p.out_size, p.in_offset)),
                              xrtio::out(e.out.sub(p.out_size, p.out_offset)), 2.0f,
                              static_cast<std::uint32_t>(p.out_size / 4), p.options, std::forward<Token>(tok));
    case kernel_kind::noop:
      break;
  }
  return xrtio::async_run(e.noop, p.options, std::forward<Token>(tok));
}

// launch_run's choice for tokens whose result type depends on the
// initiation's arguments (asio::experimental::deferred): `f` gets the result.
template <class F>
void launch_deferred(epoch& e, const run_plan& p, int region, F&& f) {
  auto d = asio::experimental::deferred;
  if (region >= 0)
    return f(xrtio::async_run(e.late_marker, e.canary->view(region), e.canary->expected(region), p.salt, p.hold_us,
                              p.late_us, p.options, d));
  if (p.kind == run_kind::prepared) return f(xrtio::async_execute(e.prepared[p.prepared_index], p.options, d));
  switch (p.kernel) {
    case kernel_kind::vadd: {
      auto a = e.in.sub(p.out_size, p.in_offset);
      return f(xrtio::async_run(e.vadd, xrtio::in(a), xrtio::in(a), xrtio::out(e.out.sub(p.out_size, p.out_offset)),
                                static_cast<std::uint32_t>(p.out_size / 4), p.options, d));
    }
    case kernel_kind::checksum:
      return f(xrtio::async_run(e.checksum, xrtio::in(e.in.sub(p.out_size, p.in_offset)),
                                xrtio::out(e.out.sub(view_align, p.out_offset)),
                                static_cast<std::uint32_t>(p.out_size), p.options, d));
    case kernel_kind::scale:
      return f(xrtio::async_run(e.scale, xrtio::in(e.in.sub(p.out_size, p.in_offset)),
                                xrtio::out(e.out.sub(p.out_size, p.out_offset)), 2.0f,
                                static_cast<std::uint32_t>(p.out_size / 4), p.options, d));
    case kernel_kind::noop:
      break;
  }
  f(xrtio::async_run(e.noop, p.options, d));
}

std::vector<xrtio::prepared_run> chain_of(epoch& e, const run_plan& p) {
  std::vector<xrtio::prepared_run> v;
  for (unsigned k = 0; k < p.chain_length; ++k) v.push_back(e.prepared[(p.prepared_index + k) % prepared_per_device]);
  return v;
}

// A canary region for a canary plan (checked first), else -1.
int take_region(world& w, epoch& e, const run_plan& p) {
  if (p.kind != run_kind::canary) return -1;
  int region = e.canary->take(p.salt);
  if (region < 0) return -1;
  if (!e.canary->check(w.t, region)) {
    e.canary->orphan(region);  // settled (or found dead) at the round's end
    return -1;
  }
  w.t.canary_runs.fetch_add(1, std::memory_order_relaxed);
  return region;
}

void count_kind(world& w, const run_plan& p, int region) {
  if (region < 0 && p.kind == run_kind::prepared) w.t.prepared_runs.fetch_add(1, std::memory_order_relaxed);
  if (region < 0 && p.kind == run_kind::chain) w.t.chains.fetch_add(1, std::memory_order_relaxed);
  if (p.options.on_conflict == xrtio::conflict_policy::wait) w.t.wait_policy.fetch_add(1, std::memory_order_relaxed);
}

// What every completed run goes through: the outcome's count, a new device
// when this one was lost, the canary's settling, the outcomes a plan rules out.
void finish_run(world& w, const std::shared_ptr<epoch>& e, const run_plan& p, int region, std::error_code ec) {
  auto oc = classify(ec);
  w.t.count(oc);
  if (oc == outcome::device_lost) w.reopen_if(e.get());
  bool prepared = region < 0 && (p.kind == run_kind::prepared || p.kind == run_kind::chain);
  if (oc == outcome::other || (oc == outcome::busy && !prepared))
    w.t.violate(check::unexpected, "run " + std::to_string(w.spec.first_run) + "+: " + ec.message());
  if (region >= 0) {
    if (oc == outcome::run_error)  // the canary found data it did not expect in its leased range
      w.t.violate(check::lease_early, "late_marker failed: " + ec.message());
    if (oc == outcome::range_in_use || oc == outcome::range_retained)
      w.t.violate(check::unexpected, "a canary region is exclusive, yet: " + ec.message());
    e->canary->settle(w.t, region, oc == outcome::abort_failed ? retention::yes : retention::no, p.salt ^ 0x5a5a);
  }
}

// A move-only part of a callback handler: counts its one call, or its
// destruction uncalled (then its canary region is orphaned).
class once_token {
 public:
  once_token(op_record* r, std::shared_ptr<epoch> e, int region) : rec_(r), e_(std::move(e)), region_(region) {}
  once_token(once_token&& o) noexcept : rec_(std::exchange(o.rec_, nullptr)), e_(std::move(o.e_)), region_(o.region_) {}
  once_token& operator=(once_token&&) = delete;
  ~once_token() {
    if (!rec_) return;
    rec_->destroyed.fetch_add(1);
    if (region_ >= 0) e_->canary->orphan(region_);
  }
  /// False (a violation) when this handler was already called.
  bool call(tally& t) {
    if (!rec_) {
      t.violate(check::exactly_once, "a handler was invoked twice");
      return false;
    }
    rec_->calls.fetch_add(1);
    rec_ = nullptr;
    return true;
  }

 private:
  op_record* rec_;
  std::shared_ptr<epoch> e_;
  int region_;
};

// ---- lanes ---------------------------------------------------------------------

struct lane_guard {
  world& w;
  explicit lane_guard(world& ww) : w(ww) {}
  lane_guard(const lane_guard&) = delete;
  ~lane_guard() { w.lanes.fetch_sub(1); }
};

// In a coroutine frame: counts the handler's call, or the frame's
// destruction before it (its io_context destroyed).
struct frame_guard {
  op_record* rec;
  std::shared_ptr<epoch> e;
  int region;
  bool resumed = false;
  ~frame_guard() {
    if (resumed) return;
    rec->destroyed.fetch_add(1);
    if (region >= 0) e->canary->orphan(region);
  }
};

struct cancel_state {
  asio::cancellation_signal signal;
  bool done = false;  // the run completed: a late timer must not emit (on the strand)
};

void count_cancel(tally& t, asio::cancellation_type c) {
  if (c == asio::cancellation_type::terminal) t.cancels_terminal.fetch_add(1, std::memory_order_relaxed);
  if (c == asio::cancellation_type::partial) t.cancels_partial.fetch_add(1, std::memory_order_relaxed);
  if (c == asio::cancellation_type::total) t.cancels_total.fetch_add(1, std::memory_order_relaxed);
}

// Emits the plan's cancellation from a timer on the run's strand.
std::shared_ptr<cancel_state> arm_cancel(world& w, strand_t s, const run_plan& p,
                                         std::optional<asio::steady_timer>& timer) {
  auto cs = std::make_shared<cancel_state>();
  if (p.cancel == asio::cancellation_type::none) return cs;
  count_cancel(w.t, p.cancel);
  timer.emplace(s, p.cancel_after);
  timer->async_wait([cs, kind = p.cancel](std::error_code ec) {
    if (!ec && !cs->done) cs->signal.emit(kind);
  });
  return cs;
}

// use_awaitable on a strand of the io_context.
asio::awaitable<void> coroutine_lane(world& w, strand_t s) {
  lane_guard lane(w);
  auto alive = w.io_alive;
  while (auto idx = w.begin_launch()) {
    w.end_launch();  // the launch below happens in this strand handler: the strand barrier covers it
    auto p = w.plan(*idx);
    auto e = w.epoch_now();
    int region = take_region(w, *e, p);
    count_kind(w, p, region);
    auto* rec = &w.records[*idx];
    rec->io_bound = true;
    w.t.by_token_awaitable.fetch_add(1, std::memory_order_relaxed);
    frame_guard g{rec, e, region};
    std::optional<asio::steady_timer> timer;
    auto cs = arm_cancel(w, s, p, timer);
    std::error_code ec;
    try {
      auto tok = asio::bind_cancellation_slot(cs->signal.slot(), asio::use_awaitable);
      if (region < 0 && p.kind == run_kind::chain) co_await xrtio::async_run_chain(chain_of(*e, p), tok);
      else co_await launch_run(*e, p, region, tok);
    } catch (const std::system_error& x) {
      ec = x.code();
    }
    g.resumed = true;
    rec->calls.fetch_add(1);
    cs->done = true;
    if (timer) timer->cancel();
    if (!alive->load()) w.t.violate(check::after_destroy, "a coroutine resumed after its io_context was destroyed");
    if (!s.running_in_this_thread()) w.t.violate(check::wrong_executor, "a coroutine resumed outside its strand");
    finish_run(w, e, p, region, ec);
  }
}

// Callbacks: bound to a thread_pool executor (pool lanes) or to a strand of
// the io_context through asio::experimental::deferred (deferred lanes). Each handler
// launches the lane's next run.
struct callback_lane : std::enable_shared_from_this<callback_lane> {
  world& w;
  std::optional<strand_t> strand;  // deferred lane; pool lane when empty
  callback_lane(world& ww, std::optional<strand_t> s) : w(ww), strand(std::move(s)) {}
  callback_lane(const callback_lane&) = delete;
  ~callback_lane() { w.lanes.fetch_sub(1); }
  void next();
};

void callback_lane::next() {
  auto idx = w.begin_launch();
  if (!idx) return;  // the last handler's reference ends the lane
  auto p = w.plan(*idx);
  auto e = w.epoch_now();
  int region = take_region(w, *e, p);
  count_kind(w, p, region);
  auto* rec = &w.records[*idx];
  auto alive = w.io_alive;
  auto body = [self = shared_from_this(), e, p, region, tok = once_token(rec, e, region), alive](std::error_code ec,
                                                                                                   auto&&) mutable {
    auto& w = self->w;
    if (!tok.call(w.t)) return;
    if (self->strand) {
      if (!alive->load()) w.t.violate(check::after_destroy, "a callback ran after its io_context was destroyed");
      if (!self->strand->running_in_this_thread())
        w.t.violate(check::wrong_executor, "a deferred run's callback ran outside its strand");
    } else if (!w.pool.get_executor().running_in_this_thread()) {
      w.t.violate(check::wrong_executor, "a callback bound to the thread pool ran elsewhere");
    }
    finish_run(w, e, p, region, ec);
    self->next();
  };
  if (!strand) {
    rec->io_bound = false;
    w.t.by_token_callback.fetch_add(1, std::memory_order_relaxed);
    auto h = asio::bind_executor(w.pool.get_executor(), std::move(body));
    if (region < 0 && p.kind == run_kind::chain) xrtio::async_run_chain(chain_of(*e, p), std::move(h));
    else launch_run(*e, p, region, std::move(h));
    w.end_launch();
    return;
  }
  rec->io_bound = true;
  w.t.by_token_deferred.fetch_add(1, std::memory_order_relaxed);
  // The cancellation timer lives in the handler's shared state; it and the
  // handler run on the strand.
  struct timed {
    std::optional<asio::steady_timer> timer;
    std::shared_ptr<cancel_state> cs;
  };
  auto td = std::make_shared<timed>();
  td->cs = arm_cancel(w, *strand, p, td->timer);
  auto h = asio::bind_cancellation_slot(
      td->cs->signal.slot(),
      asio::bind_executor(*strand, [td, body = std::move(body)](std::error_code ec, auto&& r) mutable {
        td->cs->done = true;
        if (td->timer) td->timer->cancel();
        body(ec, r);
      }));
  if (region < 0 && p.kind == run_kind::chain) {
    auto d = xrtio::async_run_chain(chain_of(*e, p), asio::experimental::deferred);
    std::move(d)(std::move(h));
  } else {
    launch_deferred(*e, p, region, [&](auto d) { std::move(d)(std::move(h)); });
  }
  w.end_launch();
}

// Under TSan, use_future completes without exceptions (redirect_error): an error
// crosses threads in a std::exception_ptr whose reference count lives in
// libstdc++, which TSan does not instrument, so freeing it on the
// completing thread after this one read it is reported as a race.
#if defined(__SANITIZE_THREAD__)
constexpr bool with_future_exceptions = false;
#else
constexpr bool with_future_exceptions = true;
#endif

// use_future, waited on a thread of its own.
void future_lane(world& w) {
  lane_guard lane(w);
  while (auto idx = w.begin_launch()) {
    auto p = w.plan(*idx);
    if (p.kind == run_kind::chain) p.kind = run_kind::single;
    auto e = w.epoch_now();
    int region = take_region(w, *e, p);
    count_kind(w, p, region);
    auto* rec = &w.records[*idx];
    w.t.by_token_future.fetch_add(1, std::memory_order_relaxed);
    std::error_code ec;
    try {
      if (with_future_exceptions) {
        auto f = launch_run(*e, p, region, asio::use_future);
        w.end_launch();
        try {
          f.get();
        } catch (const std::system_error& x) {
          if (dynamic_cast<const std::future_error*>(&x)) throw;
          ec = x.code();
        }
      } else {
        // The error is written before the promise is set: get() orders it.
        auto f = launch_run(*e, p, region, asio::redirect_error(asio::use_future, ec));
        w.end_launch();
        f.get();
      }
    } catch (const std::future_error&) {  // the promise's handler was destroyed uncalled
      rec->destroyed.fetch_add(1);
      if (region >= 0) e->canary->orphan(region);
      continue;
    }
    rec->calls.fetch_add(1);
    finish_run(w, e, p, region, ec);
  }
}

// xrtio::start: waited, or dropped in flight (the handle's destructor aborts).
void sync_lane(world& w) {
  lane_guard lane(w);
  while (auto idx = w.begin_launch()) {
    w.end_launch();  // synchronous runs do not use the runtime
    auto p = w.plan(*idx);
    w.records[*idx].sync = true;
    w.t.by_sync.fetch_add(1, std::memory_order_relaxed);
    auto e = w.epoch_now(true);
    int region = p.kind == run_kind::canary ? take_region(w, *e, p) : -1;
    auto o = p.options;
    o.on_conflict = xrtio::conflict_policy::fail;  // start() always fails on a conflict
    std::error_code ec;
    xrtio::run_handle h;
    try {
      if (region >= 0)
        h = xrtio::start(e->late_marker, e->canary->view(region), e->canary->expected(region), p.salt, p.hold_us,
                         p.late_us, o);
      else
        h = xrtio::start(e->checksum, xrtio::in(e->in.sub(p.out_size, p.in_offset)),
                         xrtio::out(e->out.sub(view_align, p.out_offset)), static_cast<std::uint32_t>(p.out_size), o);
    } catch (const xrtio::error& x) {
      ec = x.code();
    }
    if (ec || !p.drop_handle) {
      if (!ec) h.wait(p.options.timeout, ec);
      finish_run(w, e, p, region, ec);
      continue;
    }
    w.t.handles_dropped.fetch_add(1, std::memory_order_relaxed);
    h = xrtio::run_handle();  // dropped in flight: aborts, retains a refused one
    if (region >= 0) e->canary->settle(w.t, region, retention::unknown, p.salt ^ 0xa5a5);
  }
}

// ---- the round's end -------------------------------------------------------------

void wait_until(const std::function<bool()>& pred) {
  while (!pred()) std::this_thread::sleep_for(200us);
}

void check_records(world& w) {
  auto launched = std::min<std::uint64_t>(w.next.load(), w.spec.quota);
  for (std::uint64_t i = 0; i < launched; ++i) {
    auto& r = w.records[i];
    if (r.sync) continue;
    int c = r.calls.load(), d = r.destroyed.load();
    w.t.handlers_called.fetch_add(c, std::memory_order_relaxed);
    w.t.handlers_destroyed.fetch_add(d, std::memory_order_relaxed);
    if (c + d != 1)
      w.t.violate(check::exactly_once, "run " + std::to_string(w.spec.first_run + i) + ": called " +
                                           std::to_string(c) + " times, destroyed uncalled " + std::to_string(d));
    else if (d == 1 && !(r.io_bound && w.io_destroyed_pending))
      w.t.violate(check::exactly_once, "run " + std::to_string(w.spec.first_run + i) +
                                           ": handler destroyed uncalled while its executor lived");
  }
}

// Every device final: retained runs as the devices say, then reaped; the
// canary regions and shared buffers free; then, all dropped, the budget empty.
void check_end(world& w, std::size_t retained_before, bool stalled) {
  auto retained = xrtio::retained_runs() - retained_before;
  auto until = std::chrono::steady_clock::now() + reap_limit;
  std::size_t reaped = 0;
  while (xrtio::retained_runs() > retained_before && std::chrono::steady_clock::now() < until) {
    reaped += xrtio::reap_retained();
    std::this_thread::sleep_for(1ms);
  }
  w.t.reaped.fetch_add(reaped);
  if (xrtio::retained_runs() > retained_before)
    w.t.violate(check::not_reaped, std::to_string(xrtio::retained_runs() - retained_before) +
                                       " retained runs left after reaping for 20 s");
  // Read after reaping: a reaped run's abort has returned, so an overlong
  // one is counted by now.
  std::uint64_t refused = 0, long_aborts = 0;
  for (auto& e : w.epochs) {
    auto s = e->dev->stats();
    refused += s.abort_refused;
    long_aborts += s.long_aborts;
  }
  w.t.retained.fetch_add(retained);
  w.t.refused_aborts.fetch_add(refused);
  w.t.long_aborts.fetch_add(long_aborts);
  if (stalled) w.t.rounds_stalled.fetch_add(1);
  // A stall can make any abort overlong to the reactor but not to the device
  // (or the reverse): then only the timing-free half is checked, that
  // every refused abort retained its run.
  if (stalled ? retained < refused : retained != refused + long_aborts)
    w.t.violate(check::retained_count, "round " + std::to_string(w.spec.index) + " (" +
                                           (w.spec.inloop ? "in-loop, " : "reactor thread, ") +
                                           (w.spec.end == round_end::drain        ? "drained"
                                            : w.spec.end == round_end::destroy_io ? "io_context destroyed"
                                                                                  : "runtime destroyed") +
                                           "): " + std::to_string(retained) +
                                           " retained, " + std::to_string(refused) + " refused + " +
                                           std::to_string(long_aborts) + " overlong aborts");
  for (auto& e : w.epochs) {
    e->canary->final_check(w.t, mix(e->id) ^ 0x77);
    for (auto* b : {&e->in, &e->out, &e->prep_out}) {
      std::vector<std::byte> zeros(b->size());
      try {
        b->write(std::span<const std::byte>(zeros));
      } catch (const xrtio::error& x) {
        w.t.violate(check::lease_leaked, std::string("a shared buffer after every run was final: ") + x.what());
      }
    }
  }
  w.current.reset();
  w.sync_current.reset();
  w.epochs.clear();
  if (w.budget.used() != 0)
    w.t.violate(check::budget, std::to_string(w.budget.used()) + " bytes still charged after round " +
                                   std::to_string(w.spec.index));
}

}  // namespace

std::uint64_t run_round(const options& o, const round_spec& spec, xrtio::memory_budget& budget, tally& t,
                        const stall_detector& stalls) {
  auto retained_before = xrtio::retained_runs();
  auto stalls_before = stalls.stalls();
  world w(o, spec, budget, t);
  xrtio::runtime_options ro;
  ro.abort_grace = o.abort_grace;
  ro.shutdown_grace = 1s;
  ro.reactor_thread = !spec.inloop;
  w.rt = std::make_unique<xrtio::runtime>(ro);
  w.io = std::make_unique<asio::io_context>();
  {
    std::lock_guard lock(w.epoch_mutex);
    w.open_epoch_locked(false);
    w.open_epoch_locked(true);
  }
  auto guard = std::make_optional(asio::make_work_guard(*w.io));

  std::vector<strand_t> coroutine_strands;
  for (unsigned i = 0; i < coroutine_lanes; ++i) {
    coroutine_strands.push_back(asio::make_strand(*w.io));
    w.lanes.fetch_add(1);
    asio::co_spawn(coroutine_strands.back(), coroutine_lane(w, coroutine_strands.back()), asio::detached);
  }
  for (unsigned i = 0; i < deferred_lanes; ++i) {
    auto s = asio::make_strand(*w.io);
    w.lanes.fetch_add(1);
    asio::post(s, [lane = std::make_shared<callback_lane>(w, s)] { lane->next(); });
  }
  for (unsigned i = 0; i < pool_lanes; ++i) {
    w.lanes.fetch_add(1);
    asio::post(w.pool, [lane = std::make_shared<callback_lane>(w, std::nullopt)] { lane->next(); });
  }
  w.lanes.fetch_add(2);
  std::thread fut([&] { future_lane(w); });
  std::thread syn([&] { sync_lane(w); });

  std::vector<std::thread> io_threads;
  auto start_io = [&](asio::io_context& io) {
    if (spec.inloop) io_threads.emplace_back([&] { xrtio::run(io, *w.rt); });
    else
      for (unsigned i = 0; i < o.threads; ++i) io_threads.emplace_back([&] { io.run(); });
  };
  auto join_io = [&] {
    for (auto& th : io_threads) th.join();
    io_threads.clear();
  };
  start_io(*w.io);

  auto cut = spec.quota * cut_per_mille / 1000;
  std::unique_ptr<asio::io_context> io2;  // in-loop: drives the runtime once the first io_context is gone
  switch (spec.end) {
    case round_end::drain:
      wait_until([&] { return w.lanes.load() == 0; });
      guard.reset();
      join_io();
      break;
    case round_end::destroy_io: {
      wait_until([&] { return w.next.load() >= cut || w.lanes.load() == 0; });
      w.io->stop();
      join_io();
      w.io_alive->store(false);
      w.io_destroyed_pending = true;
      guard.reset();
      coroutine_strands.clear();  // a strand must not outlive its io_context
      w.io.reset();  // destroys the coroutines and handlers still pending on it
      t.io_destroyed.fetch_add(1);
      std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard2;
      if (spec.inloop) {
        io2 = std::make_unique<asio::io_context>();
        guard2.emplace(io2->get_executor());
        start_io(*io2);
      }
      wait_until([&] { return w.lanes.load() == 0; });
      guard2.reset();
      join_io();
      break;
    }
    case round_end::destroy_runtime: {
      wait_until([&] { return w.next.load() >= cut || w.lanes.load() == 0; });
      w.stop.store(true);
      wait_until([&] { return w.launching.load() == 0; });
      if (spec.inloop) {
        w.io->stop();
        join_io();
      } else {
        // A coroutine's launch happens inside its strand's handler: once a
        // marker posted to each strand has run, none is mid-launch.
        std::atomic<unsigned> marks{0};
        for (auto& s : coroutine_strands) asio::post(s, [&] { marks.fetch_add(1); });
        wait_until([&] { return marks.load() == coroutine_strands.size(); });
      }
      w.rt.reset();  // runs in flight: aborted, completed, refused ones retained
      t.runtime_destroyed.fetch_add(1);
      if (spec.inloop) {
        w.io->restart();
        io_threads.emplace_back([&] { w.io->run(); });
      }
      wait_until([&] { return w.lanes.load() == 0; });
      guard.reset();
      join_io();
      break;
    }
  }
  fut.join();
  syn.join();
  w.pool.join();
  coroutine_strands.clear();
  w.io.reset();
  io2.reset();
  w.rt.reset();
  t.rounds.fetch_add(1);
  if (spec.inloop) t.rounds_inloop.fetch_add(1);
  check_records(w);
  // Until every device is final: retained runs are reaped in check_end.
  check_end(w, retained_before, stalls.stalls() != stalls_before);
  return std::min<std::uint64_t>(w.next.load(), spec.quota);
}

}  // namespace soak
