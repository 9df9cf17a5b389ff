#include <doctest/doctest.h>

#include "introspection.hpp"
#include "foundation_support.hpp"

// Memory layer: errors, buffers and views, imports, and access tracking
// (docs/DESIGN.md, invariants 6 and 8).

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "xrtio/buffer.hpp"
#include "xrtio/context.hpp"
#include "tracker_request.hpp"
#include "xrtio/detail/access_tracker.hpp"
#include "../src/memory/lease_batch.hpp"
#include "xrtio/error.hpp"
#include "xrtio/run.hpp"
#include "xrtio/sim.hpp"

using namespace std::chrono_literals;
using xrtio::errc;
namespace sim = xrtio::sim;
namespace detail = xrtio::detail;

namespace {

// Runs `f`, which must throw xrtio::error with `want`; returns what().
using ftest::contains;
using ftest::error_of;

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return v;
}

std::vector<std::byte> read_all(const xrtio::buffer& b, std::size_t offset = 0, std::size_t n = 0) {
  std::vector<std::byte> v(n ? n : b.size() - offset);
  b.read(std::span<std::byte>(v), offset);
  return v;
}

sim::device_config hung_vadd() {
  sim::device_config c;
  c.faults.push_back(sim::fault_rule{.kernel = "vadd", .what = sim::fault::hang});
  return c;
}

sim::device_config slow_device(std::chrono::nanoseconds fixed) {
  sim::device_config c;
  c.latency.fixed = fixed;
  return c;
}

}  // namespace

// ---- errors -----------------------------------------------------------------

TEST_CASE("error: category is named xrtio and every errc has its own message") {
  CHECK(std::string(xrtio::error_category().name()) == "xrtio");
  CHECK(xrtio::make_error_code(errc::invalid_size).message() == "invalid size");
  CHECK(xrtio::make_error_code(errc::range_in_use).message() == "range in use by an overlapping access");
  CHECK(xrtio::make_error_code(errc::budget_exceeded).message() == "memory budget exceeded");
  CHECK(xrtio::make_error_code(errc::abort_failed).message() == "abort refused or too slow: run retained");
  // Codes with several causes say more than one word: a file read past its
  // end is out_of_range too, and so is a memory bank the device lacks; busy
  // is a run still in flight or a runtime another thread drives.
  CHECK_CONTAINS(xrtio::make_error_code(errc::out_of_range).message(), "file");
  CHECK_CONTAINS(xrtio::make_error_code(errc::out_of_range).message(), "bank");
  CHECK_CONTAINS(xrtio::make_error_code(errc::busy).message(), "still in flight");
  CHECK_CONTAINS(xrtio::make_error_code(errc::busy).message(), "another thread drives");
  // timed_out ends a run on the device (aborted), a run or transfer still
  // waiting for its leases (withdrawn: nothing aborted) and a transfer
  // (cancelled pieces): the message names all three.
  CHECK_CONTAINS(xrtio::make_error_code(errc::timed_out).message(), "aborted");
  CHECK_CONTAINS(xrtio::make_error_code(errc::timed_out).message(), "withdrawn");
  CHECK_CONTAINS(xrtio::make_error_code(errc::timed_out).message(), "transfer");
  std::vector<std::string> seen;
  for (int v = static_cast<int>(errc::invalid_size); v <= static_cast<int>(errc::invalid_option); ++v) {
    auto m = xrtio::make_error_code(static_cast<errc>(v)).message();
    CHECK_FALSE(m.empty());
    CHECK_MESSAGE(!contains(m, "unknown xrtio error"), "errc ", v, " has no message");
    for (auto& s : seen) CHECK_MESSAGE(s != m, "errc ", v, " repeats message \"", m, "\"");
    seen.push_back(m);
  }
  CHECK_CONTAINS(xrtio::error_category().message(999), "999");
}

TEST_CASE("error: errc converts implicitly to std::error_code of the xrtio category") {
  std::error_code ec = errc::timed_out;
  CHECK(ec.category() == xrtio::error_category());
  CHECK(ec.value() == static_cast<int>(errc::timed_out));
  CHECK(ec == errc::timed_out);
  CHECK(ec != errc::abort_failed);
  CHECK(bool(ec));
}

TEST_CASE("error: xrtio::error is a std::system_error carrying the code and the message") {
  static_assert(std::is_base_of_v<std::system_error, xrtio::error>);
  try {
    xrtio::throw_error(errc::out_of_range, "offset 4242 past 17");
    FAIL("throw_error returned");
  } catch (const std::system_error& e) {
    CHECK(e.code() == errc::out_of_range);
    CHECK_CONTAINS(std::string(e.what()), "offset 4242 past 17");
  }
}

