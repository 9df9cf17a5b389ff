// File transfers into and out of device buffers (xrtio/file.hpp;
// docs/DESIGN.md, "File I/O"): data integrity on both engines (io_uring and
// the thread pool) with and without O_DIRECT, end of file, leases both ways,
// cancellation on a pipe that blocks, every error, executors.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio.hpp>
#include <asio/experimental/deferred.hpp>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "reactor_support.hpp"
#include "refusing_slot.hpp"
#include "ring_table.hpp"  // test seam: table sizes (src/reactor)
#include "xrtio/detail/completion_service.hpp"  // the registry (read_at_once cases)
#include "xrtio/xrtio.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace sim = xrtio::sim;
using rtest::fixture;

namespace {

// A directory of its own per test process, removed at the end.
struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() / ("xrtio-file-io-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  static std::atomic<int>& counter() {
    static std::atomic<int> c{0};
    return c;
  }
};

std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937 g(seed);
  for (auto& b : v) b = std::byte(g() & 0xff);
  return v;
}

void write_file(const fs::path& p, const std::vector<std::byte>& data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
  REQUIRE(out.good());
}

std::vector<std::byte> read_whole(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> v(c.size());
  std::memcpy(v.data(), c.data(), c.size());
  return v;
}

struct outcome {
  std::error_code ec;
  std::size_t bytes = 0;
  bool done = false;
};

// Runs io until `o` completed (or a generous limit passed: then a failed check).
void run_until(asio::io_context& io, const outcome& o) {
  auto until = std::chrono::steady_clock::now() + 30s;
  io.restart();
  while (!o.done && std::chrono::steady_clock::now() < until) io.run_one_for(10ms);
  CHECK(o.done);
}

auto record(asio::io_context& io, outcome& o) {
  return asio::bind_executor(io, [&o](std::error_code ec, std::size_t n) {
    CHECK(!o.done);  // exactly once
    o.ec = ec;
    o.bytes = n;
    o.done = true;
  });
}

std::span<const std::byte> mapped(const xrtio::buffer& b) { return b.map(); }

// The engine a runtime asked for file_io_uring = false must use, and
// whatever it uses otherwise (io_uring is refused under qemu-user).
void check_path(const xrtio::runtime& rt, bool uring_asked) {
  auto p = rt.stats().file_path;
  if (!uring_asked) CHECK(p == xrtio::file_io_path::thread_pool);
  else CHECK(p != xrtio::file_io_path::none);
  if (uring_asked && p != xrtio::file_io_path::io_uring) MESSAGE("io_uring refused here: the thread pool ran");
}

}  // namespace

TEST_CASE("file io: random offsets and sizes are read and written exactly, io_uring and thread pool, direct and "
          "buffered") {
  temp_dir dir;
  const std::size_t file_size = (1 << 20) + 1234;
  const auto content = random_bytes(file_size, 7);
  for (bool uring : {true, false})
    for (bool direct : {true, false}) {
      CAPTURE(uring);
      CAPTURE(direct);
      fixture f({}, xrtio::runtime_options{.file_io_uring = uring});
      auto path = dir.path / ("data-" + std::to_string(uring) + std::to_string(direct));
      write_file(path, content);
      // Small pieces and depth: transfers are cut into several pieces in flight.
      xrtio::file_options fo{.direct = direct, .chunk_size = 64 << 10, .queue_depth = 3};
      auto file = xrtio::file::open(path, xrtio::file_mode::read_write, fo);
      if (direct && !file.direct()) MESSAGE("O_DIRECT not in effect: " << file.direct_fallback_reason());
      if (!direct) CHECK(!file.direct());
      CHECK(file.size() == file_size);
      auto buf = f.ctx.alloc(1 << 20);
      asio::io_context io;
      std::mt19937 g(uring * 2 + direct);
      auto pick = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(g); };
      for (int i = 0; i < 24; ++i) {
        // Every fourth transfer aligned (the direct path), the others anywhere.
        bool al = i % 4 == 0;
        std::size_t len = al ? 4096 * pick(1, 64) : pick(1, 300000);
        std::size_t boff = al ? 4096 * pick(0, (buf.size() - len) / 4096) : pick(0, buf.size() - len);
        std::size_t foff = al ? 4096 * pick(0, 200) : pick(0, file_size - 1);
        auto view = buf.sub(len, boff);
        outcome o;
        xrtio::async_read_file(file, foff, xrtio::out(view), record(io, o));
        run_until(io, o);
        REQUIRE(!o.ec);
        std::size_t expect = std::min(len, file_size - foff);
        REQUIRE(o.bytes == expect);
        CHECK(std::memcmp(mapped(view).data(), content.data() + foff, expect) == 0);
      }
      // Writes: random pieces of a random buffer to random places, checked
      // against a model of the file.
      auto model = content;
      auto src = random_bytes(buf.size(), 99);
      buf.write(std::span<const std::byte>(src));
      for (int i = 0; i < 16; ++i) {
        bool al = i % 4 == 0;
        std::size_t len = al ? 4096 * pick(1, 64) : pick(1, 300000);
        std::size_t boff = al ? 4096 * pick(0, (buf.size() - len) / 4096) : pick(0, buf.size() - len);
        std::size_t foff = al ? 4096 * pick(0, 200) : pick(0, file_size + 5000);
        outcome o;
        xrtio::async_write_file(file, foff, xrtio::in(buf.sub(len, boff)), record(io, o));
        run_until(io, o);
        REQUIRE(!o.ec);
        CHECK(o.bytes == len);
        if (model.size() < foff + len) model.resize(foff + len);
        std::memcpy(model.data() + foff, src.data() + boff, len);
      }
      CHECK(read_whole(path) == model);
      auto st = f.rt.stats();
      CHECK(st.file_reads == 24);
      CHECK(st.file_writes == 16);
      CHECK(st.file_pieces >= 40);
      CHECK(st.in_flight == 0);
      check_path(f.rt, uring);
    }
}

TEST_CASE("file io: a read reaching the end of the file returns the bytes read, and one at or past it is out_of_range") {
  temp_dir dir;
  for (bool uring : {true, false}) {
    CAPTURE(uring);
    fixture f({}, xrtio::runtime_options{.file_io_uring = uring});
    auto path = dir.path / ("short" + std::to_string(uring));
    auto content = random_bytes(100, 3);  // a file too short for the buffer
    write_file(path, content);
    auto file = xrtio::file::open(path, xrtio::file_mode::read, {.chunk_size = 4096, .queue_depth = 4});
    auto buf = f.ctx.alloc(5 * 4096);
    asio::io_context io;
    outcome o;
    xrtio::async_read_file(file, 0, buf, record(io, o));
    run_until(io, o);
    CHECK(!o.ec);
    CHECK(o.bytes == 100);
    CHECK(std::memcmp(buf.map().data(), content.data(), 100) == 0);
    for (std::uint64_t at : {std::uint64_t(100), std::uint64_t(4096), std::uint64_t(1) << 40}) {
      CAPTURE(at);
      outcome e;
      xrtio::async_read_file(file, at, buf, record(io, e));
      run_until(io, e);
      CHECK(e.ec == xrtio::errc::out_of_range);
      CHECK(e.bytes == 0);
    }
    check_path(f.rt, uring);
  }
}

TEST_CASE("file io: misaligned transfers on an O_DIRECT file fail with misaligned by option, or go through the "
          "page cache") {
  temp_dir dir;
  fixture f;
  auto path = dir.path / "direct";
  auto content = random_bytes(64 << 10, 5);
  write_file(path, content);
  auto strict = xrtio::file::open(path, xrtio::file_mode::read_write, {.on_misaligned = xrtio::misaligned_policy::fail});
  if (!strict.direct()) {
    MESSAGE("XRTIO-SKIP: O_DIRECT refused on " << path << ": " << strict.direct_fallback_reason());
    return;
  }
  auto buf = f.ctx.alloc(16 << 10);
  asio::io_context io;
  struct {
    std::uint64_t foff;
    std::size_t len, boff;
  } cases[] = {{1, 4096, 0}, {0, 4095, 0}, {0, 4096, 1}};
  for (auto c : cases) {
    CAPTURE(c.foff);
    CAPTURE(c.len);
    CAPTURE(c.boff);
    outcome r, w;
    xrtio::async_read_file(strict, c.foff, buf.sub(c.len, c.boff), record(io, r));
    xrtio::async_write_file(strict, c.foff, buf.sub(c.len, c.boff), record(io, w));
    run_until(io, r);
    run_until(io, w);
    CHECK(r.ec == xrtio::errc::misaligned);
    CHECK(w.ec == xrtio::errc::misaligned);
  }
  CHECK(read_whole(path) == content);  // nothing written
  // Aligned works under fail; misaligned works under bounce.
  outcome ok;
  xrtio::async_read_file(strict, 8192, buf.sub(8192, 4096), record(io, ok));
  run_until(io, ok);
  CHECK(!ok.ec);
  CHECK(std::memcmp(buf.map().data() + 4096, content.data() + 8192, 8192) == 0);
  auto bouncing = xrtio::file::open(path, xrtio::file_mode::read);
  CHECK(bouncing.direct());
  outcome b;
  xrtio::async_read_file(bouncing, 4097, buf.sub(10000, 3), record(io, b));
  run_until(io, b);
  CHECK(!b.ec);
  CHECK(b.bytes == 10000);
  CHECK(std::memcmp(buf.map().data() + 3, content.data() + 4097, 10000) == 0);
}

TEST_CASE("file io: errors: empty handles, in() for a read, out() for a write, negative timeout, bad options") {
  temp_dir dir;
  fixture f;
  auto path = dir.path / "e";
  write_file(path, random_bytes(8192, 1));
  auto file = xrtio::file::open(path, xrtio::file_mode::read_write);
  auto buf = f.ctx.alloc(4096);
  asio::io_context io;
  xrtio::file none;
  auto expect = [&](auto initiate, std::error_code want) {
    outcome o;
    initiate(record(io, o));
    CHECK(!o.done);  // never inline
    run_until(io, o);
    CHECK(o.ec == want);
  };
  expect([&](auto t) { xrtio::async_read_file(none, 0, buf, t); }, xrtio::errc::invalid_size);
  expect([&](auto t) { xrtio::async_write_file(none, 0, buf, t); }, xrtio::errc::invalid_size);
  expect([&](auto t) { xrtio::async_read_file(file, 0, xrtio::buffer{}, t); }, xrtio::errc::invalid_size);
  expect([&](auto t) { xrtio::async_read_file(file, 0, xrtio::in(buf), t); }, xrtio::errc::argument_kind);
  expect([&](auto t) { xrtio::async_write_file(file, 0, xrtio::out(buf), t); }, xrtio::errc::argument_kind);
  expect([&](auto t) { xrtio::async_read_file(file, 0, buf, xrtio::io_options{.timeout = -1ms}, t); },
         xrtio::errc::invalid_option);
  expect([&](auto t) { xrtio::async_read_file(file, std::uint64_t(-4096), buf, t); }, xrtio::errc::invalid_size);
  CHECK(f.rt.stats().file_pieces == 0);
  auto code_of = [](auto&& fn) {
    try {
      fn();
    } catch (const xrtio::error& e) {
      return e.code();
    }
    return std::error_code{};
  };
  CHECK(code_of([&] { xrtio::file::adopt(-1); }) == xrtio::errc::invalid_option);
  CHECK(code_of([&] { xrtio::file::open(path, xrtio::file_mode::read, {.chunk_size = 0}); }) ==
        xrtio::errc::invalid_option);
  CHECK(code_of([&] { xrtio::file::open(path, xrtio::file_mode::read, {.queue_depth = 0}); }) ==
        xrtio::errc::invalid_option);
  CHECK(code_of([&] { xrtio::file::open(path, xrtio::file_mode::read, {.queue_depth = 65}); }) ==
        xrtio::errc::invalid_option);
  CHECK(code_of([&] { xrtio::file::open(path, xrtio::file_mode::create); }) == xrtio::errc::invalid_option);
  CHECK(code_of([&] { xrtio::file::open(dir.path / "missing", xrtio::file_mode::read); }) ==
        std::errc::no_such_file_or_directory);
  CHECK(code_of([&] { (void)none.size(); }) == xrtio::errc::invalid_size);
}

TEST_CASE("file io: errors from the system: a closed descriptor, a directory, EACCES, a read-only descriptor "
          "written") {
  temp_dir dir;
  for (bool uring : {true, false}) {
    CAPTURE(uring);
    fixture f({}, xrtio::runtime_options{.file_io_uring = uring});
    auto buf = f.ctx.alloc(4096);
    asio::io_context io;
    // A descriptor number that was closed (high, so nothing reuses it meanwhile).
    int fd = ::open(dir.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 900 + int(uring));
    REQUIRE(high >= 900);
    ::close(high);
    ::close(fd);
    auto closed = xrtio::file::adopt(high);
    outcome c;
    xrtio::async_read_file(closed, 0, buf, record(io, c));
    run_until(io, c);
    CHECK(c.ec == std::errc::bad_file_descriptor);
    // A directory: reading it is EISDIR; opening it for writing throws EISDIR.
    auto d = xrtio::file::open(dir.path, xrtio::file_mode::read);
    outcome r;
    xrtio::async_read_file(d, 0, buf, record(io, r));
    run_until(io, r);
    CHECK(r.ec == std::errc::is_a_directory);
    try {
      xrtio::file::open(dir.path, xrtio::file_mode::write);
      FAIL("opening a directory for writing did not throw");
    } catch (const xrtio::error& e) {
      CHECK(e.code() == std::errc::is_a_directory);
    }
    // A descriptor opened read-only, written: EBADF from the write itself.
    auto path = dir.path / ("ro" + std::to_string(uring));
    write_file(path, random_bytes(4096, 2));
    auto ro = xrtio::file::open(path, xrtio::file_mode::read);
    outcome w;
    xrtio::async_write_file(ro, 0, buf, record(io, w));
    run_until(io, w);
    CHECK(w.ec == std::errc::bad_file_descriptor);
    check_path(f.rt, uring);
  }
  // EACCES: root passes permission bits, but not a read-only sysfs attribute.
  const char* attr = "/sys/devices/system/cpu/online";
  if (::access(attr, F_OK) != 0) {
    MESSAGE("XRTIO-SKIP: " << attr << " missing: EACCES not tried");
    return;
  }
  try {
    xrtio::file::open(attr, xrtio::file_mode::write);
    FAIL("opening a read-only sysfs attribute for writing did not throw");
  } catch (const xrtio::error& e) {
    // EACCES where /sys is writable; a container's read-only /sys refuses
    // with EROFS first. Either way the system's code reaches the caller.
    bool ok = e.code() == std::errc::permission_denied || e.code() == std::errc::read_only_file_system;
    CHECK_MESSAGE(ok, e.what());
    if (e.code() == std::errc::read_only_file_system) MESSAGE("/sys is read-only here: EROFS, not EACCES");
    CHECK(std::string(e.what()).find(attr) != std::string::npos);
  }
}

