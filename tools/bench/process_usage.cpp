// Thread names, CPU time per thread role from /proc/self/task, process CPU
// time and resident memory.
#include "process_usage.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace bench {
namespace {

std::size_t read_small(const char* path, char* buf, std::size_t n) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  auto r = ::read(fd, buf, n - 1);
  ::close(fd);
  if (r < 0) r = 0;
  buf[r] = 0;
  return std::size_t(r);
}

}  // namespace

void set_thread_name(const char* n) { pthread_setname_np(pthread_self(), n); }

cpu_split thread_cpu() {
  cpu_split s;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return s;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char path[320], buf[128], name[32];
    std::snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    if (!read_small(path, name, sizeof name)) continue;
    std::snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
    if (!read_small(path, buf, sizeof buf)) continue;
    double secs = double(std::strtoull(buf, nullptr, 10)) * 1e-9;
    if (!std::strncmp(name, "c:", 2)) s.app += secs;
    else if (!std::strncmp(name, "l:dev", 5)) s.dev += secs;
    else if (!std::strncmp(name, "l:rx", 4)) s.rx += secs;
    else s.other += secs;
  }
  ::closedir(d);
  return s;
}

double process_cpu() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double process_sleeps() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_nvcsw);
}

double rss_bytes() {
  char buf[128];
  if (!read_small("/proc/self/statm", buf, sizeof buf)) return 0;
  unsigned long size = 0, res = 0;
  std::sscanf(buf, "%lu %lu", &size, &res);
  return double(res) * double(sysconf(_SC_PAGESIZE));
}

double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024.0;
}

}  // namespace bench