// ---- buffers ----------------------------------------------------------------

TEST_CASE("buffer: write then read round-trips bytes at offsets and through typed spans") {
  auto ctx = sim::open();
  auto b = ctx.alloc(4096);
  CHECK(b.size() == 4096);
  CHECK(b.offset() == 0);
  CHECK_FALSE(b.is_view());
  CHECK_FALSE(b.is_imported());

  auto p = pattern(4096, 7);
  b.write(std::span<const std::byte>(p));
  CHECK(read_all(b) == p);

  auto q = pattern(100, 99);
  b.write(std::span<const std::byte>(q), 1000);
  CHECK(read_all(b, 1000, 100) == q);
  CHECK(read_all(b, 999, 1)[0] == p[999]);    // neighbours untouched
  CHECK(read_all(b, 1100, 1)[0] == p[1100]);

  std::array<std::uint32_t, 4> in{1, 2, 3, 0xdeadbeef};
  b.write(std::span<const std::uint32_t>(in), 16);
  std::array<std::uint32_t, 4> out{};
  b.read(std::span<std::uint32_t>(out), 16);
  CHECK(out == in);
}

TEST_CASE("buffer: fresh allocations read as zero") {
  auto ctx = sim::open();
  auto b = ctx.alloc(333);
  for (auto x : read_all(b)) REQUIRE(x == std::byte{0});
}

TEST_CASE("buffer: sub views share the root's memory and tracker with absolute offsets") {
  auto ctx = sim::open();
  auto root = ctx.alloc(4096);
  auto v = root.sub(1000, 200);
  CHECK(v.is_view());
  CHECK(v.size() == 1000);
  CHECK(v.offset() == 200);
  CHECK(&xtest::tracker(v) == &xtest::tracker(root));

  auto vv = v.sub(10, 30);  // a view of a view: offset is the sum
  CHECK(vv.offset() == 230);
  CHECK(vv.size() == 10);
  CHECK(&xtest::tracker(vv) == &xtest::tracker(root));
  CHECK(vv.map().data() == root.map().data() + 230);

  auto p = pattern(10, 3);
  vv.write(std::span<const std::byte>(p));
  CHECK(read_all(root, 230, 10) == p);
  CHECK(read_all(v, 30, 10) == p);

  auto q = pattern(1000, 5);
  root.write(std::span<const std::byte>(q), 200);
  CHECK(read_all(v) == q);
}

TEST_CASE("buffer: map() spans exactly the buffer or view") {
  auto ctx = sim::open();
  auto root = ctx.alloc(512);
  auto m = root.map();
  CHECK(m.size() == 512);
  m[5] = std::byte{0x5a};
  CHECK(read_all(root, 5, 1)[0] == std::byte{0x5a});
  auto v = root.sub(8, 500);
  CHECK(v.map().size() == 8);
  CHECK(v.map().data() == m.data() + 500);
}

TEST_CASE("buffer: alloc of zero bytes fails with invalid_size") {
  auto ctx = sim::open();
  auto msg = error_of([&] { ctx.alloc(0); }, errc::invalid_size);
  CHECK_CONTAINS(msg, "size 0");
}

TEST_CASE("buffer: a simulated alloc whose size overflows when rounded up to pages fails with invalid_size") {
  // (size + 4095) & ~4095 wrapped to 0 for a size within a page of
  // SIZE_MAX: the buffer reported that size with no memory behind it.
  auto ctx = sim::open();
  for (std::size_t size : {SIZE_MAX, SIZE_MAX - 100, SIZE_MAX - 4094}) {
    CAPTURE(size);
    auto msg = error_of([&] { ctx.alloc(size); }, errc::invalid_size);
    CHECK_CONTAINS(msg, std::to_string(size));
    CHECK_CONTAINS(msg, "overflows");
  }
}

TEST_CASE("buffer: a zero-size view fails with invalid_size naming the offset") {
  auto ctx = sim::open();
  auto b = ctx.alloc(4096);
  auto msg = error_of([&] { b.sub(0, 123); }, errc::invalid_size);
  CHECK_CONTAINS(msg, "size 0");
  CHECK_CONTAINS(msg, "123");
}

TEST_CASE("buffer: a view whose offset + size overflows fails with invalid_size naming both") {
  auto ctx = sim::open();
  auto b = ctx.alloc(4096);
  auto msg = error_of([&] { b.sub(16, SIZE_MAX); }, errc::invalid_size);
  CHECK_CONTAINS(msg, std::to_string(SIZE_MAX));
  CHECK_CONTAINS(msg, "16");
  CHECK_CONTAINS(msg, "overflow");
  error_of([&] { b.sub(SIZE_MAX, 1); }, errc::invalid_size);
}

