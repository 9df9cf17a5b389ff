// The doctest runner of every suite, with a hang watchdog: a test process
// that runs past XRTIO_TEST_WATCHDOG_S seconds (default 240, below CTest's
// 300 s per-test timeout) prints every thread's stack through gdb and
// exits with status 124 (as timeout(1) does), so a hang in CI explains
// itself instead of being a bare timeout.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

namespace {

// XRT 2.13 (Debian 12) can hang at process exit: its exit handler
// (xrt_core::kds::stop) destroys each device's command monitor by setting
// `stop` and notifying without the monitor's mutex, then joins it. A
// monitor that has just checked `stop` and not yet blocked (one started by
// a device opened right before the exit) misses the notification and
// blocks for ever. Fixed upstream in XRT 2.15 (docs/DESIGN.md, "XRT facts
// the code relies on", Pitfalls). In a process that loaded XRT, main waits
// (at most 2 s) until every other thread has been asleep (state S) in three
// readings of /proc a few ms apart, so a monitor is very likely blocked in
// its wait when the exit handler notifies it. Not a guarantee: a thread can
// sleep inside the window (on a lock of a sanitizer's runtime, say); it
// narrows a window that was hit once in many CI runs.
// Read with open/read, not a stream: a thread that ends between the
// directory's listing and the read makes read() fail with ESRCH, which
// libstdc++'s filebuf turned into an exception through istreambuf_iterator,
// out of main (std::terminate after every test had passed; seen once in a
// CI rehearsal of the shared-library stage).
bool thread_asleep(const char* tid) {
  std::string path = std::string("/proc/self/task/") + tid + "/stat";
  char buf[512];
  ssize_t n = -1;
  if (int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    n = ::read(fd, buf, sizeof buf);
    ::close(fd);
  }
  // A thread gone since the directory was read has no stat left: asleep enough.
  if (n <= 0) return true;
  std::string_view stat(buf, static_cast<std::size_t>(n));
  auto close = stat.rfind(')');  // the state follows the command name
  return close == std::string_view::npos || close + 2 >= stat.size() || stat[close + 2] == 'S';
}

bool others_asleep(const std::string& self) {
  bool asleep = true;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.' && self != e->d_name && !thread_asleep(e->d_name)) asleep = false;
    ::closedir(d);
  }
  return asleep;
}

void let_xrt_threads_block() {
  void* xrt = ::dlopen("libxrt_coreutil.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (xrt == nullptr) return;
  ::dlclose(xrt);
  const std::string self = std::to_string(::gettid());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int in_a_row = 0;
  while (in_a_row < 3 && std::chrono::steady_clock::now() < deadline) {
    in_a_row = others_asleep(self) ? in_a_row + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void start_watchdog() {
  long seconds = 240;
  if (const char* s = std::getenv("XRTIO_TEST_WATCHDOG_S")) seconds = std::strtol(s, nullptr, 10);
  if (seconds <= 0) return;
  std::thread([seconds] {
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    std::fprintf(stderr, "\nxrtio test watchdog: still running after %ld s; every thread's stack follows\n",
                 seconds);
    std::string cmd = "gdb -p " + std::to_string(::getpid()) +
                      " -batch -nx -ex 'set pagination off' -ex 'thread apply all bt' 1>&2 2>/dev/null";
    if (std::system(cmd.c_str()) != 0)
      std::fprintf(stderr, "xrtio test watchdog: gdb could not attach (is gdb installed, ptrace allowed?)\n");
    std::fflush(stderr);
    std::_Exit(124);
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  // --xrtio-reactor=inloop: the reactor suites run their runtimes in in-loop
  // mode (tests/reactor_support.hpp); taken out before doctest sees it.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--xrtio-reactor=inloop")
      ::setenv("XRTIO_TEST_REACTOR", "inloop", 1);
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  argv[argc] = nullptr;
  doctest::Context context(argc, argv);
  // Listing or discovering tests (CTest's doctest_discover_tests) needs no watchdog.
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--list", 0) == 0 || a.rfind("-ltc", 0) == 0 || a.rfind("-lts", 0) == 0) listing = true;
  }
  if (!listing) start_watchdog();
  int rc = context.run();
  let_xrt_threads_block();
  return rc;
}