namespace {
// A pipe whose read end is adopted as a file: a read blocks until bytes are
// written to the other end, so a transfer stays in flight as long as a test needs.
struct pipe_pair {
  int rd = -1, wr = -1;
  pipe_pair() {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    rd = p[0];
    wr = p[1];
  }
  ~pipe_pair() {
    if (rd >= 0) ::close(rd);
    if (wr >= 0) ::close(wr);
  }
  void put(const void* data, std::size_t n) const { REQUIRE(::write(wr, data, n) == ssize_t(n)); }
};

// Whether a host write to buf's range is refused as in use (the lease is held).
bool leased(xrtio::buffer b) {
  std::byte x{1};
  try {
    b.write(std::span<const std::byte>(&x, 1));
    return false;
  } catch (const xrtio::error& e) {
    CHECK(e.code() == xrtio::errc::range_in_use);
    return true;
  }
}
}  // namespace

TEST_CASE("file io: a read from a pipe holds its write lease until its last piece is reported, then completes") {
  for (bool uring : {true, false}) {
    CAPTURE(uring);
    fixture f({}, xrtio::runtime_options{.file_io_uring = uring});
    pipe_pair p;
    auto file = xrtio::file::adopt(p.rd, {.chunk_size = 4096, .queue_depth = 4});
    p.rd = -1;  // the file owns it
    CHECK(!file.direct());
    auto buf = f.ctx.alloc(3 * 4096);
    asio::io_context io;
    outcome o;
    xrtio::async_read_file(file, 0, buf, record(io, o));
    io.run_for(30ms);
    CHECK(!o.done);
    CHECK(leased(buf));
    auto data = random_bytes(3 * 4096, 11);
    p.put(data.data(), 5000);  // a partial piece: the rest is asked for again
    io.run_for(20ms);
    CHECK(!o.done);
    CHECK(leased(buf));
    p.put(data.data() + 5000, data.size() - 5000);
    run_until(io, o);
    CHECK(!o.ec);
    CHECK(o.bytes == data.size());
    CHECK(std::memcmp(buf.map().data(), data.data(), data.size()) == 0);
    CHECK(!leased(buf));  // released with the completion
    check_path(f.rt, uring);
  }
}

namespace {
// Lowers RLIMIT_NOFILE and fills every free descriptor below it but `spare`,
// so that the next descriptors the process makes fail with EMFILE after
// `spare` of them. Restores both at destruction.
struct descriptors_scarce {
  rlimit old{};
  std::vector<int> filler;
  explicit descriptors_scarce(int spare) {
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &old) == 0);
    int highest = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
      highest = std::max(highest, std::stoi(e.path().filename().string()));
    rlimit low = old;
    low.rlim_cur = rlim_t(highest) + 8;  // a few free above the highest open one: filled below
    REQUIRE(low.rlim_cur <= old.rlim_max);
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
    for (;;) {
      int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (fd < 0) break;
      filler.push_back(fd);
    }
    REQUIRE(filler.size() >= std::size_t(spare));
    for (int i = 0; i < spare; ++i) {
      ::close(filler.back());
      filler.pop_back();
    }
  }
  // How many descriptors can be made now (at most 8).
  int free_now() {
    std::vector<int> got;
    for (int i = 0; i < 8; ++i) {
      int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (fd < 0) break;
      got.push_back(fd);
    }
    for (int fd : got) ::close(fd);
    return int(got.size());
  }
  ~descriptors_scarce() {
    for (int fd : filler) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &old);
  }
};
}  // namespace

TEST_CASE("file io: an O_DIRECT file whose descriptor for misaligned pieces cannot be made (no descriptor left) "
          "fails to open and keeps no descriptor, and adopt leaves the caller's descriptor open") {
  // Under misaligned_policy::bounce (the default) an O_DIRECT file is
  // opened a second time without O_DIRECT. That failure was ignored: the
  // file opened, and each misaligned transfer then failed with misaligned.
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("XRTIO-SKIP: UBSan's vptr check needs descriptors this test takes away (the plain and TSan builds run it)");
  return;
#endif
  temp_dir dir;
  auto path = dir.path / "direct";
  write_file(path, random_bytes(8192, 29));
  if (auto probe = xrtio::file::open(path, xrtio::file_mode::read); !probe.direct()) {
    MESSAGE("XRTIO-SKIP: O_DIRECT refused on " << path << ": " << probe.direct_fallback_reason());
    return;
  }
  {
    descriptors_scarce scarce(1);  // the first open takes it
    std::error_code ec;
    std::string what;
    try {
      auto f = xrtio::file::open(path, xrtio::file_mode::read);
    } catch (const xrtio::error& e) {
      ec = e.code();
      what = e.what();
    }
    CHECK(ec == std::errc::too_many_files_open);
    CHECK(what.find("misaligned_policy::bounce") != std::string::npos);
    CHECK(scarce.free_now() == 1);  // the first descriptor was closed
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  REQUIRE(fd >= 0);
  {
    descriptors_scarce scarce(0);
    std::error_code ec;
    try {
      auto f = xrtio::file::adopt(fd);
    } catch (const xrtio::error& e) {
      ec = e.code();
    }
    CHECK(ec == std::errc::too_many_files_open);
  }
  CHECK(::fcntl(fd, F_GETFD) != -1);  // still the caller's, open
  auto f = xrtio::file::adopt(fd);  // with descriptors to spare it bounces
  CHECK(f.direct());
}

TEST_CASE("file io: a loop that cannot make its engine (no descriptor left) fails the transfer with backend_failure, "
          "keeps no descriptor of the attempt, and makes the engine at a later transfer") {
  // The engine is made by the first transfer that reaches the loop (here a
  // pipe's: never done at once). With no descriptor free, io_uring_setup
  // and the thread pool's semaphore fail; with two free, the pool makes its
  // semaphore and one worker's cancel descriptor, and fails at the second
  // worker's (before, that failure was ignored and a worker blocked on a
  // stream could not be cancelled; a failure after a worker had started
  // ended the process).
#if defined(__SANITIZE_ADDRESS__)
  // The ASan build has UBSan, whose vptr check tests the memory of a type
  // it has not seen yet through a pipe, and reports a bad vptr when it
  // cannot make one (seen here on the failure path's objects).
  MESSAGE("XRTIO-SKIP: UBSan's vptr check needs descriptors this test takes away (the plain and TSan builds run it)");
  return;
#endif
  for (int spare : {0, 2}) {
    CAPTURE(spare);
    fixture f({}, xrtio::runtime_options{.file_io_uring = spare == 0});
    pipe_pair p;
    auto file = xrtio::file::adopt(p.rd, {.chunk_size = 4096, .queue_depth = 1});
    p.rd = -1;  // the file owns it
    auto buf = f.ctx.alloc(4096);
    auto data = random_bytes(2 * 4096, 23);
    p.put(data.data(), data.size());
    asio::io_context io;
    {
      descriptors_scarce scarce(spare);
      outcome o;
      xrtio::async_read_file(file, 0, buf, record(io, o));
      run_until(io, o);
      CHECK(o.ec == xrtio::errc::backend_failure);
      CHECK(o.bytes == 0);
      CHECK(!leased(buf));
      CHECK(f.rt.stats().file_path == xrtio::file_io_path::none);
      CHECK(scarce.free_now() == spare);  // the attempt closed what it made
    }
    io.restart();
    outcome o;
    xrtio::async_read_file(file, 0, buf, record(io, o));
    run_until(io, o);
    CHECK(!o.ec);
    CHECK(o.bytes == 4096);
    CHECK(std::memcmp(buf.map().data(), data.data(), 4096) == 0);
    CHECK(f.rt.stats().file_path != xrtio::file_io_path::none);
  }
}

TEST_CASE("file io: a first transfer on a default runtime that cannot start throws to the caller, as async_run does") {
  // The default runtime is made by the first operation that needs it. A
  // file transfer made its operation first and then, unable to complete
  // it through anything, ended the process (std::terminate) when the
  // runtime could not start: here, no descriptor left for its eventfd.
  // Each case runs in a child process, where the default runtime of this
  // one may not exist yet.
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("XRTIO-SKIP: UBSan's vptr check needs descriptors this test takes away (the plain build runs it)");
  return;
#endif
#if defined(__SANITIZE_THREAD__)
  MESSAGE("XRTIO-SKIP: TSan ends a child that starts threads after a fork of a process with threads (the test "
          "runner's watchdog); the plain build runs it");
  return;
#endif
  for (int which = 0; which < 3; ++which) {
    const char* what = which == 0 ? "async_run" : which == 1 ? "async_read_file" : "async_write_file";
    CAPTURE(what);
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int status = 1;
      try {
        auto ctx = xrtio::sim::open();  // not bound: the default runtime
        auto k = ctx.kernel("noop");
        auto buf = ctx.alloc(4096);
        int p[2];
        if (::pipe2(p, O_CLOEXEC) != 0) ::_exit(2);
        auto rd = xrtio::file::adopt(p[0]);
        auto wr = xrtio::file::adopt(p[1]);
        asio::io_context io;
        descriptors_scarce none(0);  // a failed REQUIRE here throws: status 5 below
        bool ran = false;
        auto done_run = asio::bind_executor(io, [&](std::error_code, xrtio::run_result) { ran = true; });
        auto done_io = asio::bind_executor(io, [&](std::error_code, std::size_t) { ran = true; });
        try {
          if (which == 0) xrtio::async_run(k, done_run);
          else if (which == 1) xrtio::async_read_file(rd, 0, buf, done_io);
          else xrtio::async_write_file(wr, 0, xrtio::in(buf), done_io);
          status = 77;  // no throw: this process's default runtime had started already
        } catch (const xrtio::error& e) {
          std::printf("%s: %s\n", what, e.what());
          status = e.code() == xrtio::errc::backend_failure && !ran && io.poll() == 0 ? 0 : 4;
        }
      } catch (...) {
        status = 5;
      }
      std::fflush(stdout);
      ::_exit(status);
    }
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
      MESSAGE("XRTIO-SKIP: the default runtime of this process had started before (run this case alone, as CTest does)");
      return;
    }
    CHECK_MESSAGE(WIFEXITED(st), "the child ended by signal " << WTERMSIG(st));
    if (WIFEXITED(st)) CHECK(WEXITSTATUS(st) == 0);
  }
}

// In-loop mode: the driver blocks in io.run_one(), which only its io_context
// can end. A ring completion must end it (the driver watches the eventfd the
// ring writes) rather than wait for a timed poll: with max_poll_interval at
// 10 s the driver sleeps with no timer while only a pipe read is in flight,
// and the write from this thread resumes the handler well within 5 s. Before
// the watch, the driver polled with a growing backoff (dozens of sleeps in
// the half second below) and then saw the completion only when a sleep ended.
// In reactor mode the reactor thread sleeps on that eventfd: the same holds.
TEST_CASE("file io: a ring completion wakes a blocked driver or reactor promptly, with no polling meanwhile") {
  for (bool uring : {true, false}) {
    CAPTURE(uring);
    fixture f({}, xrtio::runtime_options{.max_poll_interval = 10s, .file_io_uring = uring});
    pipe_pair p;
    auto file = xrtio::file::adopt(p.rd, {.chunk_size = 4096, .queue_depth = 1});
    p.rd = -1;  // the file owns it
    auto buf = f.ctx.alloc(4096);
    asio::io_context io;
    // A first read that completes at once: its completion has written the
    // eventfd the ring signals. In in-loop mode the driver's watch of that
    // eventfd must not fire again and again for it (Asio re-arms the watch
    // with EPOLL_CTL_MOD, which reports a descriptor still readable anew):
    // once, such a driver never slept while ring pieces were in flight.
    {
      auto first = random_bytes(4096, 20);
      p.put(first.data(), first.size());
      outcome o0;
      xrtio::async_read_file(file, 0, buf, record(io, o0));
      run_until(io, o0);
      REQUIRE(!o0.ec);
    }
    auto guard = asio::make_work_guard(io);
    outcome o;
    std::atomic<bool> done{false};
    auto sleeps0 = f.rt.stats().sleeps;  // before the read: the loop may sleep as soon as it has it
    xrtio::async_read_file(file, 0, buf, asio::bind_executor(io, [&](std::error_code ec, std::size_t n) {
                             o.ec = ec;
                             o.bytes = n;
                             o.done = true;
                             done = true;
                           }));
    io.restart();
    std::thread handlers([&] { io.run(); });
    // The loop has taken the transfer (its lease is held) and gone to sleep.
    REQUIRE(rtest::eventually([&] { return leased(buf) && f.rt.stats().sleeps > sleeps0; }, 20000ms));
    std::this_thread::sleep_for(50ms);  // past the spin: the sleep has begun
    auto before = f.rt.stats().sleeps;
    std::this_thread::sleep_for(500ms);
    // Woken by nothing: at most a stale wake-up ends one sleep early. The
    // thread pool's transfers are polled (every max_poll_interval at most;
    // src/reactor/reactor.cpp and inloop.cpp say why): there, only the
    // wake-up is checked.
    bool pool = f.rt.stats().file_path == xrtio::file_io_path::thread_pool;
    if (!pool) CHECK(f.rt.stats().sleeps - before <= 2);
    else MESSAGE("thread pool: the loop polls its transfers, sleeps not counted");
    CHECK(!done.load());
    auto data = random_bytes(4096, 21);
    p.put(data.data(), data.size());
    CHECK(rtest::eventually([&] { return done.load(); }, 5000ms));
    guard.reset();
    handlers.join();  // the handler has run (late, had the check above failed)
    CHECK(!o.ec);
    CHECK(o.bytes == data.size());
    CHECK(std::memcmp(buf.map().data(), data.data(), data.size()) == 0);
    check_path(f.rt, uring);
  }
}