TEST_CASE("buffer: a view past the end fails with out_of_range naming the range and the size") {
  auto ctx = sim::open();
  auto b = ctx.alloc(4096);
  auto msg = error_of([&] { b.sub(100, 4000); }, errc::out_of_range);
  CHECK_CONTAINS(msg, "4000");
  CHECK_CONTAINS(msg, "4100");
  CHECK_CONTAINS(msg, "4096");
  // A view is checked against its own size, not the root's.
  auto v = b.sub(100, 0);
  msg = error_of([&] { v.sub(2, 99); }, errc::out_of_range);
  CHECK_CONTAINS(msg, "101");
  CHECK_CONTAINS(msg, "100 bytes");
  CHECK_NOTHROW(b.sub(4096, 0));
  CHECK_NOTHROW(b.sub(1, 4095));
}

TEST_CASE("buffer: write and read past the end fail with out_of_range and leave the buffer untouched") {
  auto ctx = sim::open();
  auto b = ctx.alloc(64);
  auto p = pattern(64, 1);
  b.write(std::span<const std::byte>(p));

  auto big = pattern(16, 2);
  auto msg = error_of([&] { b.write(std::span<const std::byte>(big), 56); }, errc::out_of_range);
  CHECK_CONTAINS(msg, "56");
  CHECK_CONTAINS(msg, "72");
  CHECK_CONTAINS(msg, "64");
  CHECK(read_all(b) == p);

  std::vector<std::byte> dst(65);
  msg = error_of([&] { b.read(std::span<std::byte>(dst)); }, errc::out_of_range);
  CHECK_CONTAINS(msg, "65");

  error_of([&] { b.write(std::span<const std::byte>(big), SIZE_MAX - 4); }, errc::invalid_size);
  error_of([&] { b.write(std::span<const std::byte>{}, 0); }, errc::invalid_size);
  error_of([&] { b.read(std::span<std::byte>(dst.data(), 1), 64); }, errc::out_of_range);

  // Nothing was left leased by the failures.
  CHECK(xtest::tracker(b).active_count() == 0);
  CHECK(read_all(b) == p);
}

// The simulated device shares coherent memory with its kernels, so its sync
// copies nothing (sim_buffer::sync). What a sync does that can be seen is
// the range it resolves and takes for its duration: it fails with
// range_in_use exactly when that range overlaps a run's. (XRT: the ranges
// that reach xrt::bo::sync are checked in tests/test_xrt_hook.cpp.)
TEST_CASE("buffer: sync covers the range (size 0 means to the end) and rejects bad ranges") {
  auto ctx = sim::open(hung_vadd());
  auto b = ctx.alloc(128);
  auto a = ctx.alloc(64);
  // A run on the device holds [100, 128) of b.
  auto h = xrtio::start(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(a), xrtio::out(b.sub(28, 100)), std::uint32_t{7});
  CHECK(xtest::tracker(b).active_count() == 1);
  auto msg = error_of([&] { b.sync(xrtio::sync_direction::to_device); }, errc::range_in_use);
  CHECK_CONTAINS(msg, "[0, 128)");  // size 0: the whole buffer
  msg = error_of([&] { b.sync(xrtio::sync_direction::from_device, 0, 28); }, errc::range_in_use);
  CHECK_CONTAINS(msg, "[28, 128)");  // size 0 from offset 28: to the end
  msg = error_of([&] { b.sync(xrtio::sync_direction::from_device, 2, 99); }, errc::range_in_use);
  CHECK_CONTAINS(msg, "[99, 101)");  // one byte into the run's range
  CHECK_NOTHROW(b.sync(xrtio::sync_direction::from_device, 100, 0));  // [0, 100): just below the run's range
  CHECK_NOTHROW(b.sync(xrtio::sync_direction::to_device, 72, 28));
  CHECK_NOTHROW(b.sub(100, 0).sync(xrtio::sync_direction::to_device));  // a view's "to the end" is its own end
  // Bad ranges, whatever is leased.
  error_of([&] { b.sync(xrtio::sync_direction::to_device, 29, 100); }, errc::out_of_range);
  error_of([&] { b.sync(xrtio::sync_direction::to_device, 0, 128); }, errc::invalid_size);
  error_of([&] { b.sync(xrtio::sync_direction::to_device, 1, 128); }, errc::out_of_range);
  // The backend checks the range too, for callers of the seam.
  msg = error_of([&] { xtest::state(b)->native->sync(xrtio::sync_direction::to_device, 64, 65); }, errc::out_of_range);
  CHECK_CONTAINS(msg, "sim buffer sync [65, +64) exceeds 128 bytes");
  // Only the run's lease is held: none of the syncs kept one.
  CHECK(xtest::tracker(b).active_count() == 1);
  h = {};  // aborts the hung run
  CHECK(xtest::tracker(b).active_count() == 0);
  CHECK_NOTHROW(b.sync(xrtio::sync_direction::to_device));
}

