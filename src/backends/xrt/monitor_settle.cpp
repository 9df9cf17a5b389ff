// monitor_settle (monitor_settle.hpp): the threads of the process and
// their scheduler state, read from /proc/self/task.
#include "monitor_settle.hpp"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

namespace xrtio::xrt_backend::detail {
namespace {

// The state letter of a thread, 'S' when it sleeps interruptibly (a
// condition variable's or a mutex's futex wait); '?' where it cannot be
// read. A thread that ended since the directory was listed counts as asleep.
char thread_state(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
  std::FILE* f = std::fopen(path, "re");
  if (!f) return 'S';
  char buf[512];
  std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "tid (comm) state ...": the command name may hold spaces and ')'.
  const char* close = nullptr;
  for (const char* p = buf; *p; ++p)
    if (*p == ')') close = p;
  if (!close || close[1] != ' ' || close[2] == '\0') return '?';
  return close[2];
}

}  // namespace

std::vector<pid_t> process_threads() {
  std::vector<pid_t> ids;
  // Closed on every way out: push_back can throw std::bad_alloc mid-listing.
  struct closer {
    void operator()(DIR* d) const noexcept { ::closedir(d); }
  };
  std::unique_ptr<DIR, closer> d(::opendir("/proc/self/task"));
  if (!d) return ids;
  while (dirent* e = ::readdir(d.get()))
    if (e->d_name[0] != '.') ids.push_back(static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10)));
  return ids;
}

bool settle_new_threads(const std::vector<pid_t>& before, std::chrono::milliseconds limit, int readings,
                        std::chrono::microseconds gap) noexcept try {
  // The system call, not gettid(3): glibc has that only from 2.30, and XRT
  // 2.13 is also built for older ones.
  const auto self = static_cast<pid_t>(::syscall(SYS_gettid));
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int in_a_row = 0;
  for (bool first = true;; first = false) {
    bool asleep = true;
    bool any_new = false;
    for (pid_t t : process_threads())
      if (t != self && std::find(before.begin(), before.end(), t) == before.end()) {
        any_new = true;
        if (thread_state(t) != 'S') asleep = false;
      }
    // No thread started at all (a kernel on a device whose monitor runs
    // already): nothing to wait for. A thread that started and ended since
    // cannot be waited for either.
    if (first && !any_new) return true;
    in_a_row = asleep ? in_a_row + 1 : 0;
    if (in_a_row >= readings) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(gap);
  }
} catch (...) {
  return false;  // a reading could not be made (no memory for the list): not seen asleep
}

}  // namespace xrtio::xrt_backend::detail
