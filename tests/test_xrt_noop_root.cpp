// use_noop_device's temporary XILINX_XRT root (src/backends/xrt/noop_device.cpp):
// made once per process, there while XRT may read it, removed at exit by
// the process that made it, and removed at once when its setup fails
// part-way. The setup is once per process, so each case runs it in a
// forked child that ends with exit() (its atexit handlers run, as at the end
// of a program) after writing what it found to a pipe; the parent never
// calls use_noop_device.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "xrtio/error.hpp"
#include "xrtio/xrt.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace xb = xrtio::xrt_backend;

namespace {

// A fresh directory for a case, and everything under it removed afterwards.
struct scratch {
  std::string path = "/tmp/xrtio-test-noop-root-XXXXXX";
  scratch() { REQUIRE(::mkdtemp(path.data()) != nullptr); }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// The names in `dir`, comma-separated ("" when it is empty).
std::string entries(const std::string& dir) {
  std::string s;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec)) s += (s.empty() ? "" : ", ") + e.path().filename().string();
  return ec ? "(cannot list " + dir + ": " + ec.message() + ")" : s;
}

// A directory under `base` whose path is `length` characters long, made
// level by level (each name at most 200 characters).
std::string long_dir(const std::string& base, std::size_t length) {
  std::string p = base;
  while (p.size() < length) {
    std::size_t step = std::min<std::size_t>(200, length - p.size() - 1);
    p += "/" + std::string(step, 'd');
    REQUIRE_MESSAGE(::mkdir(p.c_str(), 0700) == 0, "mkdir of a " << p.size() << "-character path");
  }
  REQUIRE(p.size() == length);
  return p;
}

// Runs `body` in a forked child that then calls exit(0); returns what the
// body returned ("ok", or what it found wrong).
std::string in_child(const std::function<std::string()>& body) {
  std::cout.flush();  // else the child's exit writes the parent's buffered output again
  std::cerr.flush();
  std::fflush(nullptr);
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string said;
    try {
      said = body();
    } catch (const std::exception& e) {
      said = std::string("threw: ") + e.what();
    }
    for (std::size_t at = 0; at < said.size();) {
      ssize_t w = ::write(fds[1], said.data() + at, said.size() - at);
      if (w <= 0) break;
      at += static_cast<std::size_t>(w);
    }
    ::close(fds[1]);
    std::exit(0);  // the atexit handlers run, use_noop_device's among them
  }
  ::close(fds[1]);
  std::string said;
  char buf[512];
  for (ssize_t r; (r = ::read(fds[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<std::size_t>(r));
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), "child status " << status);
  return said;
}

bool is_symlink(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

}  // namespace

TEST_CASE("xrt noop root: a setup that fails part-way removes its directory at once, and the root made later goes at exit") {
  scratch failing, working;
  // A $TMPDIR so long that the root and its lib/ can be made but the
  // driver's link in lib/ cannot (ENAMETOOLONG): a failure after mkdtemp.
  // 4065 + "/xrtio-noop-XXXXXX" + "/lib" = 4087 characters, + "/libxrt_noop.so.2" = 4104 > 4095.
  const std::string long_tmp = long_dir(failing.path, 4065);
  const std::string said = in_child([&] {
    std::string wrong;
    ::setenv("TMPDIR", long_tmp.c_str(), 1);
    for (int attempt = 1; attempt <= 2; ++attempt) {
      try {
        xb::use_noop_device(0us);
        return std::string("use_noop_device did not fail under a too long $TMPDIR");
      } catch (const xrtio::error& e) {
        if (e.code() != xrtio::errc::backend_failure || std::string(e.what()).find("cannot link") == std::string::npos)
          wrong += std::string("unexpected error: ") + e.what() + "\n";
      }
      if (auto left = entries(long_tmp); !left.empty())
        wrong += "after failed attempt " + std::to_string(attempt) + ", left in $TMPDIR: " + left + "\n";
    }
    // A setup that completes: one root, the driver linked in it, XRT pointed at it.
    ::setenv("TMPDIR", working.path.c_str(), 1);
    xb::use_noop_device(0us);
    const char* root = std::getenv("XILINX_XRT");
    if (!root || fs::path(root).parent_path() != fs::path(working.path))
      wrong += std::string("XILINX_XRT is ") + (root ? root : "unset") + ", not a directory in " + working.path + "\n";
    else if (!is_symlink(std::string(root) + "/lib/libxrt_noop.so.2"))
      wrong += std::string("no driver link in ") + root + "\n";
    if (auto made = entries(working.path); made.find(',') != std::string::npos)
      wrong += "more than one root: " + made + "\n";
    return wrong.empty() ? std::string("ok") : wrong;
  });
  CHECK_MESSAGE(said == "ok", said);
  CHECK_MESSAGE(entries(long_tmp).empty(), "left after the child's exit: " << entries(long_tmp));
  CHECK_MESSAGE(entries(working.path).empty(), "the root was not removed at exit: " << entries(working.path));
}

TEST_CASE("xrt noop root: a forked child's exit leaves its parent's root, which XRT then reads, and the parent's exit removes it") {
  scratch tmp;
  const std::string said = in_child([&] {
    ::setenv("TMPDIR", tmp.path.c_str(), 1);
    xb::use_noop_device(0us);
    const std::string root = std::getenv("XILINX_XRT");
    // A child of this process (a fork that exits without exec, as a
    // worker process or a test's child does) runs the same atexit handlers.
    std::cout.flush();
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) return std::string("fork failed");
    if (pid == 0) std::exit(0);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!is_symlink(root + "/lib/libxrt_noop.so.2"))
      return "a forked child's exit removed its parent's root " + root + " (left: " + entries(root) + ")";
    // XRT loads its driver through the root only now, at the first device open.
    auto devices = xb::list_devices();
    if (devices.empty() || devices[0].find("unavailable") != std::string::npos)
      return "no no-op device after the child's exit: " + (devices.empty() ? std::string("none") : devices[0]);
    return std::string("ok");
  });
  CHECK_MESSAGE(said == "ok", said);
  CHECK_MESSAGE(entries(tmp.path).empty(), "the root was not removed at exit: " << entries(tmp.path));
}