TEST_CASE("buffer: operations on an empty handle fail with invalid_size") {
  xrtio::buffer b;
  CHECK_FALSE(b);
  CHECK(b.size() == 0);
  std::array<std::byte, 4> x{};
  error_of([&] { b.write(std::span<const std::byte>(x)); }, errc::invalid_size);
  error_of([&] { b.read(std::span<std::byte>(x)); }, errc::invalid_size);
  error_of([&] { b.sub(1, 0); }, errc::invalid_size);
  error_of([&] { b.map(); }, errc::invalid_size);
}

TEST_CASE("buffer: dropping the root handle while a view lives keeps the memory valid") {
  auto ctx = sim::open();
  auto root = ctx.alloc(8192);
  auto p = pattern(8192, 11);
  root.write(std::span<const std::byte>(p));
  auto v = root.sub(4096, 4096);
  auto vv = v.sub(16, 100);
  root = {};
  v = {};
  // vv alone keeps v and the root allocation alive (ASan would flag a use after free).
  CHECK(read_all(vv) == std::vector<std::byte>(p.begin() + 4196, p.begin() + 4212));
  auto q = pattern(16, 12);
  vv.write(std::span<const std::byte>(q));
  CHECK(read_all(vv) == q);
  CHECK(vv.map()[0] == q[0]);
}

TEST_CASE("buffer: the context lives as long as its buffers") {
  xrtio::buffer b;
  {
    auto ctx = sim::open();
    b = ctx.alloc(64);
  }
  auto p = pattern(64, 4);
  b.write(std::span<const std::byte>(p));
  CHECK(read_all(b) == p);
}

// ---- imports ------------------------------------------------------------------

TEST_CASE("import_user_memory: wraps caller memory without copying and without a budget charge") {
  xrtio::memory_budget budget(1 << 20);
  auto ctx = sim::open({}, budget);
  constexpr std::size_t n = 8192;
  std::unique_ptr<std::byte, decltype(&std::free)> mem(static_cast<std::byte*>(std::aligned_alloc(4096, n)),
                                                       &std::free);
  REQUIRE(mem);
  std::memset(mem.get(), 0x11, n);
  {
    auto b = ctx.import_user_memory(mem.get(), n);
    CHECK(b.is_imported());
    CHECK(b.size() == n);
    CHECK(budget.used() == 0);
    CHECK(b.map().data() == mem.get());
    CHECK(read_all(b, 10, 1)[0] == std::byte{0x11});

    auto p = pattern(100, 9);
    b.write(std::span<const std::byte>(p), 4000);
    CHECK(std::memcmp(mem.get() + 4000, p.data(), p.size()) == 0);
    mem.get()[7] = std::byte{0x77};
    CHECK(read_all(b, 7, 1)[0] == std::byte{0x77});

    auto v = b.sub(100, 4000);  // views of imports are imports and carry no charge
    CHECK(v.is_imported());
    CHECK(read_all(v) == p);
    CHECK(budget.used() == 0);
  }
  CHECK(budget.used() == 0);
  // The caller's memory is still the caller's (not freed by the buffer).
  mem.get()[0] = std::byte{1};
}

TEST_CASE("import_user_memory: zero size or a null pointer fail with invalid_size") {
  auto ctx = sim::open();
  std::array<std::byte, 64> mem{};
  error_of([&] { ctx.import_user_memory(mem.data(), 0); }, errc::invalid_size);
  error_of([&] { ctx.import_user_memory(nullptr, 64); }, errc::invalid_size);
}

TEST_CASE("import_dmabuf: a memfd imported sees the same bytes both ways and is not charged") {
  xrtio::memory_budget budget(1 << 20);
  auto ctx = sim::open({}, budget);
  constexpr std::size_t n = 16384;
  int fd = ::memfd_create("xrtio-test", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, n) == 0);
  auto p = pattern(256, 21);
  REQUIRE(::pwrite(fd, p.data(), p.size(), 8000) == static_cast<ssize_t>(p.size()));

  auto b = ctx.import_dmabuf(fd, n);
  ::close(fd);  // the mapping keeps the memory
  CHECK(b.is_imported());
  CHECK(b.size() == n);
  CHECK(budget.used() == 0);
  CHECK(read_all(b, 8000, 256) == p);

  auto q = pattern(64, 22);
  b.write(std::span<const std::byte>(q), 100);
  CHECK(std::memcmp(b.map().data() + 100, q.data(), q.size()) == 0);
  CHECK(budget.used() == 0);
}

