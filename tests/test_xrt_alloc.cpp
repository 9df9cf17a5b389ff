// The XRT backend when memory runs out, on XRT's no-op device: paths where a
// std::bad_alloc used to leak a descriptor, end the process, or destroy an
// XRT object outside the no-op driver's guard (src/backends/xrt/noop_guard.hpp).
// Replaces the global operator new so that a case can make allocations fail
// on its own thread: its own executable.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "introspection.hpp"
#include "monitor_settle.hpp"
#include "noop_guard.hpp"
#include "xrt_fault_hook.hpp"
#include "xrt_types.hpp"
#include "xrtio/error.hpp"
#include "xrtio/run.hpp"
#include "xrtio/xrt.hpp"

using namespace std::chrono_literals;
namespace xb = xrtio::xrt_backend;
using xb::detail::xrt_call;

namespace {

// Armed by a case on one thread, read by operator new on that thread only:
// every allocation fails, or the next one of at least this many bytes
// (0: none).
thread_local bool t_fail_every = false;
thread_local std::size_t t_fail_next_of = 0;

}  // namespace

// Every unaligned form, new and delete alike, over malloc and free: under
// ASan a runtime's own form paired with one of these would be reported as
// mismatched. (The aligned forms stay the runtime's, pairing among themselves.)
void* operator new(std::size_t n) {
  if (t_fail_every) throw std::bad_alloc();
  if (t_fail_next_of != 0 && n >= t_fail_next_of) {
    t_fail_next_of = 0;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return ::operator new(n, t); }
#include "malloc_delete.hpp"  // NOLINT(bugprone-suspicious-include): the delete forms over free

namespace {

// Every allocation on this thread fails while it lives.
struct no_memory_here {
  no_memory_here() { t_fail_every = true; }
  ~no_memory_here() { t_fail_every = false; }
  no_memory_here(const no_memory_here&) = delete;
  no_memory_here& operator=(const no_memory_here&) = delete;
};

int open_descriptors() {
  int n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// The hook of the cases below: fails the polls of a run while asked to (the
// run stays in flight for xrtio), and, at a kernel's open, arms the opening
// thread's next allocation of at least `fail_next_of` bytes to fail.
class test_hook final : public xb::detail::fault_hook {
 public:
  void before(xrt_call c, std::size_t, std::size_t) override {
    if ((c == xrt_call::run_state || c == xrt_call::run_wait) && fail_polls.load())
      throw std::runtime_error("injected poll failure");
    if (c == xrt_call::kernel_open && fail_next_of.load() != 0) {
      t_fail_next_of = fail_next_of.exchange(0);
      kernel_opened.store(true);
    }
  }
  std::atomic<bool> fail_polls{false};
  std::atomic<std::size_t> fail_next_of{0};
  std::atomic<bool> kernel_opened{false};
};

// Installs a fresh hook for a case's lifetime. Hooks are never destroyed: a
// thread of the backend may be inside one as it is removed. Each stays
// listed in static storage, so LeakSanitizer sees it kept, not lost.
struct hooked {
  test_hook& hook = keep(new test_hook);
  hooked() { xb::detail::set_fault_hook(&hook); }
  ~hooked() { xb::detail::set_fault_hook(nullptr); }
  static test_hook& keep(test_hook* h) {
    static test_hook* kept[16];
    static std::size_t count = 0;
    REQUIRE(count < std::size(kept));
    kept[count++] = h;
    return *h;
  }
};

const std::string& vadd_path() {
  struct made {
    std::string dir = "/tmp/xrtio-test-xrt-alloc-XXXXXX";
    std::string path;
    made() {
      if (!::mkdtemp(dir.data())) throw std::runtime_error("mkdtemp failed");
      path = dir + "/vadd.xclbin";
      std::string cmd = XRTIO_MKXCLBIN;
      cmd.append(" --vadd -o '").append(path).append("'");
      if (std::system(cmd.c_str()) != 0) throw std::runtime_error("xrtio-mkxclbin failed: " + cmd);
    }
    ~made() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const made m;
  return m.path;
}

xrtio::context open_vadd() {
  xb::use_noop_device(20us);
  return xb::open({.xclbin_path = vadd_path()});
}

}  // namespace

// First in the file: it counts the process's descriptors, which no other
// thread opens yet.
TEST_CASE("xrt monitor settle: a thread listing that runs out of memory closes its directory, and the wait reports them not asleep") {
  const int before = open_descriptors();
  bool threw = false;
  {
    t_fail_next_of = 1;  // the listing's first push_back
    try {
      (void)xb::detail::process_threads();
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    t_fail_next_of = 0;
  }
  CHECK(threw);
  CHECK_MESSAGE(open_descriptors() == before, "process_threads left /proc/self/task open");

  // The wait is called with an opened kernel in hand (xrt_device_impl::kernel):
  // it reports "not seen asleep" and throws nothing.
  const std::vector<pid_t> none;
  bool seen = true;
  threw = false;
  {
    no_memory_here out;
    try {
      seen = xb::detail::settle_new_threads(none, 50ms);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
  }
  CHECK_FALSE_MESSAGE(threw, "settle_new_threads let std::bad_alloc through");
  CHECK_FALSE(seen);
  CHECK_MESSAGE(open_descriptors() == before, "settle_new_threads left /proc/self/task open");
}

TEST_CASE("xrt alloc: a kernel whose wrapper cannot be allocated is destroyed under the no-op driver's guard") {
  // On the no-op driver an xrt::kernel may be destroyed only under the
  // guard (noop_guard.hpp). Here the xrt_kernel that is to hold a kernel
  // just opened cannot be allocated (make_shared's block, the first
  // allocation of its size after XRT's open on the opening thread), so the
  // backend destroys the kernel itself. The test holds the guard meanwhile:
  // a kernel destroyed under it cannot be destroyed until the test lets go,
  // so the open cannot end before; one destroyed outside it ends at once.
  hooked h;
  auto ctx = open_vadd();
  auto* guard = xb::detail::noop_guard::detect();
  REQUIRE_MESSAGE(guard != nullptr, "not XRT's no-op driver");
  h.hook.fail_next_of = sizeof(xb::detail::xrt_kernel);

  auto held = guard->lock();
  std::atomic<bool> done{false};
  std::string outcome;
  std::thread opener([&] {
    try {
      (void)ctx.kernel("vadd");
      outcome = "opened";
    } catch (const std::bad_alloc&) {
      outcome = "bad_alloc";
    } catch (const std::exception& e) {
      outcome = std::string("threw: ") + e.what();
    }
    done = true;
  });
  auto until = std::chrono::steady_clock::now() + 30s;
  while (!h.hook.kernel_opened.load() && !done.load() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  CHECK(h.hook.kernel_opened.load());
  // Past XRT's open, the rest (the monitor's settling, at most 250 ms, and
  // the failed allocation) ends well within this unless it waits for the guard.
  until = std::chrono::steady_clock::now() + 2s;
  while (!done.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  CHECK_FALSE_MESSAGE(done.load(), "the open ended while the test held the guard: its xrt::kernel ("
                                       << outcome << ") was destroyed outside the no-op driver's guard");
  held.unlock();
  opener.join();
  CHECK(outcome == "bad_alloc");

  // The device is whole: the kernel opens and runs.
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096), c = ctx.alloc(4096);
  CHECK(xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(c), std::uint32_t{4}).wait(5s).ok());
}

TEST_CASE("xrt alloc: a run released before its final state is kept for good even with no memory left") {
  // xrt_run::release is noexcept and must not destroy a run in flight
  // (XRT would abort the process). Keeping it must therefore not allocate.
  hooked h;
  auto ctx = open_vadd();
  auto k = ctx.kernel("vadd");
  auto a = ctx.alloc(4096), c = ctx.alloc(4096);
  std::uint32_t n = 4;
  auto run = k.native().make_run();
  run->set_arg(0, *xtest::state(a)->native);
  run->set_arg(1, *xtest::state(a)->native);
  run->set_arg(2, *xtest::state(c)->native);
  run->set_arg(3, &n, sizeof n);
  h.hook.fail_polls = true;  // to xrtio the run stays in flight (NEW)
  run->start();
  std::weak_ptr<void> native = static_cast<xb::detail::xrt_run&>(*run).native().get_handle();
  {
    no_memory_here out;
    run.reset();  // release(): not final, so kept
  }
  CHECK_FALSE_MESSAGE(native.expired(), "the xrt::run was destroyed in flight");
  h.hook.fail_polls = false;
  // Kept for good: still alive once the device is done with it.
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(native.expired());
  CHECK(xrtio::start(k, xrtio::in(a), xrtio::in(a), xrtio::out(c), 4u).wait(5s).ok());
}