// The driver's wait on the ring's eventfd is work for its io_context; a wait
// left pending once no piece is in flight would keep xrtio::run from ever
// returning when io runs out of work. (It is cancelled then; a wait armed
// before the last completion fires with it, so most runs pass even without
// the cancel: only one armed after the last edge was consumed needs it.)
TEST_CASE("file io: xrtio::run returns when io runs out of work after transfers on the ring") {
  temp_dir dir;
  auto data = random_bytes(64 * 1024, 31);
  write_file(dir.path / "f", data);
  xrtio::runtime rt(xrtio::runtime_options{.reactor_thread = false});
  auto ctx = sim::open({});
  ctx.bind(rt);
  auto file = xrtio::file::open(dir.path / "f", xrtio::file_mode::read, {.chunk_size = 4096, .queue_depth = 4});
  auto buf = ctx.alloc(data.size());
  asio::io_context io;
  int reads = 0;
  std::function<void(std::error_code, std::size_t)> again = [&](std::error_code ec, std::size_t n) {
    CHECK(!ec);
    CHECK(n == data.size());
    if (++reads < 3) xrtio::async_read_file(file, 0, buf, asio::bind_executor(io, again));
  };
  xrtio::async_read_file(file, 0, buf, asio::bind_executor(io, again));
  std::atomic<bool> returned{false};
  std::thread driver([&] {
    xrtio::run(io, rt);
    returned = true;
  });
  CHECK(rtest::eventually([&] { return returned.load(); }, 20000ms));
  if (!returned.load()) io.stop();  // do not hang the suite on the defect
  driver.join();
  CHECK(reads == 3);
  CHECK(std::memcmp(buf.map().data(), data.data(), data.size()) == 0);
  if (rt.stats().file_path != xrtio::file_io_path::io_uring) MESSAGE("io_uring refused here: the thread pool ran");
}

TEST_CASE("file io: cancelling a blocked pipe read: operation_aborted, nothing consumed, lease held until then") {
  for (bool uring : {true, false})
    for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial}) {
      CAPTURE(uring);
      fixture f({}, xrtio::runtime_options{.file_io_uring = uring});
      pipe_pair p;
      auto file = xrtio::file::adopt(::dup(p.rd));
      auto buf = f.ctx.alloc(4096);
      asio::io_context io;
      asio::cancellation_signal sig;
      outcome o;
      xrtio::async_read_file(file, 0, buf, asio::bind_cancellation_slot(sig.slot(), record(io, o)));
      // Cancelled once its piece is with the kernel (or the pool), blocked:
      // a cancellation that reaches the loop first ends it before any piece
      // is issued (file_intake), which another test covers. Under TSan on a
      // loaded host the loop's first pass (making the pool) took over 20 ms.
      auto until = std::chrono::steady_clock::now() + 10s;
      while (f.rt.stats().file_pieces == 0 && std::chrono::steady_clock::now() < until) io.run_for(1ms);
      REQUIRE(f.rt.stats().file_pieces >= 1);
      io.run_for(5ms);
      CHECK(!o.done);
      CHECK(leased(buf));
      sig.emit(type);
      run_until(io, o);
      CHECK(o.ec == asio::error::operation_aborted);
      CHECK(!leased(buf));
      CHECK(f.rt.stats().file_cancels >= 1);
      CHECK(f.rt.stats().cancelled == 1);
      // The cancelled request is gone from the kernel: bytes written now are
      // still in the pipe for the next reader.
      p.put("abc", 3);
      char got[3] = {};
      CHECK(::read(p.rd, got, 3) == 3);
      CHECK(std::string(got, 3) == "abc");
    }
}

TEST_CASE("file io: io_options::timeout cancels a blocked read with timed_out, and the runtime's destructor ends "
          "one with shut_down") {
  for (bool uring : {true, false}) {
    CAPTURE(uring);
    pipe_pair p;
    asio::io_context io;
    outcome t, s;
    xrtio::buffer buf;
    {
      fixture f({}, xrtio::runtime_options{.file_io_uring = uring});
      auto file = xrtio::file::adopt(::dup(p.rd));
      buf = f.ctx.alloc(4096);
      auto other = f.ctx.alloc(4096);
      xrtio::async_read_file(file, 0, buf, xrtio::io_options{.timeout = 30ms}, record(io, t));
      run_until(io, t);
      CHECK(t.ec == xrtio::errc::timed_out);
      CHECK(f.rt.stats().timed_out == 1);
      xrtio::async_read_file(file, 0, other, record(io, s));
      io.restart();
      io.run_for(20ms);
      CHECK(!s.done);
    }  // the runtime goes: its pieces are cancelled
    run_until(io, s);
    CHECK(s.ec == xrtio::errc::shut_down);
    p.put("x", 1);
    char c = 0;
    CHECK(::read(p.rd, &c, 1) == 1);  // nobody else read it
  }
}

TEST_CASE("file io: a read into a range a run writes fails with range_in_use, or waits for the run") {
  // The run is held on the device by a gate, not a latency a loaded host
  // could outlast (under qemu-user on a busy CI machine a 40 ms run ended
  // before the conflicting read was even submitted).
  temp_dir dir;
  std::atomic<bool> open{false};
  sim::device_config cfg;
  cfg.kernels.push_back(sim::kernel_def{"held",
                                        {{"out", xrtio::backend::arg_kind::buffer, 0, 0}},
                                        [&](sim::kernel_call& c) {
                                          while (!open.load() && !c.stop_requested()) std::this_thread::sleep_for(100us);
                                          auto out = c.buffer_as<std::uint32_t>(0);
                                          std::fill(out.begin(), out.end(), 0xfeedu);  // the device writes it all
                                        }});
  fixture f(cfg);
  auto c = f.ctx.alloc(4096);
  auto path = dir.path / "w";
  auto content = random_bytes(4096, 21);
  write_file(path, content);
  auto file = xrtio::file::open(path, xrtio::file_mode::read);
  asio::io_context io;
  outcome run_done, fail, wait;
  int order = 0, run_at = 0, wait_at = 0;
  xrtio::async_run(f.ctx.kernel("held"), xrtio::out(c), asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                     CHECK(!ec);
                     run_at = ++order;
                     run_done.done = true;
                   }));
  xrtio::async_read_file(file, 0, xrtio::out(c.sub(64, 128)), record(io, fail));
  xrtio::async_read_file(file, 0, xrtio::out(c), xrtio::io_options{.on_conflict = xrtio::conflict_policy::wait},
                         asio::bind_executor(io, [&](std::error_code ec, std::size_t n) {
                           wait.ec = ec;
                           wait.bytes = n;
                           wait.done = true;
                           wait_at = ++order;
                         }));
  run_until(io, fail);
  CHECK(fail.ec == xrtio::errc::range_in_use);
  CHECK(fail.bytes == 0);
  CHECK(!run_done.done);
  CHECK(!wait.done);  // queued behind the run, which is still on the device
  open = true;
  run_until(io, wait);
  CHECK(run_done.done);
  CHECK(run_at == 1);
  CHECK(wait_at == 2);
  CHECK(!wait.ec);
  CHECK(wait.bytes == 4096);
  CHECK(std::memcmp(c.map().data(), content.data(), 4096) == 0);  // the file's, read after the run
}

TEST_CASE("file io: a run writing a range being written out fails with range_in_use, or waits for the write") {
  for (bool uring : {true, false}) {
    CAPTURE(uring);
    fixture f({}, xrtio::runtime_options{.file_io_uring = uring});
    auto v = rtest::make_vadd(f.ctx, 1024);
    pipe_pair p;
    // Fill the pipe so the write blocks until the test drains it.
    REQUIRE(::fcntl(p.wr, F_SETFL, O_NONBLOCK) == 0);
    std::vector<char> junk(65536, 'j');
    std::size_t filled = 0;
    for (ssize_t n; (n = ::write(p.wr, junk.data(), junk.size())) > 0;) filled += std::size_t(n);
    REQUIRE(::fcntl(p.wr, F_SETFL, 0) == 0);
    auto out = xrtio::file::adopt(::dup(p.wr));
    std::vector<std::uint32_t> before(1024);
    v.c.read(std::span<std::uint32_t>(before));
    asio::io_context io;
    outcome w, fail, wait;
    int order = 0, w_at = 0, run_at = 0;
    xrtio::async_write_file(out, 0, xrtio::in(v.c), asio::bind_executor(io, [&](std::error_code ec, std::size_t n) {
                              w.ec = ec;
                              w.bytes = n;
                              w.done = true;
                              w_at = ++order;
                            }));
    io.run_for(20ms);
    CHECK(!w.done);
    auto run = [&](xrtio::conflict_policy pol, outcome& o) {
      xrtio::async_run(f.ctx.kernel("vadd"), xrtio::in(v.a), xrtio::in(v.b), xrtio::out(v.c), v.n,
                       xrtio::run_options{.on_conflict = pol},
                       asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                         o.ec = ec;
                         o.done = true;
                         if (&o == &wait) run_at = ++order;
                       }));
    };
    run(xrtio::conflict_policy::fail, fail);
    run(xrtio::conflict_policy::wait, wait);
    run_until(io, fail);  // the write cannot end meanwhile: the pipe is full
    CHECK(fail.ec == xrtio::errc::range_in_use);
    CHECK(!wait.done);
    // Drain: the junk, then what the write sent, which must be c as it was
    // before the run (the run waited).
    std::vector<char> got(filled + 4096);
    std::size_t have = 0;
    while (have < got.size()) {
      ssize_t n = ::read(p.rd, got.data() + have, got.size() - have);
      REQUIRE(n > 0);
      have += std::size_t(n);
    }
    run_until(io, wait);
    run_until(io, w);
    CHECK(!w.ec);
    CHECK(w.bytes == 4096);
    CHECK(!wait.ec);
    CHECK(w_at == 1);
    CHECK(run_at == 2);
    CHECK(std::memcmp(got.data() + filled, before.data(), 4096) == 0);
    CHECK(rtest::vadd_ok(v));
  }
}

TEST_CASE("file io: completions run exactly once in their strands on a thread_pool and with every token") {
  temp_dir dir;
  fixture f;
  auto path = dir.path / "x";
  auto content = random_bytes(64 << 10, 31);
  write_file(path, content);
  auto file = xrtio::file::open(path, xrtio::file_mode::read, {.chunk_size = 8192});
  asio::thread_pool pool(4);
  constexpr int per_strand = 50, strands = 4;
  std::atomic<int> calls{0}, wrong{0}, failed{0};
  std::vector<xrtio::buffer> bufs;
  for (int s = 0; s < strands; ++s) bufs.push_back(f.ctx.alloc(per_strand * 4096));
  std::vector<asio::strand<asio::thread_pool::executor_type>> ss;
  for (int s = 0; s < strands; ++s) ss.push_back(asio::make_strand(pool));
  std::vector<std::atomic<int>> seen(strands * per_strand);
  for (int s = 0; s < strands; ++s)
    asio::post(ss[std::size_t(s)], [&, s] {
      for (int i = 0; i < per_strand; ++i)
        xrtio::async_read_file(file, std::uint64_t(i) * 1024, bufs[std::size_t(s)].sub(4096, std::size_t(i) * 4096),
                               asio::bind_executor(ss[std::size_t(s)], [&, s, i](std::error_code ec, std::size_t n) {
                                 if (!ss[std::size_t(s)].running_in_this_thread()) ++wrong;
                                 if (ec || n != 4096) ++failed;
                                 seen[std::size_t(s * per_strand + i)]++;
                                 ++calls;
                               }));
    });
  auto until = std::chrono::steady_clock::now() + 30s;
  while (calls.load() < strands * per_strand && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(10ms);  // a second call would show up here
  pool.join();
  CHECK(calls.load() == strands * per_strand);
  CHECK(wrong.load() == 0);
  CHECK(failed.load() == 0);
  for (auto& c : seen) CHECK(c.load() == 1);
  for (int s = 0; s < strands; ++s)
    for (int i = 0; i < per_strand; ++i)
      CHECK(std::memcmp(bufs[std::size_t(s)].map().data() + i * 4096, content.data() + i * 1024, 4096) == 0);
  // use_future, deferred and a coroutine.
  auto buf = f.ctx.alloc(4096);
  auto fut = xrtio::async_read_file(file, 0, buf, asio::use_future);
  CHECK(fut.get() == 4096);
  asio::io_context io;
  auto op = xrtio::async_write_file(file, 0, buf, asio::experimental::deferred);
  std::error_code wec;
  std::move(op)(asio::bind_executor(io, [&](std::error_code ec, std::size_t) { wec = ec; }));
  io.run();
  CHECK(wec == std::errc::bad_file_descriptor);  // opened read-only
  std::size_t got = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    got = co_await xrtio::async_read_file(file, 60 << 10, buf, asio::use_awaitable);
  }, asio::detached);
  io.restart();
  io.run();
  CHECK(got == 4096);
}

