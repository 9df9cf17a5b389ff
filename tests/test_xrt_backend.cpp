// The XRT backend against XRT's own no-op device (docs/DESIGN.md, "Testing without hardware"). Every case
// sets the device up itself (use_noop_device, idempotent) and synthesizes its
// xclbins with xrtio-mkxclbin, so each runs alone under CTest.
//
// Not testable here — the no-op device completes every run after a fixed
// delay, never executes the kernel, ignores wait() timeouts and turns
// abort() into "wait until completed" — so these are covered only on the
// simulator (tests/test_sim.cpp, tests/test_sync_run.cpp, the reactor
// suites), and listed in docs/TOOLS.md:
//   - a refused abort and the retained run (invariant 5), except an abort that
//     throws, which tests/test_xrt_hook.cpp makes through the backend's seam;
//   - a hung run, run_options::timeout / wait(timeout) aborting it (invariant 4);
//   - final states other than COMPLETED (ERROR, ABORT, TIMEOUT, NORESPONSE...);
//   - device loss;
//   - kernel results (the no-op device leaves outputs untouched).
#include <doctest/doctest.h>
#include <xrtio/xrt_native.hpp>
#include <ert.h>  // the command packet (a run's state memory)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <string>
#include <algorithm>
#include <thread>
#include <vector>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>

#include "introspection.hpp"
#include "xrtio/async_run.hpp"
#include "xrtio/error.hpp"
#include "xrtio/run.hpp"
#include "xrtio/runtime.hpp"
#include "xrtio/sim.hpp"
#include "xrtio/xrt.hpp"

using namespace std::chrono_literals;
namespace xb = xrtio::xrt_backend;
using xrtio::errc;

namespace {

void setup() { xb::use_noop_device(20us); }

const std::string& scratch() {
  static const std::string dir = [] {
    std::string t = "/tmp/xrtio-test-xrt-XXXXXX";
    if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    return t;
  }();
  return dir;
}

std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

// Synthesizes an xclbin from `desc` (empty: the --vadd preset).
std::string make_xclbin(const std::string& name, const std::string& desc = {}) {
  std::string out = scratch() + "/" + name + ".xclbin";
  std::string cmd = std::string(XRTIO_MKXCLBIN) + " ";
  if (desc.empty()) {
    cmd += "--vadd";
  } else {
    std::string txt = scratch() + "/" + name + ".txt";
    std::ofstream(txt) << desc;
    cmd += shell_quote(txt);
  }
  cmd += " -o " + shell_quote(out);
  int rc = std::system(cmd.c_str());
  REQUIRE_MESSAGE(rc == 0, "xrtio-mkxclbin failed: " << cmd);
  return out;
}

const std::string& vadd_path() {
  static const std::string p = make_xclbin("vadd");
  return p;
}

const char* two_kernels = R"(
bank ddr0 size=256M
bank ddr1 size=256M
bank spare size=64M unused
kernel vadd
cu vadd_1
cu vadd_2
arg a buffer int* ddr0
arg b buffer int* ddr0
arg c buffer int* ddr1
arg n scalar uint 4
kernel scale
cu scale_1
arg in buffer float* ddr1
arg out buffer float* ddr1
arg factor scalar float 4
arg n scalar uint 4
arg big scalar ulong 8
)";

xrtio::context open_vadd(std::optional<xrtio::memory_budget> budget = std::nullopt) {
  setup();
  return xb::open({.xclbin_path = vadd_path()}, budget);
}

template <class F>
errc code_of(F&& f) {
  try {
    f();
  } catch (const xrtio::error& e) {
    if (e.code().category() == xrtio::error_category()) return static_cast<errc>(e.code().value());
    FAIL("non-xrtio error code: " << e.what());
  } catch (const std::exception& e) {
    FAIL("not an xrtio::error: " << e.what());
  }
  return errc{};
}

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

std::vector<char> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string write_bytes(const std::string& name, const std::vector<char>& bytes) {
  std::string p = scratch() + "/" + name;
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return p;
}

}  // namespace

TEST_CASE("xrt: open loads a synthesized vadd and reports its arguments and group ids") {
  auto ctx = open_vadd();
  REQUIRE(ctx);
  CHECK(ctx.native().kernel_names() == std::vector<std::string>{"vadd"});
  auto k = ctx.kernel("vadd");
  REQUIRE(k.args().size() == 4);
  const char* names[] = {"a", "b", "c", "n"};
  for (unsigned i = 0; i < 4; ++i) CHECK(k.args()[i].name == names[i]);
  for (unsigned i = 0; i < 3; ++i) {
    CHECK(k.args()[i].kind == xrtio::backend::arg_kind::buffer);
    CHECK(k.args()[i].size == 0);
    CHECK(k.group_id(i) == 0);
  }
  CHECK(k.args()[3].kind == xrtio::backend::arg_kind::scalar);
  CHECK(k.args()[3].size == 4);
  auto* dev = &xb::device_of(ctx);  // checked access
  CHECK(dev == dynamic_cast<xb::device*>(&ctx.native()));
  CHECK(static_cast<bool>(xb::native_xrt_device(ctx)));  // XRT's own device object
  CHECK(code_of([] { (void)xb::device_of(xrtio::sim::open()); }) == errc::not_supported);
  CHECK(code_of([] { (void)xb::native_xrt_device(xrtio::context()); }) == errc::not_supported);
  CHECK(dev->index() == 0);
  CHECK(dev->xclbin().kernels.size() == 1);
  CHECK(dev->xclbin().kernels[0].compute_units.size() == 1);
#if __has_include(<xrt/xrt_hw_context.h>) || __has_include(<experimental/xrt_hw_context.h>)
  CHECK(dev->uses_hw_context());
#else
  CHECK_FALSE(dev->uses_hw_context());  // Debian's XRT 2.13 has no hw_context
#endif
  CHECK(ctx.native().name().find("noop") != std::string::npos);
}

