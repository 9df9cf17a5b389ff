// xrtio demo: coroutines on one io_context await kernel runs on the
// simulated device. Most complete with checked results; one times out; one
// loses an `||` race against a timer and is cancelled; one hits a device
// that refuses to abort, and is retained rather than freed under DMA.
#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "xrtio/xrtio.hpp"

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using asio::awaitable;
using asio::use_awaitable;
constexpr auto as_tuple = asio::experimental::as_tuple(use_awaitable);

namespace {
int failures = 0;

void report(const char* who, const char* what, bool ok) {
  std::printf("  %-22s %-58s %s\n", who, what, ok ? "ok" : "UNEXPECTED");
  if (!ok) ++failures;
}

awaitable<void> vector_add(xrtio::context ctx, int id, std::uint32_t n) {
  auto a = ctx.alloc(n * 4), b = ctx.alloc(n * 4), c = ctx.alloc(n * 4);
  std::vector<std::uint32_t> va(n), vb(n), vc(n);
  std::iota(va.begin(), va.end(), 0u);
  std::iota(vb.begin(), vb.end(), 1000u * id);
  a.write(std::span<const std::uint32_t>(va));
  b.write(std::span<const std::uint32_t>(vb));
  auto [ec, r] = co_await xrtio::async_run(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(c), n,
                                           xrtio::run_options{.timeout = 1s}, as_tuple);
  c.read(std::span<std::uint32_t>(vc));
  bool right = !ec;
  for (std::uint32_t i = 0; i < n && right; ++i) right = vc[i] == va[i] + vb[i];
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(r.observed - r.submitted).count();
  char what[128];
  std::snprintf(what, sizeof what, "vadd of %u u32: %s, state %s, %lld us", n, right ? "sums correct" : "WRONG",
                std::string(xrtio::to_string(r.state)).c_str(), static_cast<long long>(us));
  report(("vadd #" + std::to_string(id)).c_str(), what, right);
}

awaitable<void> matmul(xrtio::context ctx) {
  constexpr std::uint32_t m = 16, n = 16, k = 32;
  auto a = ctx.alloc(m * k * 4), b = ctx.alloc(k * n * 4), c = ctx.alloc(m * n * 4);
  std::vector<float> va(m * k), vb(k * n), vc(m * n);
  for (std::size_t i = 0; i < va.size(); ++i) va[i] = float(i % 7) - 3;
  for (std::size_t i = 0; i < vb.size(); ++i) vb[i] = float(i % 5) * 0.5f;
  a.write(std::span<const float>(va));
  b.write(std::span<const float>(vb));
  auto [ec, r] = co_await xrtio::async_run(ctx.kernel("matmul"), xrtio::in(a), xrtio::in(b), xrtio::out(c), m, n, k,
                                           as_tuple);
  c.read(std::span<float>(vc));
  bool right = !ec;
  for (std::uint32_t i = 0; i < m && right; ++i)
    for (std::uint32_t j = 0; j < n && right; ++j) {
      float s = 0;
      for (std::uint32_t p = 0; p < k; ++p) s += va[i * k + p] * vb[p * n + j];
      right = s == vc[i * n + j];
    }
  report("matmul", "16x32 * 32x16 f32 against a host reference", right);
}

awaitable<void> checksum(xrtio::context ctx) {
  std::string text = "xrtio: accelerator runs you can co_await";
  auto in = ctx.alloc(text.size()), out = ctx.alloc(8);
  in.write(std::as_bytes(std::span(text)));
  auto [ec, r] = co_await xrtio::async_run(ctx.kernel("checksum"), xrtio::in(in), xrtio::out(out),
                                           std::uint32_t(text.size()), as_tuple);
  std::uint64_t got = 0, want = 0xcbf29ce484222325ull;
  out.read(std::span<std::uint64_t>(&got, 1));
  for (unsigned char ch : text) want = (want ^ ch) * 0x100000001b3ull;
  char what[128];
  std::snprintf(what, sizeof what, "FNV-1a of %zu bytes = %016llx", text.size(), static_cast<unsigned long long>(got));
  report("checksum", what, !ec && got == want);
}

awaitable<void> times_out(xrtio::context ctx) {
  auto buf = ctx.alloc(64);
  auto [ec, r] = co_await xrtio::async_run(ctx.kernel("scale"), xrtio::in(buf), xrtio::out(buf.sub(32, 32)), 2.0f,
                                           std::uint32_t{8}, xrtio::run_options{.timeout = 20ms}, as_tuple);
  std::string what = "hung kernel, 20 ms deadline: " + ec.message() + ", state " + std::string(xrtio::to_string(r.state));
  report("scale (hangs)", what.c_str(), ec == xrtio::errc::timed_out);
}

awaitable<void> raced(xrtio::context ctx) {
  auto buf = ctx.alloc(64), out = ctx.alloc(8);
  asio::steady_timer timer(co_await asio::this_coro::executor, 10ms);
  auto winner = co_await (xrtio::async_run(ctx.kernel("checksum"), xrtio::in(buf), xrtio::out(out), std::uint32_t{64},
                                           use_awaitable) ||
                          timer.async_wait(use_awaitable));
  report("checksum (slow)", "raced against a 10 ms timer: the timer won, the run was aborted", winner.index() == 1);
}

awaitable<void> refused(xrtio::context ctx) {
  auto buf = ctx.alloc(4096), out = ctx.alloc(8);
  auto [ec, r] = co_await xrtio::async_run(ctx.kernel("checksum"), xrtio::in(buf), xrtio::out(out), std::uint32_t{16},
                                           xrtio::run_options{.timeout = 15ms}, as_tuple);
  std::string what = "device refused the abort: " + ec.message();
  report("checksum (stuck)", what.c_str(), ec == xrtio::errc::abort_failed);
  try {
    std::byte zero[8]{};
    out.write(zero);
    report("", "host write to the retained buffer", false);
  } catch (const xrtio::error& e) {
    report("", "host write to the retained buffer refused (range_retained)", e.code() == xrtio::errc::range_retained);
  }
}
}  // namespace