TEST_CASE("file io: async_load_file streams files into views with progress, and refuses a file larger than its "
          "buffer before reading") {
  temp_dir dir;
  fixture f;
  auto a = random_bytes(300000, 41), c = random_bytes(5000, 43);
  write_file(dir.path / "a", a);
  write_file(dir.path / "b", {});
  write_file(dir.path / "c", c);
  auto buf = f.ctx.alloc(1 << 20);
  asio::io_context io;
  std::vector<xrtio::load_progress> seen;
  xrtio::load_options lo;
  lo.file.chunk_size = 16 << 10;
  lo.file.queue_depth = 2;
  lo.progress = [&](const xrtio::load_progress& p) { seen.push_back(p); };
  outcome o;
  xrtio::async_load_file({{dir.path / "a", buf.sub(300000, 0)}, {dir.path / "b", buf.sub(4096, 300000)},
                          {dir.path / "c", buf.sub(8192, 512 << 10)}},
                         lo, record(io, o));
  CHECK(!o.done);  // never inline
  run_until(io, o);
  CHECK_MESSAGE(!o.ec, o.ec.message());
  CHECK(o.bytes == 305000);
  CHECK(std::memcmp(buf.map().data(), a.data(), a.size()) == 0);
  CHECK(std::memcmp(buf.map().data() + (512 << 10), c.data(), c.size()) == 0);
  REQUIRE(seen.size() >= 4);  // a in 10 segments of 32 KiB, b once, c once
  for (std::size_t i = 1; i < seen.size(); ++i) CHECK(seen[i].bytes_done >= seen[i - 1].bytes_done);
  CHECK(seen.back().bytes_done == 305000);
  CHECK(seen.back().bytes_total == 305000);
  CHECK(seen.back().file_index == 2);
  // Too large for its buffer: nothing read at all, even of the files before it.
  auto reads = f.rt.stats().file_reads;
  outcome big;
  xrtio::async_load_file({{dir.path / "c", buf.sub(4096, 0)}, {dir.path / "a", buf.sub(4096, 8192)}}, {},
                         record(io, big));
  run_until(io, big);
  CHECK(big.ec == xrtio::errc::out_of_range);
  CHECK(f.rt.stats().file_reads == reads);
  outcome missing;
  xrtio::async_load_file(dir.path / "nope", buf, {}, record(io, missing));
  run_until(io, missing);
  CHECK(missing.ec == std::errc::no_such_file_or_directory);
}

TEST_CASE("file io: async_load_file stops at a terminal or partial cancellation emitted from its progress callback, "
          "between segments") {
  // Between two segments no read is in flight to take a cancellation:
  // before, the load went on to the end and completed with success (found
  // by a helper's new-user audit of the README).
  temp_dir dir;
  fixture f;
  auto a = random_bytes(256 << 10, 47);
  write_file(dir.path / "a", a);
  write_file(dir.path / "b", random_bytes(4096, 48));
  auto buf = f.ctx.alloc(1 << 20);
  asio::io_context io;
  for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial}) {
    CAPTURE(static_cast<int>(type));
    asio::cancellation_signal signal;
    int reports = 0;
    xrtio::load_options lo;
    lo.file.chunk_size = 16 << 10;
    lo.file.queue_depth = 2;  // segments of 32 KiB: 8 for a
    lo.progress = [&](const xrtio::load_progress&) {
      if (++reports == 2) signal.emit(type);
    };
    auto reads = f.rt.stats().file_reads;
    outcome o;
    std::vector<xrtio::load_item> items{{dir.path / "a", buf.sub(a.size(), 0)}, {dir.path / "b", buf.sub(4096, 512 << 10)}};
    xrtio::async_load_file(items, lo, asio::bind_cancellation_slot(signal.slot(), record(io, o)));
    run_until(io, o);
    CHECK(o.ec == asio::error::operation_aborted);
    CHECK(o.bytes == 64 << 10);  // the two segments reported
    CHECK(reports == 2);
    CHECK(f.rt.stats().file_reads - reads == 2);
    CHECK(std::memcmp(buf.map().data(), a.data(), 64 << 10) == 0);
    CHECK(!leased(buf));
    io.restart();
  }
}

// The README's example, compiled and run here.
namespace readme {
asio::awaitable<std::size_t> load_weights(xrtio::context ctx, std::filesystem::path path) {
  auto weights = ctx.alloc(std::filesystem::file_size(path));
  auto f = xrtio::file::open(path, xrtio::file_mode::read);  // O_DIRECT where the file system allows it
  std::size_t n = co_await xrtio::async_read_file(f, 0, xrtio::out(weights), asio::use_awaitable);
  // the buffer was leased for writing until every piece was in, then synced to the device
  co_return n;
}
}  // namespace readme

TEST_CASE("file io: the README example reads a file into a buffer") {
  temp_dir dir;
  fixture f;
  auto data = random_bytes(3 * 4096, 51);
  write_file(dir.path / "weights.bin", data);
  asio::io_context io;
  std::size_t n = 0;
  asio::co_spawn(io, readme::load_weights(f.ctx, dir.path / "weights.bin"),
                 [&](std::exception_ptr e, std::size_t got) {
                   CHECK(!e);
                   n = got;
                 });
  io.run();
  CHECK(n == data.size());
}

TEST_CASE("file io: a transfer waiting for its lease is withdrawn by cancellation or its timeout, never started") {
  // The run holding the range is held on the device by a gate (a latency
  // window can pass on a loaded host before the test cancels).
  temp_dir dir;
  std::atomic<bool> open{false};
  sim::device_config cfg;
  cfg.kernels.push_back(sim::kernel_def{"held",
                                        {{"out", xrtio::backend::arg_kind::buffer, 0, 0}},
                                        [&](sim::kernel_call& c) {
                                          while (!open.load() && !c.stop_requested()) std::this_thread::sleep_for(100us);
                                          auto out = c.buffer_as<std::uint32_t>(0);
                                          std::fill(out.begin(), out.end(), 0xfeedu);
                                        }});
  fixture f(cfg);
  auto c = f.ctx.alloc(4096);
  auto path = dir.path / "w";
  write_file(path, random_bytes(4096, 61));
  auto file = xrtio::file::open(path, xrtio::file_mode::read);
  asio::io_context io;
  outcome run_done, cancelled, expired;
  xrtio::async_run(f.ctx.kernel("held"), xrtio::out(c), asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                     run_done.ec = ec;
                     run_done.done = true;
                   }));
  asio::cancellation_signal sig;
  const xrtio::io_options wait{.on_conflict = xrtio::conflict_policy::wait};
  xrtio::async_read_file(file, 0, c, wait, asio::bind_cancellation_slot(sig.slot(), record(io, cancelled)));
  xrtio::async_read_file(file, 0, c, xrtio::io_options{.on_conflict = xrtio::conflict_policy::wait, .timeout = 20ms},
                         record(io, expired));
  io.run_for(5ms);
  sig.emit(asio::cancellation_type::total);  // any type withdraws a waiting transfer
  run_until(io, cancelled);
  run_until(io, expired);
  CHECK(cancelled.ec == asio::error::operation_aborted);
  CHECK(expired.ec == xrtio::errc::timed_out);
  CHECK(!run_done.done);
  CHECK(f.rt.stats().file_pieces == 0);
  open = true;
  run_until(io, run_done);
  CHECK(!run_done.ec);
  std::vector<std::uint32_t> got(1024);
  c.read(std::span<std::uint32_t>(got));
  CHECK(std::all_of(got.begin(), got.end(), [](std::uint32_t x) { return x == 0xfeedu; }));  // untouched by the withdrawn reads
}
TEST_CASE("file io: total cancellation is not honoured once pieces are in flight, and io_options::runtime picks the "
          "runtime") {
  fixture f;
  xrtio::runtime other(xrtio::runtime_options{.reactor_thread = true});
  pipe_pair p;
  auto file = xrtio::file::adopt(::dup(p.rd));
  auto buf = f.ctx.alloc(4096);
  asio::io_context io;
  asio::cancellation_signal sig;
  outcome o;
  xrtio::async_read_file(file, 0, buf, xrtio::io_options{.runtime = &other},
                         asio::bind_cancellation_slot(sig.slot(), record(io, o)));
  // Emitted only once the piece is issued: before that, any cancellation
  // withdraws the transfer (file_intake). Under qemu-user on a loaded CI
  // host, 20 ms of waiting was once not enough for the piece to be issued.
  auto until = std::chrono::steady_clock::now() + 10s;
  while (other.stats().file_pieces == 0 && std::chrono::steady_clock::now() < until) io.run_for(1ms);
  REQUIRE(other.stats().file_pieces >= 1);
  io.run_for(5ms);
  sig.emit(asio::cancellation_type::total);
  io.run_for(20ms);
  CHECK(!o.done);
  std::vector<char> data(4096, 'q');
  p.put(data.data(), data.size());
  run_until(io, o);
  CHECK(!o.ec);
  CHECK(o.bytes == 4096);
  CHECK(other.stats().file_reads == 1);
  CHECK(f.rt.stats().file_reads == 0);
}

TEST_CASE("file io: a write to /dev/full fails with ENOSPC, and adopted descriptors report O_DIRECT as they have it") {
  temp_dir dir;
  for (bool uring : {true, false}) {
    CAPTURE(uring);
    fixture f({}, xrtio::runtime_options{.file_io_uring = uring});
    int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
    if (full < 0) {
      MESSAGE("XRTIO-SKIP: no /dev/full: ENOSPC not tried");
      return;
    }
    auto df = xrtio::file::adopt(full);
    auto buf = f.ctx.alloc(4096);
    asio::io_context io;
    outcome w;
    xrtio::async_write_file(df, 0, buf, record(io, w));
    run_until(io, w);
    CHECK(w.ec == std::errc::no_space_on_device);
    CHECK(f.rt.stats().failed == 1);
  }
  auto path = dir.path / "d";
  write_file(path, random_bytes(4096, 71));
  int plain = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(plain >= 0);
  auto a = xrtio::file::adopt(plain);
  CHECK(!a.direct());
  CHECK(!a.direct_fallback_reason().empty());
  CHECK(a.native_handle() == plain);
  int d = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (d < 0) {
    MESSAGE("XRTIO-SKIP: O_DIRECT refused on " << path);
    return;
  }
  auto b = xrtio::file::adopt(d);
  CHECK(b.direct());
  CHECK(b.direct_fallback_reason().empty());
  CHECK(b.size() == 4096);
}