#ifdef XRTIO_SAMPLE_XCLBIN
TEST_CASE("xrt: the sample xclbin and the synthesized vadd load and behave the same") {
  setup();
  auto mine = xb::open({.xclbin_path = vadd_path()});
  auto sample = xb::open({.xclbin_path = XRTIO_SAMPLE_XCLBIN});
  auto km = mine.kernel("vadd"), ks = sample.kernel("vadd");
  REQUIRE(km.args().size() == ks.args().size());
  for (unsigned i = 0; i < km.args().size(); ++i) {
    CHECK(km.args()[i].name == ks.args()[i].name);
    CHECK(km.args()[i].kind == ks.args()[i].kind);
    CHECK(km.args()[i].size == ks.args()[i].size);
    CHECK(km.args()[i].group_id == ks.args()[i].group_id);
  }
  auto im = dynamic_cast<xb::device&>(mine.native()).xclbin();
  auto is = dynamic_cast<xb::device&>(sample.native()).xclbin();
  REQUIRE(im.kernels.size() == 1);
  REQUIRE(is.kernels.size() == 1);
  for (unsigned i = 0; i < 4; ++i) {
    CHECK(im.kernels[0].args[i].type == is.kernels[0].args[i].type);
    CHECK(im.kernels[0].args[i].offset == is.kernels[0].args[i].offset);
    CHECK(im.kernels[0].args[i].port == is.kernels[0].args[i].port);
  }
  CHECK(im.kernels[0].compute_units[0].name == is.kernels[0].compute_units[0].name);
  CHECK(im.kernels[0].compute_units[0].base_address == is.kernels[0].compute_units[0].base_address);
  REQUIRE(im.banks.size() == is.banks.size());
  CHECK(im.banks[0].tag == is.banks[0].tag);
  CHECK(im.banks[0].size_bytes == is.banks[0].size_bytes);
  CHECK(im.platform == is.platform);
  for (auto* c : {&mine, &sample}) {
    auto k = c->kernel("vadd");
    auto a = c->alloc(4096, {.group_id = k.group_id(0)});
    auto b = c->alloc(4096, {.group_id = k.group_id(1)});
    auto out = c->alloc(4096, {.group_id = k.group_id(2)});
    auto r = xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(out), std::uint32_t{1024}).wait(5s);
    CHECK(r.state == xrtio::run_state::completed);
  }
}
#endif

TEST_CASE("xrt: buffers map host memory, write and read round-trip") {
  auto ctx = open_vadd();
  auto b = ctx.alloc(64 * 1024);
  std::vector<std::uint32_t> in(16 * 1024), out(16 * 1024);
  std::iota(in.begin(), in.end(), 7u);
  b.write(std::span<const std::uint32_t>(in));
  b.read(std::span<std::uint32_t>(out));
  CHECK(in == out);
  // (What sync hands XRT, and its failures: tests/test_xrt_hook.cpp.)
  CHECK(b.map().size() == 64 * 1024);
  CHECK(xtest::state(b)->native->address() != 0);
}

TEST_CASE("xrt: sub-buffers are views of their parent's memory") {
  auto ctx = open_vadd();
  auto root = ctx.alloc(64 * 1024);
  auto view = root.sub(8192, 16384);
  CHECK(view.is_view());
  CHECK(view.size() == 8192);
  CHECK(view.offset() == 16384);
  CHECK(xtest::state(view)->native->address() == xtest::state(root)->native->address() + 16384);
  std::vector<std::byte> pattern(8192, std::byte{0x5a});
  view.write(std::span<const std::byte>(pattern));
  std::vector<std::byte> back(8192);
  root.read(std::span<std::byte>(back), 16384);
  CHECK(back == pattern);
  auto inner = view.sub(4096, 4096);  // a view of a view: absolute offset 20480
  CHECK(inner.offset() == 20480);
  CHECK(xtest::state(inner)->native->address() == xtest::state(root)->native->address() + 20480);
  CHECK(code_of([&] { (void)root.sub(8192, 60 * 1024); }) == errc::out_of_range);
  CHECK(code_of([&] { (void)root.sub(0, 0); }) == errc::invalid_size);
  // A view keeps the root alive.
  root = {};
  std::vector<std::byte> again(4096);
  inner.read(std::span<std::byte>(again));
  CHECK(again == std::vector<std::byte>(4096, std::byte{0x5a}));
}

TEST_CASE("xrt: group ids follow connectivity and alloc checks them against the memory topology") {
  setup();
  auto ctx = xb::open({.xclbin_path = make_xclbin("two", two_kernels)});
  auto names = ctx.native().kernel_names();
  CHECK(names == std::vector<std::string>{"scale", "vadd"});
  auto v = ctx.kernel("vadd");
  CHECK(v.group_id(0) == 0);
  CHECK(v.group_id(1) == 0);
  CHECK(v.group_id(2) == 1);
  auto s = ctx.kernel("scale");
  CHECK(s.group_id(0) == 1);
  CHECK(s.args()[4].size == 8);
  CHECK(code_of([&] { (void)v.group_id(9); }) == errc::out_of_range);
  CHECK(ctx.alloc(4096, {.group_id = 1}).size() == 4096);
  auto bad_bank = message_of([&] { (void)ctx.alloc(4096, {.group_id = 7}); });
  CHECK(bad_bank.find("group id 7") != std::string::npos);
  CHECK(code_of([&] { (void)ctx.alloc(4096, {.group_id = 7}); }) == errc::out_of_range);
  CHECK(code_of([&] { (void)ctx.alloc(4096, {.group_id = 2}); }) == errc::out_of_range);  // declared unused
  CHECK(code_of([&] { (void)ctx.alloc(4096, {.group_id = -1}); }) == errc::out_of_range);
  // Bits 16-23 (xclbin slot) are not part of the bank.
  CHECK(ctx.alloc(4096, {.group_id = (1 << 16) | 1}).size() == 4096);
  auto dev = dynamic_cast<xb::device&>(ctx.native()).xclbin();
  REQUIRE(dev.kernels.size() == 2);
  CHECK(dev.kernels[1].name == "vadd");
  CHECK(dev.kernels[1].compute_units.size() == 2);
}

TEST_CASE("xrt: runs on a multi-kernel, multi-cu xclbin complete") {
  setup();
  auto ctx = xb::open({.xclbin_path = make_xclbin("two", two_kernels)});
  auto v = ctx.kernel("vadd");
  auto s = ctx.kernel("scale");
  auto a = ctx.alloc(4096, {.group_id = 0}), b = ctx.alloc(4096, {.group_id = 0});
  auto c = ctx.alloc(4096, {.group_id = 1}), d = ctx.alloc(4096, {.group_id = 1});
  auto e = ctx.alloc(4096, {.group_id = s.group_id(0)});
  // Buffers in the banks the compute units are connected to: XRT 2.13 would
  // otherwise (with a warning) run the kernel on a copy in the right bank.
  for (int i = 0; i < 50; ++i) {
    auto r1 = xrtio::start(v, xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{16});
    auto r2 = xrtio::start(s, xrtio::in(e), xrtio::out(d), 2.0f, std::uint32_t{16}, std::uint64_t{1});
    CHECK(r1.wait(5s).ok());
    CHECK(r2.wait(5s).ok());
  }
}

TEST_CASE("xrt: device_only buffers have no host mapping") {
  auto ctx = open_vadd();
  auto b = ctx.alloc(4096, {.kind = xrtio::backend::buffer_kind::device_only});
  CHECK(code_of([&] { (void)b.map(); }) == errc::not_supported);
  std::vector<std::byte> x(16);
  CHECK(code_of([&] { b.write(std::span<const std::byte>(x)); }) == errc::not_supported);
  auto h = ctx.alloc(4096, {.kind = xrtio::backend::buffer_kind::host_only});
  CHECK(h.map().size() == 4096);
}

