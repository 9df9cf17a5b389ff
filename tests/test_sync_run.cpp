#include <doctest/doctest.h>

#include "introspection.hpp"
#include "foundation_support.hpp"

// Synchronous runs (xrtio::start / run_handle): leases outlive the device
// (invariant 2), only COMPLETED is success (3), abandoned runs are aborted,
// and refused aborts are retained, never freed under DMA (5).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "xrtio/context.hpp"
#include "xrtio/error.hpp"
#include "xrtio/run.hpp"
#include "xrtio/run_state.hpp"
#include "xrtio/sim.hpp"

using namespace std::chrono_literals;
using xrtio::errc;
using xrtio::run_state;
namespace sim = xrtio::sim;
using clk = std::chrono::steady_clock;

namespace {

using ftest::contains;
using ftest::error_of;

using ftest::device_of;

template <class P>
bool eventually(P&& pred, std::chrono::milliseconds limit = 5000ms) {
  auto until = clk::now() + limit;
  while (!pred()) {
    if (clk::now() > until) return false;
    std::this_thread::sleep_for(200us);
  }
  return true;
}

// Reaps until the process is back to `count` retained runs.
bool reaped_down_to(std::size_t count) {
  return eventually([&] {
    xrtio::reap_retained();
    return xrtio::retained_runs() <= count;
  });
}

sim::device_config with_fault(sim::fault_rule r) {
  sim::device_config c;
  c.faults.push_back(std::move(r));
  return c;
}

std::vector<std::uint32_t> iota_u32(std::size_t n, std::uint32_t from) {
  std::vector<std::uint32_t> v(n);
  for (auto& x : v) x = from++;
  return v;
}

}  // namespace

// ---- final states ----------------------------------------------------------------

TEST_CASE("run_state: only COMPLETED is success and every other final state has its own error") {
  CHECK_FALSE(xrtio::state_error(run_state::completed));
  std::vector<std::pair<run_state, errc>> failures{
      {run_state::error, errc::run_error},           {run_state::abort, errc::run_aborted},
      {run_state::timeout, errc::run_timeout_state}, {run_state::no_response, errc::run_no_response},
      {run_state::skerror, errc::soft_kernel_error}, {run_state::skcrashed, errc::soft_kernel_crashed}};
  for (auto [s, e] : failures) {
    CHECK(xrtio::is_final(s));
    CHECK(xrtio::state_error(s) == e);
  }
  for (auto s : {run_state::new_, run_state::queued, run_state::running, run_state::submitted}) {
    CHECK_FALSE(xrtio::is_final(s));
    CHECK(xrtio::state_error(s));  // asking a non-final state is an error, never success
  }
  CHECK(xrtio::to_string(run_state::completed) == "COMPLETED");
  CHECK(xrtio::to_string(run_state::no_response) == "NORESPONSE");
  CHECK(xrtio::to_string(run_state::submitted) == "SUBMITTED");
  xrtio::run_result r;
  CHECK_FALSE(r.ok());
  r.state = run_state::completed;
  CHECK(r.ok());
}

// ---- handles hold what the device uses -----------------------------------------------

TEST_CASE("sync run: start returns a handle holding every lease and buffer until it is final and gone") {
  sim::device_config cfg;
  cfg.latency.fixed = 20ms;
  auto ctx = sim::open(cfg);
  auto a = ctx.alloc(64), b = ctx.alloc(64), c = ctx.alloc(64);
  auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{16});
  CHECK(h.valid());
  CHECK(xtest::tracker(a).active_count() == 1);
  CHECK(xtest::tracker(b).active_count() == 1);
  CHECK(xtest::tracker(c).active_count() == 1);
  CHECK(xtest::state(a).use_count() > 1);
  CHECK(xtest::state(c).use_count() > 1);
  CHECK(h.wait(10s).ok());
  CHECK(xtest::tracker(a).active_count() == 0);
  CHECK(xtest::tracker(c).active_count() == 0);
  h = {};
  CHECK_FALSE(h.valid());
  CHECK(xtest::state(a).use_count() == 1);
  CHECK(xtest::state(c).use_count() == 1);
}