TEST_CASE("file io: a small read the page cache holds is done on the caller's thread and still completes through "
          "its executor, never inline") {
  temp_dir dir;
  auto path = dir.path / "cached";
  const auto content = random_bytes(256 << 10, 11);
  write_file(path, content);  // just written: in the page cache
  fixture f;
  auto file = xrtio::file::open(path, xrtio::file_mode::read, {.direct = false});
  // Whether this file system takes RWF_NOWAIT at all: if not, reads cannot
  // be done inline here, and the loop must have done them all.
  std::vector<std::byte> probe(4096);
  iovec v{probe.data(), probe.size()};
  bool nowait_works = ::preadv2(file.native_handle(), &v, 1, 0, RWF_NOWAIT) == 4096;
  if (!nowait_works) MESSAGE("preadv2(RWF_NOWAIT) refused here (errno " << errno << "): inline reads not checked");
  auto buf = f.ctx.alloc(64 << 10);
  asio::io_context io;
  std::mt19937 g(5);
  auto before = f.rt.stats();
  constexpr int reads = 50;
  for (int i = 0; i < reads; ++i) {
    std::size_t len = std::uniform_int_distribution<std::size_t>(1, 64 << 10)(g);
    std::size_t foff = std::uniform_int_distribution<std::size_t>(0, content.size() - len)(g);
    outcome o;
    bool returned = false;
    xrtio::async_read_file(file, foff, xrtio::out(buf.sub(len, 0)),
                           asio::bind_executor(io, [&](std::error_code ec, std::size_t n) {
                             CHECK(returned);  // not inside async_read_file
                             CHECK(!o.done);
                             o.ec = ec, o.bytes = n, o.done = true;
                           }));
    returned = true;
    run_until(io, o);
    REQUIRE(!o.ec);
    REQUIRE(o.bytes == len);
    CHECK(std::memcmp(buf.map().data(), content.data() + foff, len) == 0);
  }
  auto after = f.rt.stats();
  if (nowait_works) {
    CHECK(after.file_inline_reads - before.file_inline_reads == reads);
    CHECK(after.file_pieces == before.file_pieces);  // the loop issued nothing
  } else {
    CHECK(after.file_inline_reads == before.file_inline_reads);
  }
  CHECK(after.file_reads - before.file_reads == reads);
  CHECK(after.completed - before.completed == reads);
  CHECK(after.in_flight == 0);
  // The lease was released: a host write to the range succeeds.
  std::vector<std::byte> zeros(4096);
  buf.write(std::span<const std::byte>(zeros));

  SUBCASE("on a strand of a thread_pool inside any_io_executor: there, exactly once") {
    asio::thread_pool pool(2);
    asio::any_io_executor ex = asio::make_strand(pool);
    constexpr int n = 40;
    std::atomic<int> calls{0}, wrong{0};
    auto s0 = f.rt.stats();
    for (int i = 0; i < n; ++i)
      xrtio::async_read_file(file, std::uint64_t(i) * 1024, xrtio::out(buf.sub(1024, std::size_t(i) * 1024)),
                             asio::bind_executor(ex, [&](std::error_code ec, std::size_t bytes) {
                               if (ec || bytes != 1024 || !ex.target<asio::strand<asio::thread_pool::executor_type>>()
                                                              ->running_in_this_thread())
                                 ++wrong;
                               ++calls;
                             }));
    pool.join();
    CHECK(calls == n);
    CHECK(wrong == 0);
    // At once while no other read whose handler runs on the thread_pool was
    // in flight (the first at least); else, if the file engine is (or will
    // be) the ring, declined and read by the loop with the others.
    auto s1 = f.rt.stats();
    if (nowait_works) {
      CHECK(s1.file_inline_reads - s0.file_inline_reads >= 1);
      CHECK(s1.file_inline_reads - s0.file_inline_reads + (s1.file_inline_declined - s0.file_inline_declined) == n);
    }
    CHECK(std::memcmp(buf.map().data(), content.data(), n * 1024) == 0);
  }
  SUBCASE("past the limit, or with the limit 0, the loop reads") {
    auto big = f.ctx.alloc(128 << 10);
    auto small = xrtio::file::open(path, xrtio::file_mode::read, {.direct = false, .inline_read_limit = 64 << 10});
    auto none = xrtio::file::open(path, xrtio::file_mode::read, {.direct = false, .inline_read_limit = 0});
    for (auto* which : {&small, &none}) {
      auto s0 = f.rt.stats();
      outcome o;
      std::size_t len = which == &small ? (128u << 10) : 4096u;  // over a 64 KiB limit, or any size
      xrtio::async_read_file(*which, 0, xrtio::out(big.sub(len, 0)), record(io, o));
      run_until(io, o);
      REQUIRE(!o.ec);
      CHECK(o.bytes == len);
      CHECK(std::memcmp(big.map().data(), content.data(), len) == 0);
      auto s1 = f.rt.stats();
      CHECK(s1.file_inline_reads == s0.file_inline_reads);
      CHECK(s1.file_pieces > s0.file_pieces);
    }
  }
  SUBCASE("a read reaching the end of the file: the bytes up to it, done on the caller's thread (a second "
          "non-blocking read finds the end), and one at the end is out_of_range from the loop") {
    // A small file read into a larger buffer, the common case, and the tail
    // of a larger one.
    auto small_path = dir.path / "small";
    const auto small_content = random_bytes(100, 12);
    write_file(small_path, small_content);
    auto small = xrtio::file::open(small_path, xrtio::file_mode::read, {.direct = false});
    auto tail = content.size() - 1000;
    struct step {
      xrtio::file* which;
      std::uint64_t offset;
      const std::byte* expect;
      std::size_t bytes;
    };
    for (auto [which, offset, expect, bytes] :
         {step{&file, tail, content.data() + tail, 1000}, step{&small, 0, small_content.data(), 100}}) {
      CAPTURE(bytes);
      auto s0 = f.rt.stats();
      outcome o;
      xrtio::async_read_file(*which, offset, xrtio::out(buf.sub(8192, 0)), record(io, o));
      run_until(io, o);
      REQUIRE(!o.ec);
      CHECK(o.bytes == bytes);
      CHECK(std::memcmp(buf.map().data(), expect, bytes) == 0);
      auto s1 = f.rt.stats();
      if (nowait_works) {
        CHECK(s1.file_inline_reads - s0.file_inline_reads == 1);
        CHECK(s1.file_pieces == s0.file_pieces);  // the loop issued nothing
        CHECK(s1.file_bytes_read - s0.file_bytes_read == bytes);
      }
      CHECK(s1.file_reads - s0.file_reads == 1);
      buf.write(std::span<const std::byte>(zeros));  // the lease is released
    }
    auto s0 = f.rt.stats();
    outcome o;
    xrtio::async_read_file(small, 100, xrtio::out(buf.sub(4096, 0)), record(io, o));
    run_until(io, o);
    CHECK(o.ec == xrtio::errc::out_of_range);
    auto s1 = f.rt.stats();
    CHECK(s1.file_inline_reads == s0.file_inline_reads);
    CHECK(s1.file_pieces > s0.file_pieces);
  }
}

TEST_CASE("file io: a cached read of up to inline_read_limit (by default one chunk, 1 MiB) is done on the caller's "
          "thread, one byte more goes to the loop") {
  temp_dir dir;
  auto path = dir.path / "chunk";
  const xrtio::file_options defaults;
  constexpr std::size_t limit = std::size_t(1) << 20;  // the default: one default chunk
  CHECK(defaults.inline_read_limit == defaults.chunk_size);
  const auto content = random_bytes(limit + 8192, 13);
  write_file(path, content);  // just written: in the page cache
  fixture f;
  auto file = xrtio::file::open(path, xrtio::file_mode::read, {.direct = false});
  auto four = xrtio::file::open(path, xrtio::file_mode::read, {.direct = false, .inline_read_limit = 4096});
  std::vector<std::byte> probe(4096);
  iovec v{probe.data(), probe.size()};
  if (::preadv2(file.native_handle(), &v, 1, 0, RWF_NOWAIT) != 4096) {
    MESSAGE("XRTIO-SKIP: preadv2(RWF_NOWAIT) refused here (errno " << errno << "): no read is done inline");
    return;
  }
  auto buf = f.ctx.alloc(limit + 1);
  asio::io_context io;
  // (file, length, done inline): a 1 MiB read with the default options
  // inline (the loop's two thread hops cost more than the copy:
  // docs/PERFORMANCE.md, "File I/O"), one byte more through the loop; the
  // same at an explicit 4 KiB limit.
  struct step {
    xrtio::file* which;
    std::size_t len;
    bool inline_read;
  };
  for (auto [which, len, inline_read] : {step{&file, limit, true}, step{&file, limit + 1, false},
                                         step{&four, 4096, true}, step{&four, 4097, false}}) {
    CAPTURE(len);
    buf.write(std::span<const std::byte>(std::vector<std::byte>(len)));  // no byte left from the last step
    auto s0 = f.rt.stats();
    outcome o;
    xrtio::async_read_file(*which, 4096, xrtio::out(buf.sub(len, 0)), record(io, o));
    run_until(io, o);
    REQUIRE(!o.ec);
    CHECK(o.bytes == len);
    CHECK(std::memcmp(buf.map().data(), content.data() + 4096, len) == 0);
    auto s1 = f.rt.stats();
    CHECK(s1.file_inline_reads - s0.file_inline_reads == (inline_read ? 1u : 0u));
    if (inline_read) CHECK(s1.file_pieces == s0.file_pieces);  // the loop issued nothing
    else CHECK(s1.file_pieces > s0.file_pieces);
    CHECK(s1.file_reads - s0.file_reads == 1);
  }
}

namespace {
// One cached read of `len` bytes at offset 0 into buf[0, len), and from its
// completion handler `n` more at once (read i: `len` bytes at offset
// 3 * len * i into buf[len * i, len * (i + 1))), all on `io`; counts the n
// completions in `done`, short or failed reads (the first's too) in `failed`.
void fan_out(xrtio::file& file, const xrtio::buffer& buf, asio::io_context& io, int n, int& done, int& failed,
             std::size_t len = 4096) {
  xrtio::async_read_file(file, 0, xrtio::out(buf.sub(len, 0)),
                         asio::bind_executor(io, [&, n, len](std::error_code ec, std::size_t bytes) {
                           if (ec || bytes != len) ++failed;
                           for (int i = 1; i <= n; ++i)
                             xrtio::async_read_file(
                                 file, std::uint64_t(i) * 3 * len, xrtio::out(buf.sub(len, std::size_t(i) * len)),
                                 asio::bind_executor(io, [&, len](std::error_code e, std::size_t b) {
                                   if (e || b != len) ++failed;
                                   ++done;
                                 }));
                         }));
}
}  // namespace

TEST_CASE("file io: a cached read alone is done on the caller's thread, but reads issued while others of the "
          "caller's context are in flight go to the ring, in one submission") {
  temp_dir dir;
  auto path = dir.path / "fan";
  const auto content = random_bytes(1 << 20, 17);
  write_file(path, content);  // just written: in the page cache
  auto file = xrtio::file::open(path, xrtio::file_mode::read, {.direct = false});
  std::vector<std::byte> probe(4096);
  iovec v{probe.data(), probe.size()};
  if (::preadv2(file.native_handle(), &v, 1, 0, RWF_NOWAIT) != 4096) {
    MESSAGE("XRTIO-SKIP: preadv2(RWF_NOWAIT) refused here (errno " << errno << "): no read is done inline");
    return;
  }
  constexpr int n = 8;
  auto check_data = [&](const xrtio::buffer& buf) {
    CHECK(std::memcmp(buf.map().data(), content.data(), 4096) == 0);
    for (int i = 1; i <= n; ++i)
      CHECK(std::memcmp(buf.map().data() + std::size_t(i) * 4096, content.data() + std::size_t(i) * 3 * 4096, 4096) ==
            0);
  };

  SUBCASE("either reactor mode: counted") {
    fixture f;
    auto buf = f.ctx.alloc((n + 1) * 4096);
    asio::io_context io;
    auto s0 = f.rt.stats();
    int done = 0, failed = 0;
    fan_out(file, buf, io, n, done, failed);
    auto until = std::chrono::steady_clock::now() + 30s;
    while (done < n && std::chrono::steady_clock::now() < until) io.run_one_for(10ms);
    REQUIRE(done == n);
    CHECK(failed == 0);
    check_data(buf);
    auto s1 = f.rt.stats();
    CHECK(s1.file_reads - s0.file_reads == n + 1);
    CHECK(s1.file_inline_reads - s0.file_inline_reads + (s1.file_inline_declined - s0.file_inline_declined) == n + 1);
    CHECK(s1.file_pieces - s0.file_pieces ==
          s1.file_inline_declined - s0.file_inline_declined - (s1.file_gathered_reads - s0.file_gathered_reads));
    if (!rtest::inloop_mode() && s1.file_gathered_submissions > s0.file_gathered_submissions) {
      // A reactor thread: the n - 1 were gathered on the handler's thread
      // and read there in one submission once it returned
      // (test_file_gather.cpp has the rest).
      CHECK(s1.file_inline_reads - s0.file_inline_reads == 2);
      CHECK(s1.file_inline_declined - s0.file_inline_declined == n - 1);
      CHECK(s1.file_gathered_reads - s0.file_gathered_reads == n - 1);
      CHECK(s1.file_gathered_submissions - s0.file_gathered_submissions == 1);
      CHECK(s1.file_pieces - s0.file_pieces == 0);
    } else if (!rtest::inloop_mode() && s1.file_path == xrtio::file_io_path::io_uring) {
      FAIL("the loop's ring works here, yet none of the n - 1 was gathered on the caller's thread");
    } else if (s1.file_path == xrtio::file_io_path::io_uring) {
      // The first read, alone, and the first of the n (its predecessor's
      // handler was running: no longer in flight) at once; the other n - 1
      // each found reads of the same io_context in flight.
      CHECK(s1.file_inline_reads - s0.file_inline_reads == 2);
      CHECK(s1.file_inline_declined - s0.file_inline_declined == n - 1);
      CHECK(s1.file_submissions - s0.file_submissions >= 1);
      CHECK(s1.file_submissions - s0.file_submissions <= n - 1);
      MESSAGE((n - 1) << " reads sent to the loop in " << s1.file_submissions - s0.file_submissions << " submission(s)");
    } else {
      // io_uring refused: reads are declined only until the loop has made
      // its engine (the options ask for the ring), the pool, at the first.
      MESSAGE("io_uring refused here: " << s1.file_inline_declined - s0.file_inline_declined << " read(s) declined before the pool was made");
    }
    // All handlers have run: a read alone is done at once again.
    outcome o;
    xrtio::async_read_file(file, 0, xrtio::out(buf.sub(4096, 0)), record(io, o));
    run_until(io, o);
    CHECK(!o.ec);
    CHECK(f.rt.stats().file_inline_reads - s1.file_inline_reads == 1);
    CHECK(f.rt.stats().in_flight == 0);
    // Over 64 KiB the copy outweighs the system call: each done at once
    // all the same.
    auto s2 = f.rt.stats();
    auto big = f.ctx.alloc(3 * (128 << 10));
    done = 0;
    fan_out(file, big, io, 2, done, failed, 128 << 10);
    until = std::chrono::steady_clock::now() + 30s;
    io.restart();
    while (done < 2 && std::chrono::steady_clock::now() < until) io.run_one_for(10ms);
    REQUIRE(done == 2);
    CHECK(failed == 0);
    for (std::size_t i = 0; i < 3; ++i)
      CHECK(std::memcmp(big.map().data() + i * (128 << 10), content.data() + i * 3 * (128 << 10), 128 << 10) == 0);
    auto s3 = f.rt.stats();
    CHECK(s3.file_inline_reads - s2.file_inline_reads == 3);
    CHECK(s3.file_inline_declined == s2.file_inline_declined);
  }
  SUBCASE("in-loop, driven by the handlers' own thread: the n - 1 share one io_uring_enter") {
    // The driver takes requests between handlers: the n - 1 reads the
    // handler issued reach one pass together.
    xrtio::runtime rt(xrtio::runtime_options{.reactor_thread = false});
    auto ctx = sim::open({});
    ctx.bind(rt);
    auto buf = ctx.alloc((n + 1) * 4096);
    asio::io_context io;
    auto s0 = rt.stats();
    int done = 0, failed = 0;
    fan_out(file, buf, io, n, done, failed);
    xrtio::run(io, rt);  // returns when io runs out of work: every handler has run
    CHECK(done == n);
    CHECK(failed == 0);
    check_data(buf);
    auto s1 = rt.stats();
    // The first read, done at once, asked the loop to make its engine
    // (reactor::file_prepare): the driver's first pass made it, before the
    // handler ran. On the ring the n - 1 are declined and share one
    // submission; where io_uring is refused the engine is the pool, which
    // declines nothing, and all are done at once.
    if (s1.file_path == xrtio::file_io_path::io_uring) {
      CHECK(s1.file_inline_reads - s0.file_inline_reads == 2);
      CHECK(s1.file_inline_declined - s0.file_inline_declined == n - 1);
      CHECK(s1.file_pieces - s0.file_pieces == n - 1);
      CHECK(s1.file_submissions - s0.file_submissions == 1);
    } else {
      MESSAGE("io_uring refused here: the thread pool was made, and declines nothing");
      CHECK(s1.file_path == xrtio::file_io_path::thread_pool);
      CHECK(s1.file_inline_reads - s0.file_inline_reads == n + 1);
      CHECK(s1.file_inline_declined == s0.file_inline_declined);
      CHECK(s1.file_pieces == s0.file_pieces);
    }
  }
  SUBCASE("on the thread pool engine nothing is declined: the pool does one pread per piece anyway") {
    fixture f({}, xrtio::runtime_options{.file_io_uring = false});
    auto buf = f.ctx.alloc((n + 1) * 4096);
    asio::io_context io;
    auto fan = [&](const char* when) {
      INFO(when);
      auto s0 = f.rt.stats();
      int done = 0, failed = 0;
      io.restart();
      fan_out(file, buf, io, n, done, failed);
      auto until = std::chrono::steady_clock::now() + 30s;
      while (done < n && std::chrono::steady_clock::now() < until) io.run_one_for(10ms);
      REQUIRE(done == n);
      CHECK(failed == 0);
      check_data(buf);
      auto s1 = f.rt.stats();
      CHECK(s1.file_inline_reads - s0.file_inline_reads == n + 1);
      CHECK(s1.file_inline_declined - s0.file_inline_declined == 0);
      CHECK(s1.file_pieces - s0.file_pieces == 0);
    };
    // Whether or not the loop has made its engine yet (the first read done
    // at once asks it to, reactor::file_prepare): the options say which it
    // will be.
    fan("engine perhaps not made yet");
    // A read through the loop (inline_read_limit 0) makes the pool.
    auto loop_file = xrtio::file::open(path, xrtio::file_mode::read, {.direct = false, .inline_read_limit = 0});
    outcome o;
    xrtio::async_read_file(loop_file, 0, xrtio::out(buf.sub(4096, 0)), record(io, o));
    io.restart();
    run_until(io, o);
    CHECK(!o.ec);
    REQUIRE(f.rt.stats().file_path == xrtio::file_io_path::thread_pool);
    fan("the pool made");
  }
}