TEST_CASE("xrt: a memory budget is charged before allocation and released after destruction") {
  xrtio::memory_budget budget(64 * 1024);
  auto ctx = open_vadd(budget);
  auto a = ctx.alloc(32 * 1024);
  CHECK(budget.used() == 32 * 1024);
  CHECK(code_of([&] { (void)ctx.alloc(40 * 1024); }) == errc::budget_exceeded);
  CHECK(budget.used() == 32 * 1024);
  auto v = a.sub(4096, 0);  // views are not charged again
  CHECK(budget.used() == 32 * 1024);
  // A failed native allocation gives its charge back.
  CHECK(code_of([&] { (void)ctx.alloc(4096, {.group_id = 9}); }) == errc::out_of_range);
  CHECK(budget.used() == 32 * 1024);
  a = {};
  CHECK(budget.used() == 32 * 1024);  // the view still holds the root
  v = {};
  CHECK(budget.used() == 0);
  CHECK(code_of([&] { (void)ctx.alloc(0); }) == errc::invalid_size);
}

TEST_CASE("xrt: user memory is imported without copy, misaligned memory is refused") {
  auto ctx = open_vadd();
  void* p = std::aligned_alloc(4096, 8192);
  REQUIRE(p);
  {
    auto b = ctx.import_user_memory(p, 8192);
    CHECK(b.is_imported());
    CHECK(static_cast<void*>(b.map().data()) == p);
    static_cast<unsigned char*>(p)[100] = 42;
    std::vector<std::byte> x(1);
    b.read(std::span<std::byte>(x), 100);
    CHECK(x[0] == std::byte{42});
    auto k = ctx.kernel("vadd");
    auto c = ctx.alloc(8192);
    CHECK(xrtio::start(k, xrtio::in(b), xrtio::in(b), xrtio::out(c), std::uint32_t{4}).wait(5s).ok());
  }
  CHECK(code_of([&] { (void)ctx.import_user_memory(static_cast<char*>(p) + 8, 4096); }) == errc::misaligned);
  std::free(p);
}

TEST_CASE("xrt: importing something that is not a dma-buf fails cleanly") {
  auto ctx = open_vadd();
  int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(code_of([&] { (void)ctx.import_dmabuf(fd, 4096); }) == errc::backend_failure);
  ::close(fd);
  CHECK(code_of([&] { (void)ctx.import_dmabuf(-1, 4096); }) == errc::invalid_size);
}

TEST_CASE("xrt: start and wait complete a run") {
  auto ctx = open_vadd();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096), b = ctx.alloc(4096), c = ctx.alloc(4096);
  auto h = xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{1024});
  auto r = h.wait(5s);
  CHECK(r.state == xrtio::run_state::completed);
  CHECK(r.ok());
  CHECK(r.observed >= r.submitted);
  CHECK(h.state() == xrtio::run_state::completed);
}

TEST_CASE("xrt: 10000 runs complete without failure") {
  auto ctx = open_vadd();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096), b = ctx.alloc(4096), c = ctx.alloc(4096);
  int ok = 0;
  for (int i = 0; i < 10000; ++i) {
    std::error_code ec;
    auto r = xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t(i)).wait(5s, ec);
    if (!ec && r.state == xrtio::run_state::completed) ++ok;
  }
  CHECK(ok == 10000);
}

TEST_CASE("xrt: runs from several threads complete without failure") {
  auto ctx = open_vadd();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096);  // shared, read-only
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      auto b = ctx.alloc(4096), c = ctx.alloc(4096);
      for (int i = 0; i < 1000; ++i) {
        std::error_code ec;
        auto r = xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{4}).wait(5s, ec);
        if (!ec && r.ok()) ++ok;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(ok == 4000);
}

// XRT 2.13's no-op driver keeps every buffer object (a user's, and each run's
// command buffer) in one map, and erases from it in xclFreeBO without its
// lock, while its completion thread and other callers look handles up in it
// (docs/DESIGN.md, "The no-op driver's buffer map"). Before xrtio serialized
// those calls, this crashed in std::_Rb_tree_rebalance_for_erase, threw "no
// such bo handle" or left a run that never completed. Everything here goes
// through xrtio's public API, as a server on the no-op device does: buffers
// made and dropped per request on some threads while others start runs.
// Only one device's runs are waited for in XRT (xrt::run::wait): the driver
// counts completions process-wide, and waits blocked on two devices at once
// can take each other's and wait forever (docs/DESIGN.md, "Testing without
// hardware"); the other devices' runs are polled.
TEST_CASE("xrt: buffers and runs made and freed on several threads at once do not break the no-op driver") {
  auto ctx = open_vadd();
  setup();
  // No run pool: every finished run is destroyed, and so is its command buffer once XRT's own
  // cache of them (128) is full.
  auto unpooled = xb::open({.xclbin_path = vadd_path(), .run_pool_size = 0});
  auto k = ctx.kernel("vadd");
  auto uk = unpooled.kernel("vadd");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int rounds = 300;  // sanitizers: fewer, same calls
#else
  constexpr int rounds = 2000;
#endif
  std::atomic<int> ok{0}, failed{0};
  std::mutex first_mutex;
  std::string first_error;
  auto failure = [&](const std::string& what) {
    ++failed;
    std::lock_guard lock(first_mutex);
    if (first_error.empty()) first_error = what;
  };
  auto guarded = [&](auto body) {
    return [&, body] {
      try {
        body();
      } catch (const std::exception& e) {
        failure(e.what());
      }
    };
  };
  std::vector<std::thread> threads;
  // Requests: fresh buffers per run, dropped as soon as the run ended.
  for (int t = 0; t < 2; ++t)
    threads.emplace_back(guarded([&] {
      std::vector<std::uint32_t> in(1024, 3);
      for (int i = 0; i < rounds; ++i) {
        auto a = ctx.alloc(4096), b = ctx.alloc(4096), c = ctx.alloc(4096);
        a.write(std::span<const std::uint32_t>(in));
        std::error_code ec;
        auto r = xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{1024}).wait(5s, ec);
        if (!ec && r.ok())
          ++ok;
        else
          failure("run: " + ec.message());
      }
    }));
  // Buffers of every kind, views and imports, with no run.
  threads.emplace_back(guarded([&] {
    void* user = std::aligned_alloc(4096, 8192);
    if (!user) throw std::runtime_error("aligned_alloc failed");
    for (int i = 0; i < rounds * 2; ++i) {
      auto a = ctx.alloc(4096 * (1 + i % 4));
      auto v = a.sub(4096, 0);
      auto h = ctx.alloc(4096, {.kind = xrtio::backend::buffer_kind::host_only});
      auto d = ctx.alloc(8192, {.kind = xrtio::backend::buffer_kind::device_only});
      auto u = ctx.import_user_memory(user, 8192);
      (void)xtest::state(v)->native->address();
    }
    std::free(user);
  }));
  // Runs made and destroyed: 160 at once, more than XRT caches command buffers for.
  threads.emplace_back(guarded([&] {
    std::uint32_t n = 4;
    auto a = unpooled.alloc(4096);
    for (int i = 0; i < rounds / 40; ++i) {
      std::vector<xrtio::backend::native_run_ptr> runs;
      for (int j = 0; j < 160; ++j) {
        runs.push_back(uk.native().make_run());
        for (unsigned arg = 0; arg < 3; ++arg) runs.back()->set_arg(arg, *xtest::state(a)->native);
        runs.back()->set_arg(3, &n, 4);
        runs.back()->start();
      }
      for (auto& r : runs) {
        auto s = r->state();
        while (!xrtio::is_final(s)) {
          std::this_thread::yield();
          s = r->state();
        }
        if (s == xrtio::run_state::completed)
          ++ok;
        else
          failure("a native run ended " + std::string(xrtio::to_string(s)));
      }
    }
  }));
  // Contexts (a device, a kernel, their runs) opened and closed.
  threads.emplace_back(guarded([&] {
    for (int i = 0; i < rounds / 100; ++i) {
      auto c = xb::open({.xclbin_path = vadd_path()});
      auto kk = c.kernel("vadd");
      auto a = c.alloc(4096);
      auto h = xrtio::start(kk, xrtio::in(a), xrtio::in(a), xrtio::out(c.alloc(4096)), 4u);
      while (!xrtio::is_final(h.state())) std::this_thread::yield();
      if (h.wait(5s).ok())
        ++ok;
      else
        failure("a run in a fresh context failed");
    }
  }));
  for (auto& t : threads) t.join();
  INFO("first failure: " << first_error);
  CHECK(failed == 0);
  CHECK(ok == 2 * rounds + (rounds / 40) * 160 + rounds / 100);
}

