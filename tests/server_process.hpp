// Test helper: runs xrtio-server as a child process on an ephemeral port.
// The constructor waits (bounded) for its "listening on 127.0.0.1:PORT"
// line; stop() sends SIGTERM and returns its exit status and its output
// (printed to stderr when the status is not 0).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace stest {

class server_process {
 public:
  /// `fd_limit` > 0: the server's RLIMIT_NOFILE.
  explicit server_process(std::vector<std::string> args, rlim_t fd_limit = 0) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    std::vector<char*> argv;
    std::string bin = XRTIO_SERVER_BIN;
    argv.push_back(bin.data());
    args.insert(args.begin(), {"--port", "0"});
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      if (fd_limit > 0) {
        rlimit r{fd_limit, fd_limit};
        ::setrlimit(RLIMIT_NOFILE, &r);
      }
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    fd_ = out[0];
    // Bounded: a server that does not come up within 30 s fails the test.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (port_ == 0 && read_some(until)) {
      auto p = output_.find("listening on 127.0.0.1:");
      if (p != std::string::npos && output_.find('\n', p) != std::string::npos)
        port_ = static_cast<unsigned short>(std::stoi(output_.substr(p + 23)));
    }
    if (port_ == 0) {
      kill_now();
      throw std::runtime_error("xrtio-server did not start: " + output_);
    }
  }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;
  ~server_process() {
    if (pid_ > 0) kill_now();
    if (fd_ >= 0) ::close(fd_);
  }

  unsigned short port() const { return port_; }
  pid_t pid() const { return pid_; }

  /// Sends `sig` and waits (at most `limit`) for the exit. Returns the exit
  /// status (-1 if it had to be killed) and leaves the output in output().
  int stop(int sig = SIGTERM, std::chrono::seconds limit = std::chrono::seconds(30)) {
    ::kill(pid_, sig);
    auto until = std::chrono::steady_clock::now() + limit;
    while (read_some(until)) {
    }
    int status = 0;
    while (std::chrono::steady_clock::now() < until) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return report(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill_now();
    return report(-1);
  }
  const std::string& output() const { return output_; }
  /// Sends `sig` (SIGSTOP, SIGCONT, ...) without waiting for anything.
  void send_signal(int sig) { ::kill(pid_, sig); }
  /// Reads the server's output until it contains `text` (true) or `limit` passes.
  bool wait_for_output(const std::string& text, std::chrono::seconds limit = std::chrono::seconds(20)) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (output_.find(text) == std::string::npos)
      if (!read_some(until)) return false;
    return true;
  }

 private:
  // Reads what the server printed; false at end of output or `until`.
  bool read_some(std::chrono::steady_clock::time_point until) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[4096];
    auto n = ::read(fd_, buf, sizeof buf);
    if (n <= 0) return false;
    output_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  // A failed exit shows what the server printed: a sanitizer's report
  // (TSan exits 66) is otherwise lost with the test's CHECK on the status.
  int report(int rc) const {
    if (rc != 0)
      std::fprintf(stderr, "xrtio-server %s %d; its output:\n%s\n", rc < 0 ? "was killed, status" : "exited with status",
                   rc, output_.c_str());
    return rc;
  }
  void kill_now() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid_ = -1;
  int fd_ = -1;
  unsigned short port_ = 0;
  std::string output_;
};

}  // namespace stest