TEST_CASE("file io: with a trace recorded every read goes through the loop (its events stay complete)") {
  temp_dir dir;
  auto path = dir.path / "traced";
  const auto content = random_bytes(8192, 12);
  write_file(path, content);
  fixture f({}, xrtio::runtime_options{.trace_capacity = 1024});
  auto file = xrtio::file::open(path, xrtio::file_mode::read, {.direct = false});
  auto buf = f.ctx.alloc(8192);
  asio::io_context io;
  // Twice: the second comes once this thread has registered with io, where
  // an untraced runtime would read it before registering (read_at_once).
  for (int i = 0; i < 2; ++i) {
    INFO("read " << i);
    outcome o;
    xrtio::async_read_file(file, 0, xrtio::out(buf), record(io, o));
    run_until(io, o);
    REQUIRE(!o.ec);
    CHECK(o.bytes == 8192);
  }
  CHECK(f.rt.stats().file_inline_reads == 0);
  CHECK(f.rt.stats().file_pieces >= 2);
}

// ---- Reads done at once, before registering (reactor::read_at_once;
// docs/DESIGN.md, "File I/O", "Done at once, unregistered") ----

namespace {

// The ops registered in io's completion registry now.
std::size_t registered(const std::shared_ptr<xrtio::detail::completion_registry>& reg) {
  std::lock_guard lock(reg->mutex);
  return std::size_t(std::count_if(reg->table.begin(), reg->table.end(), [](auto* op) { return op != nullptr; }));
}

// A cached file of 64 KiB, whether this file system takes RWF_NOWAIT (else
// no read is done at once here).
struct cached_file {
  temp_dir dir;
  std::vector<std::byte> content = random_bytes(64 << 10, 31);
  xrtio::file file;
  bool nowait = false;
  cached_file() {
    write_file(dir.path / "at-once", content);  // just written: in the page cache
    file = xrtio::file::open(dir.path / "at-once", xrtio::file_mode::read, {.direct = false});
    std::vector<std::byte> probe(4096);
    iovec v{probe.data(), probe.size()};
    nowait = ::preadv2(file.native_handle(), &v, 1, 0, RWF_NOWAIT) == 4096;
  }
};

}  // namespace

TEST_CASE("file io: a cached read done at once takes no slot in its context's registry, and counts as in flight "
          "there until its handler runs") {
  cached_file cf;
  if (!cf.nowait) {
    MESSAGE("XRTIO-SKIP: preadv2(RWF_NOWAIT) refused here: no read is done at once");
    return;
  }
  fixture f;
  auto buf = f.ctx.alloc(8192);
  asio::io_context io;
  // The first read registers (this thread does not know io's registry yet).
  outcome first;
  xrtio::async_read_file(cf.file, 0, xrtio::out(buf.sub(4096, 0)), record(io, first));
  auto reg = asio::use_service<xrtio::detail::completion_service>(io).registry();
  CHECK(registered(reg) == 1);
  run_until(io, first);
  REQUIRE(!first.ec);
  CHECK(registered(reg) == 0);
  for (int i = 1; i <= 3; ++i) {
    INFO("read " << i);
    auto s0 = f.rt.stats();
    outcome o;
    xrtio::async_read_file(cf.file, std::uint64_t(i) * 4096, xrtio::out(buf.sub(4096, 4096)), record(io, o));
    CHECK(f.rt.stats().file_inline_reads - s0.file_inline_reads == 1);
    CHECK(!o.done);  // never inline: its completion is queued in io
    CHECK(registered(reg) == 0);
    CHECK(reg->at_once.load() == 1);
    run_until(io, o);
    CHECK(!o.ec);
    CHECK(o.bytes == 4096);
    CHECK(std::memcmp(buf.map().data() + 4096, cf.content.data() + std::size_t(i) * 4096, 4096) == 0);
    CHECK(reg->at_once.load() == 0);
  }
}

namespace {
// Leaves page 1 of an 8 KiB file in the page cache and page 2 out of it
// (readahead off: POSIX_FADV_RANDOM). False if page 2 stayed cached, or if
// RWF_NOWAIT is refused (then nowait_errno is set).
bool first_page_only(int fd, int& nowait_errno) {
  std::vector<std::byte> probe(4096);
  iovec v{probe.data(), probe.size()};
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  if (::pread(fd, probe.data(), 4096, 0) != 4096) return false;
  if (::preadv2(fd, &v, 1, 4096, RWF_NOWAIT) >= 0) return false;
  if (errno != EAGAIN) nowait_errno = errno;
  return nowait_errno == 0;
}

// An 8 KiB file of random bytes, written to disk (so its pages can be
// evicted), with readahead off.
struct evictable_file {
  temp_dir dir;
  std::vector<std::byte> content;
  xrtio::file file;
  int fd = -1;
  evictable_file(const char* name, unsigned seed, xrtio::file_mode mode = xrtio::file_mode::read)
      : content(random_bytes(8192, seed)) {
    write_file(dir.path / name, content);
    file = xrtio::file::open(dir.path / name, mode, {.direct = false});
    fd = file.native_handle();
    REQUIRE(::fdatasync(fd) == 0);
    REQUIRE(::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM) == 0);  // no readahead of page 2
  }
};
}  // namespace

TEST_CASE("file io: a read begun at once that finds part of its range out of the page cache keeps its lease: "
          "nothing refuses it after it wrote into the buffer, and it completes whole") {
  // Page 1 cached, page 2 evicted: read_at_once copies page 1 and leaves
  // the rest to the loop. Another thread's host reads of the buffer take it
  // whenever it is free. Given back and taken again in between (the first
  // version), the transfer was sometimes refused with range_in_use after
  // it had written page 1 (a reviewer's probe: 1 in 2 to 164 tries).
  evictable_file ef("half-cached", 41);
  fixture f;
  auto buf = f.ctx.alloc(8192);
  asio::io_context io;
  outcome first;  // this thread learns io's registry
  xrtio::async_read_file(ef.file, 0, xrtio::out(buf), record(io, first));
  run_until(io, first);
  REQUIRE(!first.ec);
  std::atomic<bool> stop{false};
  std::thread host([&] {
    std::vector<std::byte> tmp(8192);
    while (!stop.load(std::memory_order_relaxed)) {
      try {
        buf.read(tmp);
      } catch (const xrtio::error&) {  // the transfer holds it
      }
    }
  });
  const std::vector<std::byte> zeros(8192);
  int partial = 0, whole = 0, refused = 0, refused_written = 0, wrong = 0, nowait_errno = 0;
  auto until = std::chrono::steady_clock::now() + 20s;
  for (int i = 0; i < 20000 && partial < 2000 && std::chrono::steady_clock::now() < until; ++i) {
    for (;;) {
      try {
        buf.write(std::span<const std::byte>(zeros));
        break;
      } catch (const xrtio::error&) {  // the host thread holds it
      }
    }
    if (!first_page_only(ef.fd, nowait_errno)) {
      if (nowait_errno != 0) break;
      continue;
    }
    ++partial;
    outcome o;
    xrtio::async_read_file(ef.file, 0, xrtio::out(buf), record(io, o));
    run_until(io, o);
    if (o.ec == xrtio::errc::range_in_use) {
      ++refused;  // fine if it never wrote: the host thread held the buffer at its start
      if (std::memcmp(buf.map().data(), ef.content.data(), 4096) == 0) ++refused_written;
    } else if (!o.ec && o.bytes == 8192) {
      ++whole;
      if (std::memcmp(buf.map().data(), ef.content.data(), 8192) != 0) ++wrong;
    } else {
      FAIL("unexpected outcome: " << o.ec.message() << ", " << o.bytes << " bytes");
    }
  }
  stop = true;
  host.join();
  if (nowait_errno != 0) {
    MESSAGE("XRTIO-SKIP: preadv2(RWF_NOWAIT) refused here (errno " << nowait_errno << "): no read is done at once");
    return;
  }
  if (partial == 0) {
    MESSAGE("XRTIO-SKIP: the page cache kept the file's second page after POSIX_FADV_DONTNEED here");
    return;
  }
  MESSAGE(partial << " reads found page 2 out of the cache: " << whole << " whole, " << refused << " refused ("
                  << refused_written << " of them after writing)");
  CHECK(refused_written == 0);
  CHECK(wrong == 0);
  CHECK(whole > 0);
}

TEST_CASE("file io: total cancellation of a read that wrote part of its range on the caller's thread is not "
          "honoured: it completes whole") {
  // Invariant 4: total cancellation means nothing happened. Page 1 is read
  // on the caller's thread (at once, or, for the thread's first read, in
  // the usual submission), page 2 is left to the loop; the cancellation
  // comes before the loop takes the transfer in.
  evictable_file ef("half-cached-cancel", 43);
  fixture f;
  auto buf = f.ctx.alloc(8192);
  asio::io_context io;
  int tried = 0, whole = 0, aborted = 0, nowait_errno = 0;
  for (int i = 0; i < 400 && tried < 40; ++i) {
    if (!first_page_only(ef.fd, nowait_errno)) {
      if (nowait_errno != 0) break;
      continue;
    }
    ++tried;
    asio::cancellation_signal sig;
    outcome o;
    xrtio::async_read_file(ef.file, 0, xrtio::out(buf), asio::bind_cancellation_slot(sig.slot(), record(io, o)));
    sig.emit(asio::cancellation_type::total);
    run_until(io, o);
    if (!o.ec && o.bytes == 8192) {
      ++whole;
      CHECK(std::memcmp(buf.map().data(), ef.content.data(), 8192) == 0);
    } else if (o.ec == asio::error::operation_aborted) {
      ++aborted;
    } else {
      FAIL("unexpected outcome: " << o.ec.message() << ", " << o.bytes << " bytes");
    }
  }
  if (nowait_errno != 0) {
    MESSAGE("XRTIO-SKIP: preadv2(RWF_NOWAIT) refused here (errno " << nowait_errno << "): no read is done at once");
    return;
  }
  if (tried == 0) {
    MESSAGE("XRTIO-SKIP: the page cache kept the file's second page after POSIX_FADV_DONTNEED here");
    return;
  }
  MESSAGE(tried << " reads with page 2 out of the cache, cancelled (total) at once: " << whole << " whole, " << aborted
                << " aborted");
  CHECK(aborted == 0);
  CHECK(whole == tried);
}


TEST_CASE("file io: a transfer whose cancellation slot cannot take its handler throws from the initiating call, "
          "registered nowhere and leasing nothing") {
  evictable_file ef("slot", 47, xrtio::file_mode::read | xrtio::file_mode::write);
  auto& file = ef.file;
  const auto& content = ef.content;
  fixture f;
  auto buf = f.ctx.alloc(8192);
  asio::io_context io;
  auto reg = asio::use_service<xrtio::detail::completion_service>(io).registry();
  auto attempt = [&](auto&& initiate) {
    bool ran = false;
    auto state = std::make_shared<int>(0);
    std::weak_ptr<int> seen = state;
    CHECK_THROWS_AS(initiate(slot_refused_handler{std::move(state), &ran, io.get_executor()}), std::bad_alloc);
    CHECK(seen.expired());  // the handler was destroyed
    io.restart();
    io.poll();
    CHECK(!ran);
    CHECK(registered(reg) == 0);
    buf.write(std::span<const std::byte>(content));  // no lease left on the buffer
  };
  SUBCASE("a write") {
    attempt([&](slot_refused_handler h) { xrtio::async_write_file(file, 0, xrtio::in(buf), std::move(h)); });
  }
  SUBCASE("a read whose first page was read at once, its lease kept for the rest") {
    int fd = ef.fd;
    outcome warm;  // this thread learns io's registry
    xrtio::async_read_file(file, 0, xrtio::out(buf), record(io, warm));
    run_until(io, warm);
    // Page 2 may be back in the cache by the time of the read (the probe's
    // NOWAIT read may start reading it in): then the read is done whole at
    // once, never reaching the slot, and the case is tried again.
    int nowait_errno = 0;
    bool judged = false;
    for (int i = 0; i < 100 && !judged && nowait_errno == 0; ++i) {
      if (!first_page_only(fd, nowait_errno)) continue;
      bool ran = false;
      auto state = std::make_shared<int>(0);
      std::weak_ptr<int> seen = state;
      try {
        xrtio::async_read_file(file, 0, xrtio::out(buf), slot_refused_handler{std::move(state), &ran, io.get_executor()});
      } catch (const std::bad_alloc&) {
        judged = true;
      }
      io.restart();
      io.poll();
      if (!judged) continue;
      CHECK(seen.expired());
      CHECK(!ran);
      CHECK(registered(reg) == 0);
      buf.write(std::span<const std::byte>(content));  // the lease it kept was given back
    }
    if (!judged)
      MESSAGE("XRTIO-SKIP: no read begun at once with its rest left to the loop here (RWF_NOWAIT errno "
              << nowait_errno << ", or page 2 came back into the cache each time)");
  }
}