TEST_CASE("xrt: leases are held until the run's final state was observed") {
  auto ctx = open_vadd();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096), b = ctx.alloc(4096), c = ctx.alloc(4096);
  std::vector<std::byte> x(16);
  auto h = xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{4});
  // Even if the device finished already, nothing was observed yet: the
  // output stays leased to the run, and host access is refused.
  CHECK(code_of([&] { c.write(std::span<const std::byte>(x)); }) == errc::range_in_use);
  CHECK(code_of([&] { c.sub(16, 0).read(std::span<std::byte>(x)); }) == errc::range_in_use);
  CHECK(code_of([&] { (void)xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{4}); }) ==
        errc::range_in_use);
  // Readers share: a second run reading `a` and `b` is fine.
  auto d = ctx.alloc(4096);
  auto h2 = xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(d), std::uint32_t{4});
  CHECK(h.wait(5s).ok());
  CHECK(h2.wait(5s).ok());
  c.write(std::span<const std::byte>(x));  // released
  // A handle dropped without wait(): on this device the abort waits for
  // completion, then the leases go.
  {
    auto h3 = xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{4});
  }
  c.write(std::span<const std::byte>(x));
  CHECK(xrtio::retained_runs() == 0);
}

TEST_CASE("xrt: a missing xclbin is errc::invalid_xclbin naming the path") {
  setup();
  std::string p = scratch() + "/does-not-exist.xclbin";
  CHECK(code_of([&] { (void)xb::open({.xclbin_path = p}); }) == errc::invalid_xclbin);
  CHECK(message_of([&] { (void)xb::open({.xclbin_path = p}); }).find(p) != std::string::npos);
  CHECK(code_of([&] { (void)xb::open({.xclbin_path = ""}); }) == errc::invalid_xclbin);
  CHECK(code_of([&] { (void)xb::open({.xclbin_path = scratch()}); }) == errc::invalid_xclbin);  // a directory
}

TEST_CASE("xrt: a truncated xclbin is errc::invalid_xclbin") {
  setup();
  auto bytes = slurp(vadd_path());
  REQUIRE(bytes.size() > 1000);
  for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{300}, std::size_t{496}, std::size_t{700},
                        bytes.size() - 1}) {
    auto p = write_bytes("trunc-" + std::to_string(n) + ".xclbin", {bytes.begin(), bytes.begin() + long(n)});
    auto what = message_of([&] { (void)xb::open({.xclbin_path = p}); });
    CAPTURE(n);
    CAPTURE(what);
    CHECK(code_of([&] { (void)xb::open({.xclbin_path = p}); }) == errc::invalid_xclbin);
    CHECK(what.find(p) != std::string::npos);
  }
}

TEST_CASE("xrt: a corrupt xclbin is errc::invalid_xclbin, never a crash") {
  setup();
  auto good = slurp(vadd_path());
  std::mt19937 rng(12345);
  std::vector<char> noise(4096);
  for (auto& c : noise) c = static_cast<char>(rng());
  auto check = [&](const std::string& name, const std::vector<char>& bytes) {
    auto p = write_bytes(name, bytes);
    CAPTURE(name);
    CAPTURE(message_of([&] { (void)xb::open({.xclbin_path = p}); }));
    CHECK(code_of([&] { (void)xb::open({.xclbin_path = p}); }) == errc::invalid_xclbin);
    CHECK(code_of([&] { (void)xb::inspect_xclbin(p); }) == errc::invalid_xclbin);
  };
  check("random.xclbin", noise);
  auto with = [&](std::size_t at, const void* v, std::size_t n) {
    auto b = good;
    std::memcpy(b.data() + at, v, n);
    return b;
  };
  // Section offsets and sizes live in the section headers from byte 456:
  // {u32 kind, char[16] name, 4 pad, u64 offset, u64 size}.
  std::uint64_t huge = 1ull << 40;
  check("section-offset.xclbin", with(456 + 24, &huge, 8));
  check("section-size.xclbin", with(456 + 32, &huge, 8));
  std::uint32_t many = 100000;
  check("section-count.xclbin", with(304 + 144, &many, 4));
  // MEM_TOPOLOGY count (first section) claiming more entries than it holds.
  std::uint64_t mem_at;
  std::memcpy(&mem_at, good.data() + 456 + 24, 8);
  std::int32_t count = 1000;
  check("mem-count.xclbin", with(mem_at, &count, 4));
  // Garbage in the XML.
  std::uint64_t xml_at;
  std::memcpy(&xml_at, good.data() + 456 + 3 * 40 + 24, 8);
  check("bad-xml.xclbin", with(xml_at, "<<<<<<<<<<", 10));
  // Wrong magic.
  check("magic.xclbin", with(0, "xclbin1", 8));
}

TEST_CASE("xrt: an unknown kernel is errc::unknown_kernel listing the loaded ones") {
  auto ctx = open_vadd();
  CHECK(code_of([&] { (void)ctx.kernel("vmul"); }) == errc::unknown_kernel);
  auto what = message_of([&] { (void)ctx.kernel("vmul"); });
  CHECK(what.find("vmul") != std::string::npos);
  CHECK(what.find("vadd") != std::string::npos);
  auto two = make_xclbin("two", two_kernels);
  CHECK(code_of([&] { (void)xb::open({.xclbin_path = two, .kernel_filter = "nope"}); }) == errc::unknown_kernel);
  auto only = xb::open({.xclbin_path = two, .kernel_filter = "scale"});
  CHECK(only.native().kernel_names() == std::vector<std::string>{"scale"});
  CHECK(code_of([&] { (void)only.kernel("vadd"); }) == errc::unknown_kernel);
  CHECK(only.kernel("scale").args().size() == 5);
}