TEST_CASE("import_dmabuf: a memfd shared with another mapping is the same memory") {
  auto ctx = sim::open();
  constexpr std::size_t n = 8192;
  int fd = ::memfd_create("xrtio-test-shared", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, n) == 0);
  void* other = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(other != MAP_FAILED);
  auto* bytes = static_cast<std::byte*>(other);
  {
    auto b = ctx.import_dmabuf(fd, n);
    bytes[4000] = std::byte{0x42};
    CHECK(read_all(b, 4000, 1)[0] == std::byte{0x42});
    auto q = pattern(32, 5);
    b.write(std::span<const std::byte>(q), 64);
    CHECK(std::memcmp(bytes + 64, q.data(), q.size()) == 0);
  }
  ::munmap(other, n);
  ::close(fd);
}

TEST_CASE("import_dmabuf: zero size or a negative fd fail with invalid_size and an unmappable fd is a backend_failure") {
  auto ctx = sim::open();
  error_of([&] { ctx.import_dmabuf(3, 0); }, errc::invalid_size);
  auto msg = error_of([&] { ctx.import_dmabuf(-7, 4096); }, errc::invalid_size);
  CHECK_CONTAINS(msg, "-7");
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  msg = error_of([&] { ctx.import_dmabuf(fds[0], 4096); }, errc::backend_failure);
  CHECK_CONTAINS(msg, std::to_string(fds[0]));
  ::close(fds[0]);
  ::close(fds[1]);
}

// ---- access tracker, directly -------------------------------------------------

namespace {
struct counting_listener final : detail::access_listener {
  int released = 0;
  void access_released() noexcept override { ++released; }
};

using ttest::req;

detail::acquire_status take(detail::access_request& r, std::string* why = nullptr,
                            const detail::access_waiter* w = nullptr) {
  return detail::access_tracker::acquire({&r, 1}, detail::holder_kind::run, why, w);
}
constexpr auto R = detail::access_mode::read;
constexpr auto W = detail::access_mode::write;
using st = detail::acquire_status;
}  // namespace

TEST_CASE("access_tracker: readers of overlapping ranges share") {
  detail::access_tracker t;
  auto a = req(t, 0, 100, R), b = req(t, 50, 150, R), c = req(t, 0, 1000, R);
  CHECK(take(a) == st::acquired);
  CHECK(take(b) == st::acquired);
  CHECK(take(c) == st::acquired);
  CHECK(t.active_count() == 3);
  CHECK(a.id != b.id);
  t.release(a.id);
  t.release(b.id);
  t.release(c.id);
  CHECK(t.active_count() == 0);
}

TEST_CASE("access_tracker: many readers released in any order, and a stale lease id releases nothing") {
  detail::access_tracker t;
  std::vector<detail::access_request> readers;
  for (int i = 0; i < 1000; ++i) readers.push_back(req(t, 0, 64, R));
  for (auto& r : readers) REQUIRE(take(r) == st::acquired);
  CHECK(t.active_count() == 1000);
  auto w = req(t, 63, 64, W);
  // Release every other reader, then the rest backwards: a writer waits for the last.
  for (std::size_t i = 0; i < readers.size(); i += 2) t.release(readers[i].id);
  CHECK(t.active_count() == 500);
  CHECK(take(w) == st::conflict);
  for (std::size_t i = readers.size() - 1; i > 1; i -= 2) t.release(readers[i].id);
  CHECK(t.active_count() == 1);
  CHECK(take(w) == st::conflict);
  t.release(readers[1].id);
  CHECK(t.active_count() == 0);
  // A released id is dead for good, even once its slot holds a new lease.
  auto r1 = req(t, 0, 64, R);
  REQUIRE(take(r1) == st::acquired);
  auto old = r1.id;
  t.release(old);
  auto r2 = req(t, 0, 64, R), r3 = req(t, 0, 64, R);
  REQUIRE(take(r2) == st::acquired);
  REQUIRE(take(r3) == st::acquired);
  CHECK(r2.id != old);
  CHECK(r3.id != old);
  t.release(old);     // stale: must not free r2 or r3
  CHECK(t.mark_retained(old) == old);  // stale: must not retain them either
  CHECK(t.active_count() == 2);
  CHECK(take(w) == st::conflict);  // a conflict, not `retained`
  t.release(r2.id);
  t.release(r3.id);
  CHECK(take(w) == st::acquired);
}