TEST_CASE("file io: an io_context destroyed with the completion of a read done at once queued destroys its handler "
          "unrun, and the read leaves its context's count") {
  cached_file cf;
  if (!cf.nowait) {
    MESSAGE("XRTIO-SKIP: preadv2(RWF_NOWAIT) refused here: no read is done at once");
    return;
  }
  fixture f;
  auto buf = f.ctx.alloc(4096);
  auto io = std::make_unique<asio::io_context>();
  outcome first;
  xrtio::async_read_file(cf.file, 0, xrtio::out(buf), record(*io, first));
  run_until(*io, first);
  REQUIRE(!first.ec);
  auto reg = asio::use_service<xrtio::detail::completion_service>(*io).registry();
  auto s0 = f.rt.stats();
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> handler_state = alive;
  bool ran = false;
  xrtio::async_read_file(cf.file, 8192, xrtio::out(buf),
                         asio::bind_executor(*io, [&ran, a = std::move(alive)](std::error_code, std::size_t) { ran = true; }));
  CHECK(f.rt.stats().file_inline_reads - s0.file_inline_reads == 1);
  CHECK(reg->at_once.load() == 1);
  CHECK(!handler_state.expired());
  io.reset();
  CHECK(!ran);
  CHECK(handler_state.expired());
  CHECK(reg->at_once.load() == 0);
  // Its lease went with the read: the range is free for the host.
  std::vector<std::byte> back(4096);
  buf.read(back);
  CHECK(std::memcmp(back.data(), cf.content.data() + 8192, 4096) == 0);

  // Again with nothing but the context holding its registry (neither this
  // test nor this thread's cache, which another io_context takes over):
  // the unrun function takes itself out before the registry goes (ASan).
  reg.reset();
  io = std::make_unique<asio::io_context>();
  outcome warm;
  xrtio::async_read_file(cf.file, 0, xrtio::out(buf), record(*io, warm));
  run_until(*io, warm);
  REQUIRE(!warm.ec);
  s0 = f.rt.stats();
  handler_state.reset();
  {
    auto a2 = std::make_shared<int>(0);
    handler_state = a2;
    xrtio::async_read_file(cf.file, 4096, xrtio::out(buf),
                           asio::bind_executor(*io, [&ran, a = std::move(a2)](std::error_code, std::size_t) { ran = true; }));
  }
  CHECK(f.rt.stats().file_inline_reads - s0.file_inline_reads == 1);
  asio::io_context other;
  outcome elsewhere;  // registers with `other`: the thread's cache lets go of io's registry
  xrtio::async_read_file(cf.file, 0, xrtio::out(f.ctx.alloc(4096)), record(other, elsewhere));
  run_until(other, elsewhere);
  io.reset();
  CHECK(!ran);
  CHECK(handler_state.expired());
}

// ---- Registered files and fixed buffers (file_options::register_with_ring;
// docs/DESIGN.md, "Registered files and fixed buffers") ----

namespace {

// Test seam: the slots of the file and buffer tables of every ring made
// while it lives (0: no table, as a kernel that refuses them).
struct table_slots {
  explicit table_slots(int n) { xrtio::detail::ring_table_slots_override.store(n); }
  ~table_slots() { xrtio::detail::ring_table_slots_override.store(-1); }
};

// A file read or written through the loop (no inline reads), cut into
// pieces of 64 KiB, 3 in flight.
xrtio::file_options loop_only(bool direct, bool reg) {
  return {.direct = direct, .chunk_size = 64 << 10, .queue_depth = 3, .register_with_ring = reg,
          .inline_read_limit = 0};
}

void read_into(asio::io_context& io, xrtio::file& file, std::uint64_t off, const xrtio::buffer& b,
               std::size_t expect) {
  outcome o;
  xrtio::async_read_file(file, off, xrtio::out(b), record(io, o));
  run_until(io, o);
  REQUIRE(!o.ec);
  REQUIRE(o.bytes == expect);
}

// Under qemu-user (CI's aarch64 stage) io_uring is refused: the pool ran,
// and nothing may have been registered.
bool ring_or_skip(const xrtio::runtime& rt) {
  auto s = rt.stats();
  if (s.file_path == xrtio::file_io_path::io_uring) return true;
  CHECK(s.file_registered_files == 0);
  CHECK(s.file_registered_buffers == 0);
  CHECK(s.file_pieces_fixed_file == 0);
  CHECK(s.file_pieces_fixed_buffer == 0);
  MESSAGE("XRTIO-SKIP: io_uring refused here: registration not checked (the thread pool ran, nothing registered)");
  return false;
}

}  // namespace

TEST_CASE("file io: register_with_ring registers the file and the buffer's memory and data stays exact, and off or on "
          "the thread pool nothing is registered") {
  temp_dir dir;
  const std::size_t file_size = (1 << 20) + 4096;
  const auto content = random_bytes(file_size, 21);
  for (bool uring : {true, false})
    for (bool reg : {true, false})
      for (bool direct : {true, false}) {
        CAPTURE(uring);
        CAPTURE(reg);
        CAPTURE(direct);
        fixture f({}, xrtio::runtime_options{.file_io_uring = uring});
        auto path = dir.path / ("reg-" + std::to_string(uring) + std::to_string(reg) + std::to_string(direct));
        write_file(path, content);
        auto file = xrtio::file::open(path, xrtio::file_mode::read_write, loop_only(direct, reg));
        bool is_direct = file.direct();
        auto buf = f.ctx.alloc(1 << 20);
        asio::io_context io;
        std::mt19937 g(uring * 4 + reg * 2 + direct);
        auto pick = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(g); };
        auto expect = content;
        for (int i = 0; i < 16; ++i) {
          bool al = i % 2 == 0;  // half aligned (direct pieces), half anywhere (bounced under O_DIRECT)
          std::size_t len = al ? 4096 * pick(1, 64) : pick(1, 200000);
          std::size_t boff = al ? 4096 * pick(0, (buf.size() - len) / 4096) : pick(0, buf.size() - len);
          std::size_t foff = al ? 4096 * pick(0, 200) : pick(0, file_size - len);
          auto view = buf.sub(len, boff);
          if (i % 4 == 3) {  // a write of what the buffer holds
            outcome o;
            xrtio::async_write_file(file, foff, xrtio::in(view), record(io, o));
            run_until(io, o);
            REQUIRE(!o.ec);
            REQUIRE(o.bytes == len);
            std::memcpy(expect.data() + foff, mapped(buf).data() + boff, len);
          } else {
            read_into(io, file, foff, view, len);
            REQUIRE(std::memcmp(mapped(buf).data() + boff, expect.data() + foff, len) == 0);
          }
        }
        file = {};
        CHECK(read_whole(path) == expect);
        auto s = f.rt.stats();
        CHECK(s.file_pieces > 16);
        CHECK(s.file_registrations_refused == 0);
        if (!uring || !reg) {
          CHECK(s.file_registered_files == 0);
          CHECK(s.file_registered_buffers == 0);
          CHECK(s.file_pieces_fixed_file == 0);
          CHECK(s.file_pieces_fixed_buffer == 0);
          continue;
        }
        if (!ring_or_skip(f.rt)) continue;
        CHECK(s.file_registered_files == 1);    // once, at the first transfer
        CHECK(s.file_registered_buffers == 1);  // the allocation, once, whichever view
        CHECK(s.file_pieces_fixed_buffer == s.file_pieces);
        // Bounced pieces (misaligned, O_DIRECT) go through the plain buffered descriptor.
        if (is_direct) {
          CHECK(s.file_pieces_fixed_file > 0);
          CHECK(s.file_pieces_fixed_file < s.file_pieces);
        } else {
          CHECK(s.file_pieces_fixed_file == s.file_pieces);
        }
      }
}

// The slot holds its own reference to the pipe's writing end: had ~file_state
// left it registered, the reader would see no EOF while the runtime lives.
TEST_CASE("file io: a registered file really closes when destroyed: a pipe's reader sees EOF") {
  fixture f;
  pipe_pair p;
  auto file = xrtio::file::adopt(p.wr, loop_only(false, true));
  p.wr = -1;  // the file owns it
  auto buf = f.ctx.alloc(4096);
  auto data = random_bytes(4096, 3);
  buf.write(std::span<const std::byte>(data));
  asio::io_context io;
  outcome o;
  xrtio::async_write_file(file, 0, xrtio::in(buf), record(io, o));
  run_until(io, o);
  REQUIRE(!o.ec);
  REQUIRE(o.bytes == 4096);
  std::vector<std::byte> got(4096);
  REQUIRE(::read(p.rd, got.data(), got.size()) == 4096);
  CHECK(got == data);
  if (!ring_or_skip(f.rt)) return;
  REQUIRE(f.rt.stats().file_registered_files == 1);
  REQUIRE(f.rt.stats().file_pieces_fixed_file == 1);
  file = {};  // the last handle, no transfer in flight: the slot is emptied, then the descriptor closed
  pollfd pfd{p.rd, POLLIN, 0};
  CHECK(::poll(&pfd, 1, 5000) == 1);  // with the runtime still alive
  char c;
  if (pfd.revents) CHECK(::read(p.rd, &c, 1) == 0);  // EOF, not data, not a block
}

TEST_CASE("file io: ring table slots are reused after files and buffers go, and a full table leaves the rest plain, "
          "counted") {
  table_slots four(4);
  temp_dir dir;
  fixture f;
  asio::io_context io;
  std::vector<std::vector<std::byte>> contents;
  for (int i = 0; i < 10; ++i) {
    contents.push_back(random_bytes(8192, 100 + i));
    write_file(dir.path / std::to_string(i), contents.back());
  }
  // One after another, each closed and freed before the next: 10 files and
  // 10 buffers through 4 slots of each.
  for (int i = 0; i < 10; ++i) {
    auto file = xrtio::file::open(dir.path / std::to_string(i), xrtio::file_mode::read, loop_only(false, true));
    auto buf = f.ctx.alloc(8192);
    read_into(io, file, 0, buf, 8192);
    CHECK(std::memcmp(mapped(buf).data(), contents[i].data(), 8192) == 0);
  }
  if (!ring_or_skip(f.rt)) return;
  auto s = f.rt.stats();
  CHECK(s.file_registered_files == 10);
  CHECK(s.file_registered_buffers == 10);
  CHECK(s.file_registrations_refused == 0);
  CHECK(s.file_pieces_fixed_file == s.file_pieces);
  CHECK(s.file_pieces_fixed_buffer == s.file_pieces);
  // Six at once: four registered, two of each refused, all exact.
  std::vector<xrtio::file> files;
  std::vector<xrtio::buffer> bufs;
  for (int i = 0; i < 6; ++i) {
    files.push_back(xrtio::file::open(dir.path / std::to_string(i), xrtio::file_mode::read, loop_only(false, true)));
    bufs.push_back(f.ctx.alloc(8192));
    read_into(io, files.back(), 0, bufs.back(), 8192);
    CHECK(std::memcmp(mapped(bufs.back()).data(), contents[i].data(), 8192) == 0);
  }
  auto t = f.rt.stats();
  CHECK(t.file_registered_files - s.file_registered_files == 4);
  CHECK(t.file_registered_buffers - s.file_registered_buffers == 4);
  CHECK(t.file_registrations_refused == 4);
  // A second transfer of a refused file is not asked about again.
  read_into(io, files.back(), 0, bufs.back(), 8192);
  CHECK(f.rt.stats().file_registrations_refused == 4);
}