TEST_CASE("xrt: wrong argument counts and kinds are refused before the device sees them") {
  auto ctx = open_vadd();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096), b = ctx.alloc(4096), c = ctx.alloc(4096);
  CHECK(code_of([&] { (void)xrtio::start(k, a, b); }) == errc::argument_count);
  CHECK(code_of([&] { (void)xrtio::start(k, a, b, c, std::uint32_t{1}, std::uint32_t{2}); }) == errc::argument_count);
  CHECK(code_of([&] { (void)xrtio::start(k, a, b, c, 1.0); }) == errc::argument_kind);  // 8-byte scalar for 4
  CHECK(code_of([&] { (void)xrtio::start(k, a, b, std::uint32_t{1}, std::uint32_t{1}); }) == errc::argument_kind);
  CHECK(code_of([&] { (void)xrtio::start(k, a, b, c, c); }) == errc::argument_kind);
  // Nothing was leased by the refused starts.
  std::vector<std::byte> x(16);
  c.write(std::span<const std::byte>(x));
  // The backend checks too, for callers of the seam.
  auto run = k.native().make_run();
  std::uint32_t n = 4;
  CHECK(code_of([&] { run->set_arg(3, *xtest::state(a)->native); }) == errc::argument_kind);
  CHECK(code_of([&] { run->set_arg(0, &n, 4); }) == errc::argument_kind);
  CHECK(code_of([&] { run->set_arg(3, &n, 2); }) == errc::argument_kind);
  CHECK(code_of([&] { run->set_arg(4, &n, 4); }) == errc::argument_count);
  run->set_arg(0, *xtest::state(a)->native);
  CHECK(code_of([&] { run->start(); }) == errc::argument_count);  // b, c, n not set
}

TEST_CASE("xrt: buffers of another context are refused unless cross_context") {
  setup();
  auto one = xb::open({.xclbin_path = vadd_path()});
  auto two = xb::open({.xclbin_path = vadd_path()});
  auto k = one.kernel("vadd");
  auto a = one.alloc(4096), b = one.alloc(4096);
  auto foreign = two.alloc(4096);
  CHECK(code_of([&] { (void)xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(foreign), 4u); }) ==
        errc::foreign_context);
  // Same device, buffers allocated on the device: allowed when asked for.
  auto r = xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(foreign), 4u,
                        xrtio::run_options{.cross_context = true})
               .wait(5s);
  CHECK(r.ok());
  // A buffer of another backend is refused even then, by the backend
  // (xrt_run::set_arg's type check), naming the argument.
  auto sim = xrtio::sim::open();
  auto s = sim.alloc(4096);
  try {
    (void)xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(s), 4u, xrtio::run_options{.cross_context = true});
    FAIL("a sim buffer was accepted by an XRT kernel");
  } catch (const xrtio::error& e) {
    CHECK(e.code() == errc::foreign_context);
    CHECK(std::string(e.what()).find("argument 2") != std::string::npos);
    CHECK(std::string(e.what()).find("the buffer is not an XRT buffer") != std::string::npos);
  }
  // A buffer of another XRT device index is refused by the backend.
  auto other = xb::open({.device_index = 1, .xclbin_path = vadd_path()});  // the no-op device answers any index
  auto o = other.alloc(4096);
  CHECK(code_of([&] {
          (void)xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(o), 4u, xrtio::run_options{.cross_context = true});
        }) == errc::foreign_context);
  std::vector<std::byte> x(16);
  o.write(std::span<const std::byte>(x));  // the refused start leased nothing
}

TEST_CASE("xrt: native runs: wait_for(0) returns, abort on the no-op device ends COMPLETED, runs are pooled") {
  auto ctx = open_vadd();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096);
  std::uint32_t n = 4;
  auto bind = [&](xrtio::backend::native_run& r) {
    for (unsigned i = 0; i < 3; ++i) r.set_arg(i, *xtest::state(a)->native);
    r.set_arg(3, &n, 4);
  };
  xrtio::backend::native_run* first = nullptr;
  {
    auto r = k.native().make_run();
    first = r.get();
    CHECK(r->state() == xrtio::run_state::new_);
    bind(*r);
    r->start();
    auto s = r->wait_for(0ns);  // XRT's wait(0) would block forever; xrtio passes >= 1 ms
    while (!xrtio::is_final(s)) s = r->wait_for(1ms);
    CHECK(s == xrtio::run_state::completed);
    CHECK(r->state() == xrtio::run_state::completed);
    // Restart the same run: it is final, so allowed.
    r->start();
    CHECK(r->abort() == xrtio::backend::abort_outcome::done);  // the no-op device waits, then reports COMPLETED
    CHECK(r->state() == xrtio::run_state::completed);
  }
  auto again = k.native().make_run();
  CHECK(again.get() == first);  // returned to the kernel's pool
  bind(*again);
  again->start();
  while (!xrtio::is_final(again->state())) std::this_thread::yield();
  CHECK(again->state() == xrtio::run_state::completed);
}

TEST_CASE("xrt: list_devices shows the no-op device") {
  setup();
  auto list = xb::list_devices();
  REQUIRE(list.size() == 1);
  CHECK(list[0].rfind("0: ", 0) == 0);
  CHECK(list[0].find("noop") != std::string::npos);
}

TEST_CASE("xrt: the no-op completion delay cannot change after XRT read it") {
  auto ctx = open_vadd();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096);
  CHECK(xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(ctx.alloc(4096)), 4u).wait(5s).ok());
  xb::use_noop_device(20us);  // same value: fine
  CHECK(code_of([] { xb::use_noop_device(1000us); }) == errc::not_supported);
  CHECK(code_of([] { xb::use_noop_device(-1us); }) == errc::invalid_size);
}

TEST_CASE("xrt: async_run completes runs on the no-op device through the reactor") {
  auto ctx = open_vadd();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096), b = ctx.alloc(4096);
  xrtio::runtime rt;
  asio::io_context io;
  int ok = 0, failed = 0;
  auto worker = [&](xrtio::buffer out) -> asio::awaitable<void> {
    for (int i = 0; i < 500; ++i) {
      auto [ec, r] = co_await xrtio::async_run(k, xrtio::in(a), xrtio::in(b), xrtio::out(out), std::uint32_t{4},
                                               xrtio::run_options{.timeout = 5s, .runtime = &rt},
                                               asio::experimental::as_tuple(asio::use_awaitable));
      (!ec && r.ok()) ? ++ok : ++failed;
    }
  };
  for (int w = 0; w < 4; ++w) asio::co_spawn(io, worker(ctx.alloc(4096)), asio::detached);
  io.run();
  CHECK(ok == 2000);
  CHECK(failed == 0);
  auto st = rt.stats();
  CHECK(st.completed == 2000);
  CHECK(st.retained == 0);
}