TEST_CASE("sync run: dropping every user handle while the run is in flight is safe and the run completes") {
  constexpr std::size_t n = 1024;
  xrtio::run_handle h;
  std::span<std::byte> out_bytes;
  std::weak_ptr<xrtio::detail::context_state> ctx_alive;
  {
    sim::device_config cfg;
    cfg.latency.fixed = 5ms;
    auto ctx = sim::open(cfg);
    ctx_alive = xtest::state(ctx);
    auto k = ctx.kernel("vadd");
    auto a = ctx.alloc(n * 4), b = ctx.alloc(n * 4), c = ctx.alloc(n * 4);
    auto av = iota_u32(n, 0), bv = iota_u32(n, 1000000);
    a.write(std::span<const std::uint32_t>(av));
    b.write(std::span<const std::uint32_t>(bv));
    out_bytes = c.map();
    h = xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(c), static_cast<std::uint32_t>(n));
  }  // buffers, kernel and context handles all gone; the run is still on the device
  CHECK_FALSE(ctx_alive.expired());
  auto r = h.wait(10s);
  CHECK(r.ok());
  // The handle still owns the output buffer: its memory is valid (ASan checks).
  std::vector<std::uint32_t> out(n);
  std::memcpy(out.data(), out_bytes.data(), n * 4);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(out[i] == i + (i + 1000000));
  h = {};
  CHECK(ctx_alive.expired());  // the last owner was the run
}

TEST_CASE("sync run: a handle dropped before the run finishes keeps nothing alive once aborted") {
  std::weak_ptr<xrtio::detail::context_state> ctx_alive;
  {
    auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::hang}));
    ctx_alive = xtest::state(ctx);
    auto a = ctx.alloc(64), c = ctx.alloc(64);
    auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(a), xrtio::out(c), std::uint32_t{16});
    ctx = {};
    a = {};
    c = {};
    CHECK_FALSE(ctx_alive.expired());
  }
  CHECK(ctx_alive.expired());
}

TEST_CASE("sync run: destroying a handle that was never waited aborts the run and frees its ranges") {
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::hang}));
  auto a = ctx.alloc(64), c = ctx.alloc(64);
  {
    auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(a), xrtio::out(c), std::uint32_t{16});
    CHECK(eventually([&] { return h.state() == run_state::running; }));
  }
  auto s = device_of(ctx).stats();
  CHECK(s.aborted == 1);
  CHECK(s.completed == 0);
  CHECK(xtest::tracker(c).active_count() == 0);
  CHECK_NOTHROW(c.write(std::span<const std::uint32_t>(iota_u32(16, 0))));
}

TEST_CASE("sync run: destroying a queued never-waited handle aborts it before it runs") {
  sim::device_config cfg;
  cfg.latency.fixed = 10s;
  auto ctx = sim::open(cfg);
  auto a = ctx.alloc(64), c = ctx.alloc(64);
  auto t0 = clk::now();
  {
    auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(a), xrtio::out(c), std::uint32_t{16});
    CHECK(h.state() == run_state::queued);
  }
  CHECK(clk::now() - t0 < 5s);
  CHECK(device_of(ctx).stats().aborted == 1);
  CHECK(xtest::tracker(c).active_count() == 0);
}

TEST_CASE("sync run: destroying a handle whose run already completed does not abort") {
  auto ctx = sim::open();
  auto a = ctx.alloc(64), c = ctx.alloc(64);
  {
    auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(a), xrtio::out(c), std::uint32_t{16});
    CHECK(eventually([&] { return h.state() == run_state::completed; }));
  }
  auto s = device_of(ctx).stats();
  CHECK(s.aborted == 0);
  CHECK(s.completed == 1);
  CHECK(xtest::tracker(c).active_count() == 0);
}

TEST_CASE("sync run: move-assigning over an in-flight handle aborts the run it held") {
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::hang}));
  auto a = ctx.alloc(64), c1 = ctx.alloc(64), c2 = ctx.alloc(64);
  auto k = ctx.kernel("vadd");
  auto h = xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(c1), std::uint32_t{16});
  auto moved = std::move(h);
  CHECK_FALSE(h.valid());
  CHECK(moved.valid());
  CHECK(device_of(ctx).stats().aborted == 0);
  moved = xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(c2), std::uint32_t{16});
  CHECK(device_of(ctx).stats().aborted == 1);
  CHECK(xtest::tracker(c1).active_count() == 0);
  CHECK(xtest::tracker(c2).active_count() == 1);
}