// Identity, not address: the registration belongs to the memory's owner and
// goes with it. Other memory later mapped at the same address is a new
// registration; a read through the old one would land in the old pages (still
// pinned) and leave the new mapping's zeros.
TEST_CASE("file io: memory freed and other memory mapped at the same address is never read into through the old "
          "registration") {
  temp_dir dir;
  fixture f;
  asio::io_context io;
  constexpr std::size_t size = 64 << 10;
  auto a = random_bytes(size, 1), b = random_bytes(size, 2);
  write_file(dir.path / "a", a);
  write_file(dir.path / "b", b);
  auto fa = xrtio::file::open(dir.path / "a", xrtio::file_mode::read, loop_only(false, true));
  auto fb = xrtio::file::open(dir.path / "b", xrtio::file_mode::read, loop_only(false, true));
  void* at = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(at != MAP_FAILED);
  {
    auto buf = f.ctx.import_user_memory(at, size);
    read_into(io, fa, 0, buf, size);
    CHECK(std::memcmp(at, a.data(), size) == 0);
  }
  REQUIRE(::munmap(at, size) == 0);
  void* again = ::mmap(at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (again == MAP_FAILED)  // an emulator without MAP_FIXED_NOREPLACE: the address as a hint
    again = ::mmap(at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(again != MAP_FAILED);
  // The same address, new (zero) pages. An emulator may place it elsewhere:
  // then the case below, sim allocations, is the only one checked.
  bool same_address = again == at;
  if (!same_address) MESSAGE("XRTIO-SKIP: the kernel did not map again at " << at << ": the import case not checked");
  {
    auto buf = f.ctx.import_user_memory(again, size);
    read_into(io, fb, 0, buf, size);
    CHECK(std::memcmp(again, b.data(), size) == 0);
  }
  ::munmap(again, size);
  // Simulated allocations freed and made again (often at the same address).
  std::byte* last = nullptr;
  int same = 0;
  for (int i = 0; i < 8; ++i) {
    auto buf = f.ctx.alloc(size);
    same += mapped(buf).data() == last;
    last = const_cast<std::byte*>(mapped(buf).data());
    read_into(io, i % 2 ? fa : fb, 0, buf, size);
    CHECK(std::memcmp(mapped(buf).data(), (i % 2 ? a : b).data(), size) == 0);
  }
  MESSAGE(same << " of 7 reallocations came back at the same address");
  if (!ring_or_skip(f.rt)) return;
  auto s = f.rt.stats();
  CHECK(s.file_registered_buffers == 10);  // each allocation its own registration
  CHECK(s.file_pieces_fixed_buffer == s.file_pieces);
}

TEST_CASE("file io: registration refused (no tables): transfers take the plain path, exactly, and it is reported") {
  table_slots none(0);
  temp_dir dir;
  fixture f;
  asio::io_context io;
  auto content = random_bytes(200000, 9);
  write_file(dir.path / "r", content);
  auto file = xrtio::file::open(dir.path / "r", xrtio::file_mode::read_write, loop_only(false, true));
  auto buf = f.ctx.alloc(200000);
  read_into(io, file, 0, buf, 200000);
  CHECK(std::memcmp(mapped(buf).data(), content.data(), content.size()) == 0);
  read_into(io, file, 100, buf.sub(5000, 7), 5000);
  CHECK(std::memcmp(mapped(buf).data() + 7, content.data() + 100, 5000) == 0);
  if (!ring_or_skip(f.rt)) return;
  auto s = f.rt.stats();
  CHECK(s.file_registrations_refused == 2);  // the file and the memory, once each
  CHECK(s.file_registered_files == 0);
  CHECK(s.file_registered_buffers == 0);
  CHECK(s.file_pieces_fixed_file == 0);
  CHECK(s.file_pieces_fixed_buffer == 0);
  CHECK(s.file_pieces >= 5);
}

// One file, two runtimes (two rings): each registers it in its own table,
// the file remembers both, and its destructor empties both. A runtime
// destroyed first leaves a dead table, which the file's destructor skips.
TEST_CASE("file io: a file registered on two rings is released from both, and a ring destroyed first is skipped") {
  pipe_pair p;
  auto file = xrtio::file::adopt(p.wr, loop_only(false, true));
  p.wr = -1;
  auto data = random_bytes(4096, 4);
  std::vector<std::byte> got(4096);
  auto write_on = [&](rtest::mode_runtime& rt) {
    auto ctx = sim::open();
    auto buf = ctx.alloc(4096);
    buf.write(std::span<const std::byte>(data));
    asio::io_context io;
    outcome o;
    xrtio::async_write_file(file, 0, xrtio::in(buf), xrtio::io_options{.runtime = &rt}, record(io, o));
    run_until(io, o);
    REQUIRE(!o.ec);
    REQUIRE(::read(p.rd, got.data(), got.size()) == 4096);
    CHECK(got == data);
  };
  bool ring = true;
  {
    rtest::mode_runtime gone;  // destroyed before the file
    write_on(gone);
    ring = ring_or_skip(gone);
    if (ring) CHECK(gone.stats().file_registered_files == 1);
  }
  rtest::mode_runtime a, b;
  write_on(a);
  write_on(b);
  write_on(a);  // a's slot again: no new registration
  if (!ring || !ring_or_skip(a) || !ring_or_skip(b)) return;
  CHECK(a.stats().file_registered_files == 1);
  CHECK(b.stats().file_registered_files == 1);
  CHECK(a.stats().file_pieces_fixed_file == 2);
  CHECK(b.stats().file_pieces_fixed_file == 1);
  file = {};  // both runtimes alive: the slots in a's and b's tables are emptied first
  pollfd pfd{p.rd, POLLIN, 0};
  CHECK(::poll(&pfd, 1, 5000) == 1);
  char c;
  if (pfd.revents) CHECK(::read(p.rd, &c, 1) == 0);
}

// Copies on the kernel's workers (file_options::worker_read_min and
// worker_in_flight_min; docs/DESIGN.md, "File I/O", "Copies on the kernel's
// workers"). The test's transfers are a few MiB; the floor on bytes in
// flight is 0 (none) by default, and set explicitly where it matters.
TEST_CASE("file io: large buffered read pieces issued while others are in flight go to the kernel's io_uring "
          "workers with the file's bytes, while a lone piece, small pieces, writes, direct reads and worker_read_min 0 "
          "never do") {
  temp_dir dir;
  auto path = dir.path / "workers";
  constexpr std::size_t mib = std::size_t(1) << 20;
  const auto content = random_bytes(8 * mib, 41);
  write_file(path, content);  // just written: in the page cache
  fixture f;
  auto buf = f.ctx.alloc(8 * mib);
  asio::io_context io;
  // One read of `len` at offset `off` through `file`; returns the pieces
  // and the pieces handed to workers it took, having checked its bytes.
  struct counts {
    std::uint64_t pieces, workers;
  };
  auto read = [&](xrtio::file& file, std::uint64_t off, std::size_t len) {
    std::memset(buf.map().data(), 0, len);
    auto s0 = f.rt.stats();
    outcome o;
    xrtio::async_read_file(file, off, xrtio::out(buf.sub(len, 0)), record(io, o));
    run_until(io, o);
    REQUIRE(!o.ec);
    REQUIRE(o.bytes == len);
    CHECK(std::memcmp(buf.map().data(), content.data() + off, len) == 0);
    auto s1 = f.rt.stats();
    return counts{s1.file_pieces - s0.file_pieces, s1.file_pieces_to_workers - s0.file_pieces_to_workers};
  };
  const xrtio::file_options defaults;
  CHECK(defaults.worker_read_min == (512u << 10));
  CHECK(defaults.worker_in_flight_min == 0);
  const xrtio::file_options no_floor{.direct = false, .worker_in_flight_min = 0};
  auto file = xrtio::file::open(path, xrtio::file_mode::read, no_floor);
  // A 4 MiB read, four 1 MiB pieces issued at once: the first alone (copied
  // at submission as before), the three issued while it is in flight to the
  // workers. Where io_uring is refused the pool does all four.
  auto c = read(file, 4096, 4 * mib);
  CHECK(c.pieces == 4);
  if (f.rt.stats().file_path != xrtio::file_io_path::io_uring) {
    CHECK(c.workers == 0);
    MESSAGE("XRTIO-SKIP: io_uring refused here: nothing goes to its workers (the thread pool ran)");
    return;
  }
  CHECK(c.workers == 3);
  SUBCASE("the floor on bytes in flight: the pieces issued while the reads in flight, each included, hold it") {
    // Pieces 1-4 see 1, 2, 3 and 4 MiB in flight with themselves.
    for (auto [floor, workers] : {std::pair{2 * mib, 3u}, std::pair{3 * mib, 2u}, std::pair{4 * mib, 1u},
                                  std::pair{4 * mib + 1, 0u}, std::pair{32 * mib, 0u}}) {
      CAPTURE(floor);
      auto fl = xrtio::file::open(path, xrtio::file_mode::read, {.direct = false, .worker_in_flight_min = floor});
      c = read(fl, 0, 4 * mib);
      CHECK(c.pieces == 4);
      CHECK(c.workers == workers);
    }
    // A piece that ended no longer counts: the same read again, after the
    // first ended, sees only its own pieces.
    auto fl = xrtio::file::open(path, xrtio::file_mode::read, {.direct = false, .worker_in_flight_min = 3 * mib});
    c = read(fl, 0, 4 * mib);
    CHECK(c.workers == 2);
  }
  SUBCASE("worker_read_min 0, or over the piece size: none") {
    for (std::size_t min : {std::size_t(0), mib + 1}) {
      CAPTURE(min);
      auto off = xrtio::file::open(path, xrtio::file_mode::read,
                                   {.direct = false, .worker_read_min = min, .worker_in_flight_min = 0});
      c = read(off, 0, 4 * mib);
      CHECK(c.pieces == 4);
      CHECK(c.workers == 0);
    }
  }
  SUBCASE("small pieces: none") {
    auto small = xrtio::file::open(path, xrtio::file_mode::read,
                                   {.direct = false, .chunk_size = 64 << 10, .worker_in_flight_min = 0});
    c = read(small, 0, 2 * mib);
    CHECK(c.pieces == 32);
    CHECK(c.workers == 0);
  }
  SUBCASE("at exactly worker_read_min: handed over") {
    auto exact = xrtio::file::open(path, xrtio::file_mode::read,
                                   {.direct = false, .chunk_size = 256 << 10, .inline_read_limit = 0,
                                    .worker_read_min = 256 << 10, .worker_in_flight_min = 0});
    c = read(exact, 0, mib);
    CHECK(c.pieces == 4);
    CHECK(c.workers == 3);
  }
  SUBCASE("writes: none") {
    auto out_path = dir.path / "written";
    auto w = xrtio::file::open(out_path, xrtio::file_mode::write | xrtio::file_mode::create,
                               {.direct = false, .worker_in_flight_min = 0});
    buf.write(std::span<const std::byte>(content.data(), 4 * mib));
    auto s0 = f.rt.stats();
    outcome o;
    xrtio::async_write_file(w, 0, xrtio::in(buf.sub(4 * mib, 0)), record(io, o));
    run_until(io, o);
    REQUIRE(!o.ec);
    CHECK(o.bytes == 4 * mib);
    auto s1 = f.rt.stats();
    CHECK(s1.file_pieces - s0.file_pieces == 4);
    CHECK(s1.file_pieces_to_workers == s0.file_pieces_to_workers);
    auto back = read_whole(out_path);
    REQUIRE(back.size() == 4 * mib);
    CHECK(std::memcmp(back.data(), content.data(), 4 * mib) == 0);
  }
  SUBCASE("direct reads: none") {
    auto direct = xrtio::file::open(path, xrtio::file_mode::read, {.direct = true, .worker_in_flight_min = 0});
    if (!direct.direct()) {
      MESSAGE("XRTIO-SKIP: O_DIRECT refused on " << path << ": " << direct.direct_fallback_reason());
      return;
    }
    c = read(direct, 0, 4 * mib);
    CHECK(c.pieces == 4);
    CHECK(c.workers == 0);
  }
  SUBCASE("a cached read of worker_read_min or more is not done on the caller's thread while others of its "
          "context are in flight, if they hold the floor's bytes: it goes to the loop") {
    // One 1 MiB read alone (at once), whose handler issues three more: the
    // first of them at once (its predecessor's handler runs: no longer in
    // flight), the other two see 2 and 3 candidates of 1 MiB in flight with
    // themselves. Those that reach the floor are declined to the loop, where
    // their pieces may go to the workers. Below worker_read_min (the 128 KiB
    // reads of the test above) they would be done at once, one after another.
    std::vector<std::byte> probe(4096);
    iovec v{probe.data(), probe.size()};
    if (::preadv2(file.native_handle(), &v, 1, 0, RWF_NOWAIT) != 4096) {
      MESSAGE("XRTIO-SKIP: preadv2(RWF_NOWAIT) refused here (errno " << errno << "): no read is done inline");
      return;
    }
    struct expect {
      std::size_t floor;
      std::uint64_t declined;
    };
    for (auto e : {expect{0, 2}, expect{2 * mib, 2}, expect{3 * mib, 1}, expect{3 * mib + 1, 0},
                   expect{32 * mib, 0}}) {
      CAPTURE(e.floor);
      auto fl = xrtio::file::open(path, xrtio::file_mode::read, {.direct = false, .worker_in_flight_min = e.floor});
      std::memset(buf.map().data(), 0, 4 * mib);
      auto s0 = f.rt.stats();
      int done = 0, failed = 0;
      xrtio::async_read_file(fl, 0, xrtio::out(buf.sub(mib, 0)),
                             asio::bind_executor(io, [&](std::error_code ec, std::size_t bytes) {
                               if (ec || bytes != mib) ++failed;
                               for (std::size_t i = 1; i < 4; ++i)
                                 xrtio::async_read_file(fl, i * 2 * mib, xrtio::out(buf.sub(mib, i * mib)),
                                                        asio::bind_executor(io, [&](std::error_code e2, std::size_t b) {
                                                          if (e2 || b != mib) ++failed;
                                                          ++done;
                                                        }));
                             }));
      auto until = std::chrono::steady_clock::now() + 30s;
      io.restart();
      while (done < 3 && std::chrono::steady_clock::now() < until) io.run_one_for(10ms);
      REQUIRE(done == 3);
      CHECK(failed == 0);
      CHECK(std::memcmp(buf.map().data(), content.data(), mib) == 0);
      for (std::size_t i = 1; i < 4; ++i)
        CHECK(std::memcmp(buf.map().data() + i * mib, content.data() + i * 2 * mib, mib) == 0);
      auto s1 = f.rt.stats();
      CHECK(s1.file_inline_reads - s0.file_inline_reads == 4 - e.declined);
      CHECK(s1.file_inline_declined - s0.file_inline_declined == e.declined);
      CHECK(s1.file_gathered_reads == s0.file_gathered_reads);
      CHECK(s1.file_pieces - s0.file_pieces == e.declined);
      // At most one: a declined piece issued while the other was in flight,
      // if it was, and only where the floor is 2 MiB or less.
      CHECK(s1.file_pieces_to_workers - s0.file_pieces_to_workers <= (e.floor <= 2 * mib ? 1u : 0u));
    }
  }
}
