// asio-file, the parent's side: runs xrtio-bench-asio-file (beside this
// executable) for one cell and reads its result line. The contender lives in
// its own process because it needs ASIO_HAS_IO_URING, which must not meet the
// rest of the bench in one program (io_asio_file_child.cpp says why). Its
// figures are the child's own, measured over its window: its CPU time is the
// child process's (the parent only waits in waitpid meanwhile).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>

#include "io_common.hpp"
#include "io_contenders.hpp"

extern char** environ;

namespace bench::io {
namespace {

std::string child_path() {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "xrtio-bench-asio-file";
  self[n] = 0;
  std::string p(self);
  return p.substr(0, p.rfind('/') + 1) + "xrtio-bench-asio-file";
}

// Runs argv, returns its stdout and exit status (-1: not run).
std::string run_child(std::vector<std::string> args, int& status) {
  int pipefd[2];
  status = -1;
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return {};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  int e = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(pipefd[1]);
  std::string out;
  if (e == 0) {
    char buf[512];
    ssize_t n;
    while ((n = ::read(pipefd[0], buf, sizeof buf)) > 0) out.append(buf, std::size_t(n));
    int st = 0;
    ::waitpid(pid, &st, 0);
    status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  } else {
    out = std::string("cannot run ") + argv[0] + ": " + std::strerror(e);
  }
  ::close(pipefd[0]);
  return out;
}

}  // namespace

io_result run_asio_file(const io_spec& s) {
  int status;
  std::string out = run_child({child_path(), s.path, case_name(s.kind), s.cold ? "1" : "0", std::to_string(s.depth),
                               std::to_string(s.file_size), std::to_string(s.warm_s), std::to_string(s.window_s)},
                              status);
  if (status == -1) throw unavailable(out);
  // 127: the child could not be executed (posix_spawn reports a failed exec
  // this way on some hosts, e.g. an aarch64 child under qemu-user without binfmt).
  if (status == 127) throw unavailable("cannot execute " + child_path() + " (exit status 127)");
  if (status == 3) {
    auto at = out.find(':');
    std::string why = at == std::string::npos ? out : out.substr(at + 2);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    throw unavailable("Asio's io_uring file service: " + why);
  }
  io_result r;
  unsigned long long req = 0, ver = 0, err = 0;
  auto at = out.find("asio-file-result ");
  if (status != 0 || at == std::string::npos ||
      std::sscanf(out.c_str() + at,
                  "asio-file-result requests=%llu iops=%lf gib_per_s=%lf cpu_us_per_gib=%lf p50_us=%lf p99_us=%lf "
                  "allocs_per_request=%lf verified=%llu errors=%llu",
                  &req, &r.iops, &r.gib_per_s, &r.cpu_us_per_gib, &r.p50_us, &r.p99_us, &r.allocs_per_request, &ver,
                  &err) != 9)
    throw std::runtime_error("xrtio-bench-asio-file exited with " + std::to_string(status) + ", output: " + out);
  r.requests = req;
  r.verified = ver;
  r.errors = err;
  r.effective_depth = s.depth;
  r.direct = s.cold;
  return r;
}

}  // namespace bench::io