TEST_CASE("sync run: a second wait reports the same outcome and the non-throwing form sets the code") {
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::hang}));
  auto a = ctx.alloc(64), c = ctx.alloc(64);
  auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(a), xrtio::out(c), std::uint32_t{16});
  std::error_code ec;
  auto r = h.wait(5ms, ec);
  CHECK(ec == errc::timed_out);
  CHECK(r.state == run_state::abort);
  CHECK(h.result().state == run_state::abort);
  r = h.wait(5ms, ec);
  CHECK(ec == errc::timed_out);  // asking again gives the same answer
  CHECK(r.state == run_state::abort);
  error_of([&] { h.wait(); }, errc::timed_out);

  xrtio::run_handle empty;
  CHECK_FALSE(empty.valid());
  CHECK(empty.state() == run_state::new_);
  CHECK(empty.result().state == run_state::new_);
  empty.wait(1ms, ec);
  CHECK(ec == errc::invalid_size);
}

TEST_CASE("sync run: a failed start leaves no lease and no device command and no retained run") {
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::hang}));
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(64), c = ctx.alloc(64), other = ctx.alloc(64);
  auto before = xrtio::retained_runs();
  auto h = xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(c), std::uint32_t{16});
  // `other` is free but `c` is written by `h`: all or nothing.
  error_of([&] { xrtio::start(k, xrtio::in(a), xrtio::in(other), xrtio::out(c), std::uint32_t{16}); },
           errc::range_in_use);
  CHECK(xtest::tracker(other).active_count() == 0);
  CHECK(device_of(ctx).stats().started == 1);
  h = {};  // aborts the hung run
  CHECK(xtest::tracker(c).active_count() == 0);
  CHECK(xtest::tracker(a).active_count() == 0);
  CHECK(xrtio::retained_runs() == before);
}

// ---- refused aborts are retained (invariant 5) ---------------------------------------

TEST_CASE("sync run: a refused abort retains the run whose ranges fail with range_retained while others work") {
  auto before = xrtio::retained_runs();
  xrtio::memory_budget budget(1 << 20);
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::refuse_abort, .duration = 300ms}), budget);
  auto big = ctx.alloc(8192);
  auto h = [&] {
    auto a = ctx.alloc(1024);
    return xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(big.sub(1024, 1024)),
                        xrtio::out(big.sub(1024, 2048)), std::uint32_t{256});
  }();
  CHECK(eventually([&] { return h.state() == run_state::running; }));
  auto msg = error_of([&] { h.wait(10ms); }, errc::abort_failed);
  CHECK_CONTAINS(msg, "vadd");
  CHECK_CONTAINS(msg, "refused");
  CHECK(xrtio::retained_runs() == before + 1);
  CHECK(device_of(ctx).stats().abort_refused == 1);
  error_of([&] { h.wait(); }, errc::abort_failed);  // asking again gives the same answer

  // The run's ranges are off limits, with a clear message.
  std::vector<std::byte> x(16);
  msg = error_of([&] { big.write(std::span<const std::byte>(x), 3000); }, errc::range_retained);
  CHECK_CONTAINS(msg, "[3000, 3016)");
  CHECK_CONTAINS(msg, "[2048, 3072)");
  CHECK_CONTAINS(msg, "retained after a refused abort");
  error_of([&] { big.read(std::span<std::byte>(x), 1024); }, errc::range_retained);
  error_of([&] {
    xrtio::start(ctx.kernel("checksum"), xrtio::in(big.sub(64, 2048)), xrtio::out(big.sub(8, 0)), std::uint32_t{64});
  }, errc::range_retained);
  // A disjoint range of the same allocation still works.
  CHECK_NOTHROW(big.write(std::span<const std::byte>(x), 0));
  CHECK_NOTHROW(big.write(std::span<const std::byte>(x), 4096));
  CHECK_NOTHROW(big.read(std::span<std::byte>(x), 8192 - 16));

  // Dropping every handle keeps the retained buffers and their charge.
  h = {};
  CHECK(xrtio::retained_runs() == before + 1);
  CHECK(budget.used() == 8192 + 1024);

  // Once the device finishes the run, reaping releases it.
  REQUIRE(reaped_down_to(before));
  CHECK(budget.used() == 8192);
  CHECK_NOTHROW(big.write(std::span<const std::byte>(x), 3000));
  CHECK(xtest::tracker(big).active_count() == 0);
}

TEST_CASE("sync run: a never-waited handle whose abort is refused is retained on destruction") {
  auto before = xrtio::retained_runs();
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::refuse_abort, .duration = 250ms}));
  auto a = ctx.alloc(64), c = ctx.alloc(64);
  {
    auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(a), xrtio::out(c), std::uint32_t{16});
    CHECK(eventually([&] { return h.state() == run_state::running; }));
  }
  CHECK(xrtio::retained_runs() == before + 1);
  std::vector<std::byte> x(4);
  error_of([&] { c.read(std::span<std::byte>(x)); }, errc::range_retained);
  CHECK(reaped_down_to(before));
  CHECK_NOTHROW(c.read(std::span<std::byte>(x)));
}

