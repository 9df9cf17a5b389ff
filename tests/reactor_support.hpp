// Helpers shared by the reactor suites (tests/test_reactor*.cpp, test_alloc.cpp).
#pragma once

#include <doctest/doctest.h>

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <exception>
#include <thread>
#include <vector>

#include "xrtio/xrtio.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define XRTIO_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define XRTIO_TEST_SANITIZED 1
#endif
#endif
#ifndef XRTIO_TEST_SANITIZED
#define XRTIO_TEST_SANITIZED 0
#endif

namespace rtest {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

inline constexpr bool sanitized = XRTIO_TEST_SANITIZED != 0;

/// Which of the runtime's two modes the reactor suites run in: CTest
/// registers every reactor suite twice, the second time with
/// --xrtio-reactor=inloop (tests/main.cpp turns it into this variable).
inline bool inloop_mode() {
  const char* m = std::getenv("XRTIO_TEST_REACTOR");
  return m != nullptr && std::string_view(m) == "inloop";
}

/// The runtime of the reactor suites, in the mode the run asks for. Reactor
/// mode: an ordinary runtime with its reactor thread. In-loop mode: a runtime
/// made with reactor_thread = false and driven by xrtio::run on an io_context
/// thread of its own, so every deadline, abort, retention and completion
/// goes through the in-loop driver while the test's handlers stay on the
/// test's executors (tests/test_inloop.cpp covers handlers on the driving
/// thread itself).
class mode_runtime : public xrtio::runtime {
 public:
  explicit mode_runtime(xrtio::runtime_options o = {}) : xrtio::runtime(adjust(o)) {
    if (!inloop_mode()) return;
    driver_ = std::thread([this] {
      try {
        xrtio::run(io_, *this);
      } catch (...) {
        driver_error_ = std::current_exception();
      }
    });
  }
  ~mode_runtime() {
    // The driver stops first; the runtime's destructor then aborts and
    // completes what is still in flight by itself.
    if (driver_.joinable()) {
      guard_.reset();
      io_.stop();
      driver_.join();
    }
    if (driver_error_) std::terminate();  // xrtio::run threw: a defect
  }
  mode_runtime(const mode_runtime&) = delete;
  mode_runtime& operator=(const mode_runtime&) = delete;

 private:
  static xrtio::runtime_options adjust(xrtio::runtime_options o) {
    if (inloop_mode()) o.reactor_thread = false;
    return o;
  }
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_{io_.get_executor()};
  std::exception_ptr driver_error_;
  std::thread driver_;
};

/// A simulated device bound to its own runtime.
struct fixture {
  mode_runtime rt;
  xrtio::context ctx;
  explicit fixture(xrtio::sim::device_config cfg = {}, xrtio::runtime_options o = {}) : rt(o) {
    ctx = xrtio::sim::open(std::move(cfg));
    ctx.bind(rt);
  }
};

inline xrtio::sim::device& dev(const xrtio::context& c) { return xrtio::sim::device_of(c); }

/// n noop runs in flight at once, callbacks on one io_context; returns how
/// many completed without error (each error is a failed CHECK).
inline int run_concurrently(fixture& f, int n) {
  asio::io_context io;
  int done = 0;
  for (int i = 0; i < n; ++i)
    xrtio::async_run(f.ctx.kernel("noop"), asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                       CHECK(!ec);
                       if (!ec) ++done;
                     }));
  io.run();
  return done;
}

/// A device config whose noop kernel hangs until aborted.
inline xrtio::sim::device_config hang_noop(bool event_fd = true) {
  xrtio::sim::device_config cfg;
  cfg.event_fd = event_fd;
  cfg.faults.push_back({.kernel = "noop", .what = xrtio::sim::fault::hang});
  return cfg;
}

/// A noop run on a hang_noop() device, in flight until release(): for tests
/// that watch the reactor rest while a run is on the device, for as long as
/// they need to, however slowly a loaded host runs them.
struct hung_run {
  asio::io_context io;
  asio::cancellation_signal sig;
  std::error_code ec;
  int calls = 0;
  explicit hung_run(xrtio::context& ctx) {
    xrtio::async_run(ctx.kernel("noop"),
                     asio::bind_cancellation_slot(sig.slot(), asio::bind_executor(io, [this](std::error_code e, auto) {
                                                    ec = e;
                                                    ++calls;
                                                  })));
  }
  /// Cancels the run (terminal: an abort) and waits for its handler.
  void release() {
    sig.emit(asio::cancellation_type::terminal);
    io.run();
  }
};

inline double ms_since(clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
}

/// co_spawn completion that rethrows out of io_context::run().
inline void rethrow(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

/// Three buffers for vadd(a, b, c, n): a[i] = i + base, b[i] = 2 i.
struct vadd_set {
  xrtio::buffer a, b, c;
  std::uint32_t n = 16, base = 0;
};
inline vadd_set make_vadd(xrtio::context& ctx, std::uint32_t n = 16, std::uint32_t base = 0) {
  vadd_set v{ctx.alloc(n * 4), ctx.alloc(n * 4), ctx.alloc(n * 4), n, base};
  std::vector<std::uint32_t> a(n), b(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    a[i] = i + base;
    b[i] = 2 * i;
  }
  v.a.write(std::span<const std::uint32_t>(a));
  v.b.write(std::span<const std::uint32_t>(b));
  return v;
}
/// True when c holds a + b.
inline bool vadd_ok(const vadd_set& v) {
  std::vector<std::uint32_t> c(v.n);
  v.c.read(std::span<std::uint32_t>(c));
  for (std::uint32_t i = 0; i < v.n; ++i)
    if (c[i] != 3 * i + v.base) return false;
  return true;
}

/// What a host write of the first 4 bytes of `b` reports (empty on success).
inline std::error_code host_write(xrtio::buffer b) {
  std::uint32_t x = 0x5a5a5a5a;
  try {
    b.write(std::span<const std::uint32_t>(&x, 1));
  } catch (const xrtio::error& e) {
    return e.code();
  }
  return {};
}

/// Polls `pred` every millisecond for up to `limit`; returns its last value.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5000ms) {
  auto until = clock::now() + limit;
  while (!pred()) {
    if (clock::now() >= until) return pred();
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

inline std::uint64_t fnv1a(std::span<const std::byte> b) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (auto x : b) {
    h ^= static_cast<std::uint8_t>(x);
    h *= 0x100000001b3ull;
  }
  return h;
}

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace rtest