// The reactor's deferred releases (docs/DESIGN.md, "Batched lease release"):
// the list never grows past its reserve, so a pass that finishes more runs
// than ever before allocates nothing. Before, it grew: 256 KiB at 4096 runs
// of three buffers, counted by xrtio-bench as allocations in its window.
TEST_CASE("lease_batch: keeps at most its capacity, releasing what it kept before it would grow, and flush releases the rest") {
  constexpr std::size_t cap = detail::lease_batch::capacity;
  detail::access_tracker t;
  std::vector<detail::access_request> rs;
  for (std::size_t i = 0; i <= cap; ++i) rs.push_back(req(t, i * 64, i * 64 + 64, W));
  for (auto& r : rs) REQUIRE(take(r) == st::acquired);
  detail::lease_batch b;
  for (std::size_t i = 0; i < cap; ++i) b.add(&t, rs[i].id);
  CHECK(b.size() == cap);
  CHECK(t.active_count() == cap + 1);  // kept, not released yet
  b.add(&t, rs[cap].id);               // full: the kept ones go first
  CHECK(b.size() == 1);
  CHECK(t.active_count() == 1);
  auto first = req(t, 0, 64, W), last = req(t, cap * 64, cap * 64 + 64, W);
  CHECK(take(first) == st::acquired);
  CHECK(take(last) == st::conflict);  // still kept by the batch
  t.release(first.id);
  b.flush();
  CHECK(b.size() == 0);
  CHECK(t.active_count() == 0);
  CHECK(take(last) == st::acquired);
  t.release(last.id);
}

TEST_CASE("access_tracker: a writer excludes overlapping readers and writers but not disjoint ones") {
  detail::access_tracker t;
  auto w = req(t, 100, 200, W);
  REQUIRE(take(w) == st::acquired);
  std::string why;
  auto r1 = req(t, 199, 300, R);
  CHECK(take(r1, &why) == st::conflict);
  CHECK_CONTAINS(why, "[199, 300) (read)");
  CHECK_CONTAINS(why, "[100, 200) (write)");
  auto w2 = req(t, 0, 101, W);
  CHECK(take(w2) == st::conflict);
  // Half-open ranges: touching is not overlapping.
  auto left = req(t, 0, 100, W), right = req(t, 200, 300, W);
  CHECK(take(left) == st::acquired);
  CHECK(take(right) == st::acquired);
  // A reader held excludes a writer too.
  auto rd = req(t, 1000, 2000, R);
  REQUIRE(take(rd) == st::acquired);
  auto w3 = req(t, 1500, 1501, W);
  CHECK(take(w3) == st::conflict);
  t.release(w.id);
  auto r2 = req(t, 100, 200, R);
  CHECK(take(r2) == st::acquired);
  CHECK(take(r1) == st::conflict);  // still overlaps `right`
}

TEST_CASE("access_tracker: acquisition across trackers is all or nothing") {
  detail::access_tracker t1, t2;
  auto held = req(t2, 0, 10, W);
  REQUIRE(take(held) == st::acquired);
  std::array<detail::access_request, 2> both{req(t1, 0, 10, W), req(t2, 5, 6, R)};
  std::string why;
  CHECK(detail::access_tracker::acquire(both, detail::holder_kind::run, &why) == st::conflict);
  CHECK(t1.active_count() == 0);  // the t1 request was not kept
  CHECK(t2.active_count() == 1);
  t2.release(held.id);
  CHECK(detail::access_tracker::acquire(both, detail::holder_kind::run, &why) == st::acquired);
  CHECK(t1.active_count() == 1);
  CHECK(t2.active_count() == 1);
}

TEST_CASE("access_tracker: a retained lease reports retained rather than conflict") {
  detail::access_tracker t;
  auto r = req(t, 0, 64, W);
  REQUIRE(take(r) == st::acquired);
  r.id = t.mark_retained(r.id);
  std::string why;
  auto other = req(t, 32, 33, R);
  CHECK(take(other, &why) == st::retained);
  CHECK_CONTAINS(why, "retained");
  auto disjoint = req(t, 64, 128, W);
  CHECK(take(disjoint) == st::acquired);
}