TEST_CASE("xrt: 100 000 async runs on the no-op device complete exactly once, resumed on their executor") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int total = 20000;  // sanitizers: fewer, same behaviour
#else
  constexpr int total = 100000;
#endif
  constexpr int workers = 32;
  auto ctx = open_vadd();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096), b = ctx.alloc(4096);
  xrtio::runtime rt;
  asio::io_context io(1);
  std::vector<int> calls(total, 0);
  int ok = 0, failed = 0, wrong_thread = 0;
  std::string first_error;  // says why, should a run ever fail here
  auto io_thread = std::this_thread::get_id();
  auto worker = [&](int w, xrtio::buffer out) -> asio::awaitable<void> {
    for (int i = w; i < total; i += workers) {
      auto [ec, r] = co_await xrtio::async_run(k, xrtio::in(a), xrtio::in(b), xrtio::out(out), std::uint32_t{4},
                                               xrtio::run_options{.timeout = 10s, .runtime = &rt},
                                               asio::experimental::as_tuple(asio::use_awaitable));
      ++calls[i];
      if (std::this_thread::get_id() != io_thread) ++wrong_thread;
      (!ec && r.ok()) ? ++ok : ++failed;
      if ((ec || !r.ok()) && first_error.empty())
        first_error = "run " + std::to_string(i) + ": " + (ec ? ec.message() : "not ok") + ", state " +
                      std::string(xrtio::to_string(r.state));
    }
  };
  for (int w = 0; w < workers; ++w) asio::co_spawn(io, worker(w, ctx.alloc(4096)), asio::detached);
  io.run();
  std::string why = first_error.empty() ? std::string() : "; first: " + first_error;
  MESSAGE(total << " runs: " << ok << " completed, " << failed << " failed" << why);
  CHECK(ok == total);
  CHECK(failed == 0);
  CHECK(wrong_thread == 0);
  CHECK(std::count(calls.begin(), calls.end(), 1) == total);  // every handler exactly once
  auto st = rt.stats();
  CHECK(st.completed == std::uint64_t(total));
  CHECK(st.in_flight == 0);
  CHECK(st.retained == 0);
}

// ---- NPU calling convention (xrtio/xrt.hpp) ------------------------------------
// On an xclbin with the mlir-aie argument layout (xrtio-mkxclbin --npu:
// opcode, instr on bank 1, ninstr, bo0..bo2 on banks 3..5). The no-op device
// does not run the kernel, but XRT writes every argument into the command's
// register map, which command_registers() reads back.

namespace {

const std::string& npu_path() {
  static const std::string p = [] {
    std::string out = scratch() + "/npu.xclbin";
    std::string cmd = std::string(XRTIO_MKXCLBIN) + " --npu -o " + shell_quote(out);
    REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "xrtio-mkxclbin failed: " << cmd);
    return out;
  }();
  return p;
}

struct npu_fixture {
  xrtio::context ctx;
  xrtio::kernel k;
  xb::kernel_info info;
  explicit npu_fixture(std::optional<xrtio::memory_budget> budget = std::nullopt) {
    setup();
    ctx = xb::open({.xclbin_path = npu_path()}, budget);
    k = ctx.kernel("MLIR_AIE");
    info = dynamic_cast<xb::device&>(ctx.native()).xclbin().kernels.at(0);
  }
  // Data buffer i on group_id(3 + i) (host_only, as on an NPU). The no-op
  // device gives every allocation the same device address (0xdeadbeef), and
  // a view root + offset: each data buffer is a view at its own offset, so
  // the register checks below can tell the buffers apart.
  xrtio::buffer data(unsigned i, std::size_t size = 4096) {
    next_offset += 4096;
    auto root = ctx.alloc(next_offset + size,
                          {.kind = xrtio::backend::buffer_kind::host_only, .group_id = k.group_id(3 + i)});
    return root.sub(size, next_offset);
  }
  std::size_t next_offset = 0;
  // The 64-bit value XRT wrote for argument `i` (scalars of 4 bytes: the low word).
  std::uint64_t reg(const std::vector<std::uint32_t>& regs, unsigned i) const {
    auto at = info.args.at(i).offset / 4;
    REQUIRE(at < regs.size());
    std::uint64_t v = regs[at];
    if (info.args.at(i).size == 8) {
      REQUIRE(at + 1 < regs.size());
      v |= std::uint64_t(regs[at + 1]) << 32;
    }
    return v;
  }
  static std::uint64_t address(const xrtio::buffer& b) { return xtest::state(b)->native->address(); }
  // The NPU layout in a start command: opcode 3, the instruction buffer, its
  // word count, then the data buffers in order.
  void check_layout(const std::vector<std::uint32_t>& regs, const xb::npu_instructions& instr,
                    std::initializer_list<const xrtio::buffer*> data) const {
    CHECK(reg(regs, 0) == 3);
    CHECK(reg(regs, 1) == address(instr.buffer));
    CHECK(reg(regs, 2) == instr.words);
    unsigned i = 3;
    for (auto* b : data) CHECK(reg(regs, i++) == address(*b));
  }
};

std::vector<std::uint32_t> instruction_words(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint32_t> w(n);
  for (std::size_t i = 0; i < n; ++i) w[i] = seed * 0x9e3779b1u + std::uint32_t(i);
  return w;
}

}  // namespace

TEST_CASE("xrt npu: xrtio-mkxclbin --npu has the mlir-aie argument layout and group ids") {
  npu_fixture f;
  REQUIRE(f.k.args().size() == 6);
  const char* names[] = {"opcode", "instr", "ninstr", "bo0", "bo1", "bo2"};
  for (unsigned i = 0; i < 6; ++i) CHECK(f.k.args()[i].name == names[i]);
  CHECK(f.k.args()[0].kind == xrtio::backend::arg_kind::scalar);
  CHECK(f.k.args()[0].size == 8);
  CHECK(f.k.args()[1].kind == xrtio::backend::arg_kind::buffer);
  CHECK(f.k.args()[2].kind == xrtio::backend::arg_kind::scalar);
  CHECK(f.k.args()[2].size == 4);
  CHECK(f.k.group_id(1) == 1);
  for (unsigned i = 0; i < 3; ++i) CHECK(f.k.group_id(3 + i) == int(3 + i));
}

TEST_CASE("xrt npu: load_npu_instructions fills a buffer on the kernel's instruction group") {
  npu_fixture f;
  auto words = instruction_words(300, 1);
  auto instr = xb::load_npu_instructions(f.k, words);
  CHECK(instr.words == 300);
  CHECK(instr.buffer.size() == 300 * 4);
  CHECK(xb::group_id_of(instr.buffer) == f.k.group_id(1));
  std::vector<std::uint32_t> back(300);
  instr.buffer.read(std::span<std::uint32_t>(back));
  CHECK(back == words);
  // Charged to the context's budget like any allocation.
  xrtio::memory_budget budget(1024);
  npu_fixture small(budget);
  CHECK(code_of([&] { (void)xb::load_npu_instructions(small.k, words); }) == errc::budget_exceeded);
  CHECK(budget.used() == 0);
}