TEST_CASE("sync run: reap_retained keeps a run the device has not finished") {
  auto before = xrtio::retained_runs();
  auto ctx = sim::open(with_fault({.kernel = "vadd", .what = sim::fault::refuse_abort, .duration = 500ms}));
  auto a = ctx.alloc(64), c = ctx.alloc(64);
  auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(a), xrtio::out(c), std::uint32_t{16});
  CHECK(eventually([&] { return h.state() == run_state::running; }));
  error_of([&] { h.wait(1ms); }, errc::abort_failed);
  CHECK(xrtio::reap_retained() == 0);  // still running on the device
  CHECK(xrtio::retained_runs() == before + 1);
  CHECK(reaped_down_to(before));
}

// ---- the canary: retained memory is never handed back while the device writes it ------

namespace {
constexpr std::uint64_t canary_word = 0xC0FFEE15DEADBEEFull;
std::atomic<bool> canary_release{false};
std::atomic<std::uint64_t> canary_passes{0};

sim::kernel_def canary_kernel() {
  return {"canary",
          {{"mem", xrtio::backend::arg_kind::buffer, 0, 0}},
          [](sim::kernel_call& call) {
            auto words = call.buffer_as<std::uint64_t>(0);
            volatile std::uint64_t* p = words.data();  // every pass really stores
            while (!call.stop_requested() && !canary_release.load()) {
              for (std::size_t i = 0; i < words.size(); ++i) p[i] = canary_word;
              canary_passes.fetch_add(1);
              std::this_thread::sleep_for(50us);
            }
          }};
}
}  // namespace

TEST_CASE("sync run: memory of a retained run that keeps writing is never handed back (canary)") {
  constexpr std::size_t size = 64 * 1024;
  auto before = xrtio::retained_runs();
  canary_release = false;
  canary_passes = 0;
  {
    sim::device_config cfg;
    cfg.kernels.push_back(canary_kernel());
    cfg.faults.push_back({.kernel = "canary", .what = sim::fault::refuse_abort, .duration = 1ms});
    auto ctx = sim::open(cfg);
    auto mem = ctx.alloc(size);
    auto h = xrtio::start(ctx.kernel("canary"), xrtio::out(mem));
    REQUIRE(eventually([] { return canary_passes.load() > 0; }));
    error_of([&] { h.wait(5ms); }, errc::abort_failed);
    CHECK(xrtio::retained_runs() == before + 1);
  }  // every user handle is gone; the canary still writes

  auto ctx = sim::open();
  for (int round = 0; round < 20; ++round) {
    std::vector<xrtio::buffer> bufs;
    for (int i = 0; i < 16; ++i) bufs.push_back(ctx.alloc(size));
    std::this_thread::sleep_for(500us);  // give a misplaced canary time to strike
    std::size_t hits = 0;
    for (auto& b : bufs) {
      auto words = std::span<const std::uint64_t>(reinterpret_cast<const std::uint64_t*>(b.map().data()), size / 8);
      for (auto w : words) hits += w == canary_word;
    }
    REQUIRE_MESSAGE(hits == 0, "round ", round, ": a new buffer holds the retained run's canary");
  }
  auto passes = canary_passes.load();
  CHECK(eventually([&] { return canary_passes.load() > passes; }));  // it kept writing throughout

  // Let the device finish; only then is the memory released.
  canary_release = true;
  CHECK(reaped_down_to(before));
}

TEST_CASE("sync run: run_options::timeout given to start() bounds wait() without a timeout of its own") {
  xrtio::sim::device_config cfg;
  cfg.faults.push_back({.kernel = "noop", .what = xrtio::sim::fault::hang});
  auto ctx = xrtio::sim::open(cfg);
  auto h = xrtio::start(ctx.kernel("noop"), xrtio::run_options{.timeout = std::chrono::milliseconds(20)});
  auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  auto r = h.wait(std::chrono::nanoseconds::max(), ec);
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(ec == xrtio::errc::timed_out);
  CHECK(r.state == xrtio::run_state::abort);
  CHECK(took < std::chrono::seconds(5));  // bounded by the 20 ms deadline, not forever
}