TEST_CASE("access_tracker: a queued writer waits in FIFO order and blocks overlapping newcomers") {
  detail::access_tracker t;
  counting_listener l1, l2;
  int o1 = 0, o2 = 0;
  auto reader = req(t, 0, 100, R);
  REQUIRE(take(reader) == st::acquired);

  // A writer that finds the range read-held queues with its waiter.
  detail::access_waiter w1{&o1, detail::access_tracker::next_wait_seq(), &l1};
  auto writer = req(t, 50, 150, W);
  CHECK(take(writer, nullptr, &w1) == st::queued);
  CHECK(t.waiting_count() == 1);
  CHECK(take(writer, nullptr, &w1) == st::queued);  // retrying does not queue twice
  CHECK(t.waiting_count() == 1);

  // A newcomer reader that overlaps the queued writer (but not the held
  // reader's conflict rules) must not overtake it.
  std::string why;
  auto newcomer = req(t, 120, 130, R);
  CHECK(take(newcomer, &why) == st::conflict);
  CHECK_CONTAINS(why, "queued before it");
  // One that overlaps nothing queued still gets in.
  auto elsewhere = req(t, 150, 200, R);
  CHECK(take(elsewhere) == st::acquired);

  // A later waiter queues behind w1 and does not overtake it either.
  detail::access_waiter w2{&o2, detail::access_tracker::next_wait_seq(), &l2};
  auto second = req(t, 140, 145, R);
  CHECK(take(second, nullptr, &w2) == st::queued);
  CHECK(t.waiting_count() == 2);

  // Releasing the reader tells the waiters; w1 goes first.
  t.release(reader.id);
  CHECK(l1.released >= 1);
  CHECK(l2.released >= 1);
  CHECK(take(second, nullptr, &w2) == st::queued);  // still behind the writer
  CHECK(take(writer, nullptr, &w1) == st::acquired);
  CHECK(t.waiting_count() == 1);  // w1's entry left the queue

  // Withdrawing removes a waiter for good.
  detail::access_tracker::withdraw({&second, 1}, &o2);
  CHECK(t.waiting_count() == 0);
  t.release(writer.id);
  t.release(elsewhere.id);
  CHECK(take(newcomer) == st::acquired);
  CHECK(t.active_count() == 1);
}

TEST_CASE("access_tracker: a waiter yields only to waiters queued before it") {
  detail::access_tracker t;
  counting_listener l;
  int o1 = 0, o2 = 0;
  auto held = req(t, 0, 10, W);
  REQUIRE(take(held) == st::acquired);
  detail::access_waiter first{&o1, detail::access_tracker::next_wait_seq(), &l};
  detail::access_waiter second{&o2, detail::access_tracker::next_wait_seq(), &l};
  auto a = req(t, 0, 10, W), b = req(t, 0, 10, W);
  // The later waiter happens to ask first: it still queues behind its seq.
  CHECK(take(b, nullptr, &second) == st::queued);
  CHECK(take(a, nullptr, &first) == st::queued);
  t.release(held.id);
  CHECK(take(b, nullptr, &second) == st::queued);
  CHECK(take(a, nullptr, &first) == st::acquired);
  t.release(a.id);
  CHECK(take(b, nullptr, &second) == st::acquired);
  CHECK(t.waiting_count() == 0);
}

// ---- access tracking with runs ------------------------------------------------

TEST_CASE("access: a host write overlapping a range a run writes fails with range_in_use naming both ranges") {
  auto ctx = sim::open(hung_vadd());
  auto k = ctx.kernel("vadd");
  auto big = ctx.alloc(4096);
  auto a = ctx.alloc(1024), b = ctx.alloc(1024);
  auto c = big.sub(1024, 0);
  auto h = xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{256});
  CHECK(xtest::tracker(big).active_count() == 1);

  auto p = pattern(88, 1);
  auto msg = error_of([&] { big.write(std::span<const std::byte>(p), 512); }, errc::range_in_use);
  CHECK_CONTAINS(msg, "[512, 600)");
  CHECK_CONTAINS(msg, "[0, 1024)");
  CHECK_CONTAINS(msg, "in-flight run");
  std::vector<std::byte> dst(4);
  error_of([&] { c.read(std::span<std::byte>(dst), 1020); }, errc::range_in_use);
  error_of([&] { big.sync(xrtio::sync_direction::from_device); }, errc::range_in_use);
  // Reading a buffer the run only reads is still exclusive for the host.
  error_of([&] { a.read(std::span<std::byte>(dst)); }, errc::range_in_use);

  // The rest of the allocation is free.
  CHECK_NOTHROW(big.write(std::span<const std::byte>(p), 1024));
  CHECK_NOTHROW(big.sub(100, 3000).read(std::span<std::byte>(dst)));
}