TEST_CASE("xrt npu: async_run_npu passes opcode 3, the instruction buffer, its word count, then the data buffers") {
  npu_fixture f;
  auto words = instruction_words(64, 2);
  auto instr = xb::load_npu_instructions(f.k, words);
  auto a = f.data(0), b = f.data(1), c = f.data(2);
  xrtio::runtime rt;
  asio::io_context io;
  std::error_code got = errc::backend_failure;
  xrtio::run_result result;
  int calls = 0;
  xb::async_run_npu(f.k, instr, xrtio::in(a), xrtio::in(b), xrtio::out(c), xrtio::run_options{.runtime = &rt},
                    asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result r) {
                      ++calls;
                      got = ec;
                      result = r;
                    }));
  CHECK(calls == 0);  // never inside the initiating function
  io.run();
  REQUIRE(calls == 1);
  CHECK_MESSAGE(!got, got.message());
  CHECK(result.ok());
  // The kernel's pool hands back the run async_run used (its command still
  // holds the arguments it was started with).
  std::set<std::uint64_t> distinct{f.address(instr.buffer), f.address(a), f.address(b), f.address(c)};
  REQUIRE(distinct.size() == 4);  // else the checks below could not tell the arguments apart
  auto run = f.k.native().make_run();
  auto regs = xb::command_registers(*run);
  REQUIRE_MESSAGE(!regs.empty(), "no start-CU register map");
  CHECK(instr.words == 64);
  f.check_layout(regs, instr, {&a, &b, &c});
  // The instruction buffer was read, not written: its contents are intact.
  std::vector<std::uint32_t> back(64);
  instr.buffer.read(std::span<std::uint32_t>(back));
  CHECK(back == words);
}

TEST_CASE("xrt npu: a pooled run's command gets each run's buffers, including a new buffer where a freed one was") {
  // Pooled runs skip rebinding a buffer their command already holds
  // (xrt_run::set_arg): a different buffer at the same argument, or a new
  // one made where a freed one lived, must still reach the registers.
  npu_fixture f;
  auto instr = xb::load_npu_instructions(f.k, instruction_words(16, 4));
  auto a = f.data(0), b = f.data(1), c = f.data(2), d = f.data(2);
  auto regs_after = [&](std::initializer_list<const xrtio::buffer*> data) {
    auto run = f.k.native().make_run();  // the pooled run the start below left
    f.check_layout(xb::command_registers(*run), instr, data);
  };
  REQUIRE(xb::start_npu(f.k, instr, xrtio::in(a), xrtio::in(b), xrtio::out(c)).wait(5s).ok());
  regs_after({&a, &b, &c});
  REQUIRE(xb::start_npu(f.k, instr, xrtio::in(a), xrtio::in(b), xrtio::out(d)).wait(5s).ok());
  regs_after({&a, &b, &d});
  REQUIRE(xb::start_npu(f.k, instr, xrtio::in(a), xrtio::in(b), xrtio::out(c)).wait(5s).ok());
  regs_after({&a, &b, &c});
  for (int i = 0; i < 6; ++i) {
    auto e = f.data(2);  // its native buffer may take the storage the last one freed
    REQUIRE(xb::start_npu(f.k, instr, xrtio::in(a), xrtio::in(b), xrtio::out(e)).wait(5s).ok());
    regs_after({&a, &b, &e});
  }
}

TEST_CASE("xrt npu: runs sharing one instruction buffer do not conflict, start_npu and prepare_npu pass the same") {
  npu_fixture f;
  auto instr = xb::load_npu_instructions(f.k, instruction_words(16, 3));
  auto a = f.data(0), b = f.data(1), c = f.data(2), d = f.data(2);
  // Two runs in flight on one instruction buffer: it is leased read-only.
  auto h1 = xb::start_npu(f.k, instr, xrtio::in(a), xrtio::in(b), xrtio::out(c));
  auto h2 = xb::start_npu(f.k, instr, xrtio::in(a), xrtio::in(b), xrtio::out(d));
  CHECK(h1.wait(5s).ok());
  CHECK(h2.wait(5s).ok());
  // A prepared run binds once: its native run's registers show the layout.
  auto x0 = f.data(0), x1 = f.data(1), x2 = f.data(2);
  auto p = xb::prepare_npu(f.k, instr, xrtio::in(x0), xrtio::in(x1), xrtio::out(x2));
  auto regs = xb::command_registers(*xtest::state(p)->run);
  REQUIRE(!regs.empty());
  CHECK(instr.words == 16);
  f.check_layout(regs, instr, {&x0, &x1, &x2});
  CHECK(f.address(x0) != f.address(a));
  xrtio::runtime rt;
  asio::io_context io;
  std::error_code got = errc::backend_failure;
  xrtio::async_execute(p, xrtio::run_options{.runtime = &rt},
                       asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) { got = ec; }));
  io.run();
  CHECK_MESSAGE(!got, got.message());
}

TEST_CASE("xrt npu: a buffer in another memory group than its argument's is refused with errc::argument_kind") {
  npu_fixture f;
  auto instr = xb::load_npu_instructions(f.k, instruction_words(16, 4));
  auto a = f.data(0), b = f.data(1), c = f.data(2);
  auto wrong = f.data(1);  // group 4, passed as data buffer 0 (group 3)
  CHECK(xb::group_id_of(wrong) == 4);
  CHECK(code_of([&] { (void)xb::start_npu(f.k, instr, xrtio::in(wrong), xrtio::in(b), xrtio::out(c)); }) ==
        errc::argument_kind);
  auto what = message_of([&] { (void)xb::start_npu(f.k, instr, xrtio::in(wrong), xrtio::in(b), xrtio::out(c)); });
  CHECK(what.find("group 4") != std::string::npos);
  CHECK(what.find("group 3") != std::string::npos);
  CHECK(what.find("bo0") != std::string::npos);
  CHECK(code_of([&] { (void)xb::prepare_npu(f.k, instr, a, b, wrong); }) == errc::argument_kind);  // bo2 needs 5
  // An instruction buffer outside group 1.
  xb::npu_instructions misplaced{f.data(0, 64), 16};
  what = message_of([&] { (void)xb::start_npu(f.k, misplaced, xrtio::in(a), xrtio::in(b), xrtio::out(c)); });
  CHECK(code_of([&] { (void)xb::start_npu(f.k, misplaced, xrtio::in(a), xrtio::in(b), xrtio::out(c)); }) ==
        errc::argument_kind);
  CHECK(what.find("instruction buffer") != std::string::npos);
  // Asynchronously: the same code through the handler, exactly once, never
  // inside the initiating function; nothing was leased.
  xrtio::runtime rt;
  asio::io_context io;
  std::vector<std::error_code> got;
  bool initiated = false, inside = false;
  auto handler = [&](std::error_code ec, xrtio::run_result r) {
    inside = inside || !initiated;
    got.push_back(ec);
    CHECK(r.state == xrtio::run_state::new_);  // it never ran
  };
  xb::async_run_npu(f.k, instr, xrtio::in(wrong), xrtio::in(b), xrtio::out(c), xrtio::run_options{.runtime = &rt},
                    asio::bind_executor(io, handler));
  xb::async_run_npu(f.k, misplaced, xrtio::in(a), xrtio::in(b), xrtio::out(c), asio::bind_executor(io, handler));
  initiated = true;
  io.run();
  REQUIRE(got.size() == 2);
  CHECK(got[0] == errc::argument_kind);
  CHECK(got[1] == errc::argument_kind);
  CHECK_FALSE(inside);
  std::vector<std::byte> x(16);
  c.write(std::span<const std::byte>(x));
  // Through co_await too.
  auto co = [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await xb::async_run_npu(f.k, instr, xrtio::in(wrong), xrtio::in(b), xrtio::out(c),
                                              asio::experimental::as_tuple(asio::use_awaitable));
    got.push_back(ec);
  };
  asio::co_spawn(io, co(), asio::detached);
  io.restart();
  io.run();
  REQUIRE(got.size() == 3);
  CHECK(got[2] == errc::argument_kind);
}