int main() {
  xrtio::sim::device_config cfg;
  cfg.compute_units = 2;
  cfg.latency = {.fixed = 200us, .ns_per_byte = 0.05, .jitter = 100us, .seed = 42};
  auto device = xrtio::sim::make_device(cfg);
  xrtio::memory_budget budget(64 << 20);
  xrtio::context ctx(device, budget);
  xrtio::runtime rt;
  ctx.bind(rt);
  std::printf("xrtio demo on the simulated device: %s, budget %zu MiB\n", device->name().c_str(),
              budget.ceiling() >> 20);

  // Run numbers are counted on the device in submission order: the scale
  // run (9th) hangs, the first checksum after it (10th) is slow, and the
  // next (11th) hangs and refuses to abort.
  device->add_fault({.kernel = "scale", .run_number = 0, .what = xrtio::sim::fault::hang});
  device->add_fault({.kernel = "checksum", .run_number = 11, .what = xrtio::sim::fault::refuse_abort});
  device->add_fault({.kernel = "checksum", .run_number = 10, .what = xrtio::sim::fault::hang});

  asio::io_context io;
  std::printf("\n11 coroutines on one io_context thread:\n");
  for (int i = 0; i < 6; ++i) asio::co_spawn(io, vector_add(ctx, i, 1024u << i), asio::detached);
  asio::co_spawn(io, matmul(ctx), asio::detached);
  asio::co_spawn(io, checksum(ctx), asio::detached);
  asio::co_spawn(io, times_out(ctx), asio::detached);
  asio::co_spawn(io, raced(ctx), asio::detached);
  asio::co_spawn(io, refused(ctx), asio::detached);
  io.run();

  auto s = rt.stats();
  auto d = device->stats();
  std::printf("\nreactor: submitted %llu, completed %llu, failed %llu, timed out %llu, cancelled %llu, retained %llu, "
              "in flight %llu\n",
              (unsigned long long)s.submitted, (unsigned long long)s.completed, (unsigned long long)s.failed,
              (unsigned long long)s.timed_out, (unsigned long long)s.cancelled, (unsigned long long)s.retained,
              (unsigned long long)s.in_flight);
  std::printf("         polls %llu, wake-ups %llu, sleeps %llu, batches %llu, wait primitive %s\n",
              (unsigned long long)s.polls, (unsigned long long)s.wakeups, (unsigned long long)s.sleeps,
              (unsigned long long)s.batches, s.io_uring ? "io_uring" : "eventfd + ppoll");
  std::printf("device:  started %llu, completed %llu, aborted %llu, abort refused %llu\n",
              (unsigned long long)d.started, (unsigned long long)d.completed, (unsigned long long)d.aborted,
              (unsigned long long)d.abort_refused);
  std::printf("budget:  %zu bytes in use (the retained run keeps its buffers)\n", budget.used());
  std::printf("retained runs in this process: %zu\n", xrtio::retained_runs());
  if (failures) std::printf("\n%d UNEXPECTED outcomes\n", failures);
  else std::printf("\nall outcomes as expected\n");
  return failures ? 1 : 0;
}