TEST_CASE("access: two runs reading the same weights share them while the host can neither write nor read them") {
  auto ctx = sim::open(hung_vadd());
  auto k = ctx.kernel("vadd");
  auto weights = ctx.alloc(1024), x = ctx.alloc(1024);
  auto o1 = ctx.alloc(1024), o2 = ctx.alloc(1024);
  auto h1 = xrtio::start(k, xrtio::in(weights), xrtio::in(x), xrtio::out(o1), std::uint32_t{256});
  auto h2 = xrtio::start(k, xrtio::in(weights), xrtio::in(x), xrtio::out(o2), std::uint32_t{256});
  CHECK(xtest::tracker(weights).active_count() == 2);
  auto p = pattern(8, 1);
  auto msg = error_of([&] { weights.write(std::span<const std::byte>(p)); }, errc::range_in_use);
  CHECK_CONTAINS(msg, "(read)");
  // A host read syncs from the device (it writes the host's copy): it takes
  // its range exclusively too, and the message says so, not "(write)".
  std::vector<std::byte> back(8);
  auto rmsg = error_of([&] { weights.read(std::span<std::byte>(back)); }, errc::range_in_use);
  CHECK_CONTAINS(rmsg, "(host read/write/sync: exclusive)");
  CHECK_CONTAINS(rmsg, "(read) held by an in-flight run");
  // A run that writes the weights conflicts with the readers.
  error_of([&] { xrtio::start(k, xrtio::in(x), xrtio::in(x), xrtio::out(weights), std::uint32_t{256}); },
           errc::range_in_use);
  // An untagged buffer is written, so it conflicts too.
  error_of([&] { xrtio::start(k, xrtio::in(x), xrtio::in(x), weights, std::uint32_t{256}); }, errc::range_in_use);
}

TEST_CASE("access: runs on disjoint sub-buffers of one allocation do not conflict") {
  auto ctx = sim::open(hung_vadd());
  auto k = ctx.kernel("vadd");
  auto big = ctx.alloc(4096), a = ctx.alloc(1024);
  auto h1 = xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(big.sub(1024, 0)), std::uint32_t{256});
  auto h2 = xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(big.sub(1024, 1024)), std::uint32_t{256});
  auto h3 = xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(big.sub(1024, 2048).sub(512, 512)),
                         std::uint32_t{128});
  CHECK(xtest::tracker(big).active_count() == 3);
  CHECK(h1.valid());
  CHECK(h2.valid());
  CHECK(h3.valid());
}

TEST_CASE("access: runs on overlapping sub-buffers conflict and nothing of the refused run is kept") {
  auto ctx = sim::open(hung_vadd());
  auto k = ctx.kernel("vadd");
  auto big = ctx.alloc(4096), a = ctx.alloc(1024), b = ctx.alloc(1024);
  auto h1 = xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(big.sub(1024, 0)), std::uint32_t{256});
  auto msg = error_of(
      [&] { xrtio::start(k, xrtio::in(b), xrtio::in(b), xrtio::out(big.sub(1024, 512)), std::uint32_t{256}); },
      errc::range_in_use);
  CHECK_CONTAINS(msg, "[512, 1536)");
  CHECK_CONTAINS(msg, "[0, 1024)");
  CHECK(xtest::tracker(big).active_count() == 1);
  CHECK(xtest::tracker(b).active_count() == 0);  // all or nothing
  CHECK(sim::device_of(ctx).stats().started == 1);
}

TEST_CASE("access: after the run is waited host access to its ranges works again") {
  auto ctx = sim::open(slow_device(100ms));  // long enough that a loaded host still reads mid-run
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(64), b = ctx.alloc(64), c = ctx.alloc(64);
  std::array<std::uint32_t, 16> av{}, bv{};
  std::iota(av.begin(), av.end(), 1u);
  std::iota(bv.begin(), bv.end(), 100u);
  a.write(std::span<const std::uint32_t>(av));
  b.write(std::span<const std::uint32_t>(bv));
  auto h = xrtio::start(k, xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{16});
  std::array<std::uint32_t, 16> cv{};
  error_of([&] { c.read(std::span<std::uint32_t>(cv)); }, errc::range_in_use);
  h.wait(10s);
  CHECK(xtest::tracker(c).active_count() == 0);
  CHECK(xtest::tracker(a).active_count() == 0);
  c.read(std::span<std::uint32_t>(cv));
  for (std::size_t i = 0; i < 16; ++i) CHECK(cv[i] == av[i] + bv[i]);
  CHECK_NOTHROW(a.write(std::span<const std::uint32_t>(bv)));
}

TEST_CASE("access: an aborted run releases its leases") {
  auto ctx = sim::open(hung_vadd());
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(64);
  {
    auto h = xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(ctx.alloc(64)), std::uint32_t{16});
    CHECK(xtest::tracker(a).active_count() == 2);
  }
  CHECK(xtest::tracker(a).active_count() == 0);
  std::array<std::byte, 4> x{};
  CHECK_NOTHROW(a.write(std::span<const std::byte>(x)));
}