TEST_CASE("xrt npu: an empty instruction span, 0 words or too many words are refused") {
  npu_fixture f;
  auto a = f.data(0), b = f.data(1), c = f.data(2);
  CHECK(code_of([&] { (void)xb::load_npu_instructions(f.k, std::span<const std::uint32_t>{}); }) ==
        errc::invalid_size);
  CHECK(message_of([&] { (void)xb::load_npu_instructions(f.k, std::span<const std::uint32_t>{}); })
            .find("no NPU instructions") != std::string::npos);
  auto instr = xb::load_npu_instructions(f.k, instruction_words(16, 5));
  xb::npu_instructions zero{instr.buffer, 0};
  CHECK(code_of([&] { (void)xb::start_npu(f.k, zero, xrtio::in(a), xrtio::in(b), xrtio::out(c)); }) ==
        errc::invalid_size);
  xb::npu_instructions none{};
  CHECK(code_of([&] { (void)xb::start_npu(f.k, none, xrtio::in(a), xrtio::in(b), xrtio::out(c)); }) ==
        errc::invalid_size);
  xb::npu_instructions overlong{instr.buffer, 17};  // 16 words in the buffer
  CHECK(code_of([&] { (void)xb::start_npu(f.k, overlong, xrtio::in(a), xrtio::in(b), xrtio::out(c)); }) ==
        errc::out_of_range);
}

TEST_CASE("xrt npu: kernels without the NPU layout and wrong data counts are refused") {
  npu_fixture f;
  auto instr = xb::load_npu_instructions(f.k, instruction_words(16, 6));
  // vadd: (a, b, c buffers, n scalar).
  auto v = open_vadd();
  auto vk = v.kernel("vadd");
  auto words = instruction_words(4, 7);
  CHECK(code_of([&] { (void)xb::load_npu_instructions(vk, words); }) == errc::argument_kind);
  auto what = message_of([&] { (void)xb::load_npu_instructions(vk, words); });
  CHECK(what.find("argument 0 (a) is a buffer") != std::string::npos);
  // (4096 bytes: XRT 2.13 allocates normal bos with aligned_alloc(4096, size),
  // which ASan rejects for sizes that are not a multiple of 4096.)
  CHECK(code_of([&] { (void)xb::start_npu(vk, instr, v.alloc(4096)); }) == errc::argument_kind);
  // Two data buffers for three: the run's own count check.
  auto a = f.data(0), b = f.data(1);
  CHECK(code_of([&] { (void)xb::start_npu(f.k, instr, xrtio::in(a), xrtio::in(b)); }) == errc::argument_count);
  xrtio::runtime rt;
  asio::io_context io;
  std::error_code got;
  xb::async_run_npu(f.k, instr, xrtio::in(a), xrtio::in(b), xrtio::run_options{.runtime = &rt},
                    asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) { got = ec; }));
  io.run();
  CHECK(got == errc::argument_count);
  // An instruction buffer of another context: the run's foreign-context check.
  npu_fixture other;
  auto foreign = xb::load_npu_instructions(other.k, instruction_words(16, 8));
  CHECK(code_of([&] { (void)xb::start_npu(f.k, foreign, xrtio::in(a), xrtio::in(b), xrtio::out(f.data(2))); }) ==
        errc::foreign_context);
}

TEST_CASE("xrt npu: group_id_of and command_registers on what they do not know") {
  npu_fixture f;
  CHECK(xb::group_id_of(xrtio::buffer{}) == -1);
  auto sim = xrtio::sim::open();
  CHECK(xb::group_id_of(sim.alloc(64)) == -1);
  auto sim_run = sim.kernel("vadd").native().make_run();
  CHECK(xb::command_registers(*sim_run).empty());
  auto view = f.data(1).sub(64, 128);
  CHECK(xb::group_id_of(view) == 4);  // a view: its root's group
  void* p = std::aligned_alloc(4096, 4096);
  REQUIRE(p);
  {
    auto imported = f.ctx.import_user_memory(p, 4096);
    CHECK(xb::group_id_of(imported) == 1);  // the default group: the first bank in use
  }
  std::free(p);
}

TEST_CASE("xrt: a run names the memory its state poll reads, the last being its command packet, and the sim names none") {
  // The reactor fetches these a run ahead of its poll (src/reactor/reactor_scan.cpp,
  // fetch_ahead): wrong addresses would only cost misses, so the test says
  // what they are. The second is XRT's command packet, whose state field
  // the run's final state must be found in.
  auto ctx = open_vadd();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096), b = ctx.alloc(4096), c = ctx.alloc(4096);
  auto run = k.native().make_run();
  REQUIRE(run->state_memory(0) != nullptr);
  REQUIRE(run->state_memory(1) != nullptr);
  CHECK(run->state_memory(0) != run->state_memory(1));
  CHECK(run->state_memory(0) != static_cast<const void*>(run.get()));
  std::uint32_t n = 4;
  run->set_arg(0, *xtest::state(a)->native);
  run->set_arg(1, *xtest::state(b)->native);
  run->set_arg(2, *xtest::state(c)->native);
  run->set_arg(3, &n, sizeof n);
  run->start();
  auto s = run->wait_for(std::chrono::seconds(5));
  REQUIRE(s == xrtio::run_state::completed);
  const auto* packet = static_cast<const ert_packet*>(run->state_memory(1));
  CHECK(packet->state == ERT_CMD_STATE_COMPLETED);
  CHECK(run->state() == xrtio::run_state::completed);

  auto sim_ctx = xrtio::sim::open();
  auto sim_run = sim_ctx.kernel("vadd").native().make_run();
  CHECK(sim_run->state_memory(0) == nullptr);
  CHECK(sim_run->state_memory(1) == nullptr);
}