TEST_CASE("sync run: a throwing wait() names the run_options::timeout that ran out, not an unbounded wait's limit") {
  xrtio::sim::device_config cfg;
  cfg.faults.push_back({.kernel = "noop", .what = xrtio::sim::fault::hang});
  auto ctx = xrtio::sim::open(cfg);
  auto h = xrtio::start(ctx.kernel("noop"), xrtio::run_options{.timeout = std::chrono::milliseconds(20)});
  auto msg = error_of([&] { h.wait(); }, errc::timed_out);
  CHECK(contains(msg, "outlived run_options::timeout (20000 us) and was aborted"));
  CHECK(!contains(msg, "9223372036854775807"));
}

namespace {
// A backend whose runs wrap the simulator's, but whose wait_for always
// throws (the interface allows it) and whose state() reads RUNNING for a
// few polls after an accepted abort (a device slow to publish it).
class throwing_wait_run final : public xrtio::backend::native_run {
 public:
  explicit throwing_wait_run(xrtio::backend::native_run_ptr inner) : inner_(std::move(inner)) {}
  void set_arg(unsigned i, xrtio::backend::native_buffer& b) override { inner_->set_arg(i, b); }
  void set_arg(unsigned i, const void* v, std::size_t n) override { inner_->set_arg(i, v, n); }
  void start() override { inner_->start(); }
  run_state state() noexcept override {
    if (aborted_ && late_polls_ > 0) {
      --late_polls_;
      return run_state::running;
    }
    return inner_->state();
  }
  run_state wait_for(std::chrono::nanoseconds) override { throw std::runtime_error("wait_for: device unreachable"); }
  xrtio::backend::abort_outcome abort() override {
    aborted_ = true;
    return inner_->abort();
  }

 private:
  xrtio::backend::native_run_ptr inner_;
  bool aborted_ = false;
  int late_polls_ = 3;
};

class throwing_wait_kernel final : public xrtio::backend::native_kernel {
 public:
  explicit throwing_wait_kernel(std::shared_ptr<xrtio::backend::native_kernel> k) : inner_(std::move(k)) {}
  const std::string& name() const noexcept override { return inner_->name(); }
  const std::vector<xrtio::backend::arg_desc>& args() const noexcept override { return inner_->args(); }
  xrtio::backend::native_run_ptr make_run() override {
    return xrtio::backend::native_run_ptr(new throwing_wait_run(inner_->make_run()));
  }

 private:
  std::shared_ptr<xrtio::backend::native_kernel> inner_;
};

class throwing_wait_device final : public xrtio::backend::native_device {
 public:
  explicit throwing_wait_device(sim::device_config cfg) : inner_(sim::make_device(std::move(cfg))) {}
  std::string name() const override { return "throwing wait_for over " + inner_->name(); }
  std::unique_ptr<xrtio::backend::native_buffer> alloc(std::size_t n, xrtio::backend::buffer_kind k, int g) override {
    return inner_->alloc(n, k, g);
  }
  std::unique_ptr<xrtio::backend::native_buffer> import_user_memory(void* p, std::size_t n) override {
    return inner_->import_user_memory(p, n);
  }
  std::unique_ptr<xrtio::backend::native_buffer> import_dmabuf(int fd, std::size_t n) override {
    return inner_->import_dmabuf(fd, n);
  }
  std::shared_ptr<xrtio::backend::native_kernel> kernel(const std::string& n) override {
    return std::make_shared<throwing_wait_kernel>(inner_->kernel(n));
  }
  std::vector<std::string> kernel_names() const override { return inner_->kernel_names(); }

 private:
  std::shared_ptr<sim::device> inner_;
};
}  // namespace

TEST_CASE("sync run: a backend whose wait_for throws while an aborted run settles never ends the process") {
  // wait(ec) and ~run_handle are noexcept; after an accepted abort they
  // called wait_for outside any try, and a throw ended the process. And
  // wait() waits out its timeout by polling state().
  sim::device_config cfg;
  cfg.faults.push_back({.kernel = "noop", .what = sim::fault::hang});
  xrtio::context ctx(std::make_shared<throwing_wait_device>(cfg));
  auto k = ctx.kernel("noop");
  {
    auto h = xrtio::start(k);
    std::error_code ec;
    auto t0 = clk::now();
    auto r = h.wait(100ms, ec);
    CHECK(ec == errc::timed_out);
    CHECK(r.state == run_state::abort);
    // The wait lasted its timeout, polling state() (before, the first throw
    // ended it, and the run was aborted at once).
    CHECK(clk::now() - t0 >= 100ms);
  }
  {
    auto h = xrtio::start(k);  // the destructor aborts it
  }
  CHECK(xrtio::retained_runs() == 0);
}
