// use_noop_device: points XRT at its built-in no-op device through a
// temporary XILINX_XRT root, so the XRT suites run without hardware
// (docs/DESIGN.md, "Testing without hardware: the no-op device").
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <experimental/xrt_ini.h>

#include "xrtio/error.hpp"
#include "xrtio/xrt.hpp"

namespace xrtio::xrt_backend {
namespace {

/// The no-op driver's file name, as XRT looks for it in $XILINX_XRT/lib.
constexpr const char* noop_driver = "libxrt_noop.so.2";
/// realpath(3) writes up to PATH_MAX bytes.
constexpr std::size_t realpath_size = PATH_MAX;
/// The temporary root's lib directory: only read, by XRT.
constexpr mode_t lib_dir_mode = 0755;

struct noop_state {
  std::mutex mutex;
  bool configured = false;
  std::chrono::microseconds delay{0};
  std::string root;
  bool owns_ini = false;
};

noop_state& noop() {
  static auto* s = new noop_state;  // never destroyed: read by the atexit handler
  return *s;
}

std::string driver_in(const std::string& dir) { return dir + "/" + noop_driver; }

void remove_noop_root() {
  auto& s = noop();
  if (s.root.empty()) return;
  ::unlink(driver_in(s.root + "/lib").c_str());
  if (s.owns_ini) ::unlink((s.root + "/xrt.ini").c_str());
  ::rmdir((s.root + "/lib").c_str());
  ::rmdir(s.root.c_str());
}

std::string find_noop_driver() {
  std::vector<std::string> candidates;
  if (const char* x = std::getenv("XILINX_XRT")) candidates.push_back(driver_in(std::string(x) + "/lib"));
  candidates.push_back(driver_in("/usr/lib/x86_64-linux-gnu"));
  candidates.push_back(driver_in("/usr/lib/aarch64-linux-gnu"));
  candidates.push_back(driver_in("/opt/xilinx/xrt/lib"));
  for (auto& c : candidates) {
    char real[realpath_size];
    if (::realpath(c.c_str(), real)) return real;
  }
  return {};
}

// A fresh directory under $TMPDIR (or /tmp), removed at exit, whose
// lib/ holds a symlink to the installed no-op driver.
void make_root(noop_state& s) {
  auto driver = find_noop_driver();
  if (driver.empty())
    throw error(errc::not_supported, "use_noop_device: XRT's no-op driver libxrt_noop.so.2 is not installed "
                                     "(looked in $XILINX_XRT/lib, /usr/lib/<multiarch>, /opt/xilinx/xrt/lib)");
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/xrtio-noop-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    throw error(errc::backend_failure, "use_noop_device: mkdtemp(" + tmpl + "): " + std::strerror(errno));
  s.root = buf.data();
  std::atexit(remove_noop_root);
  if (::mkdir((s.root + "/lib").c_str(), lib_dir_mode) != 0 ||
      ::symlink(driver.c_str(), driver_in(s.root + "/lib").c_str()) != 0)
    throw error(errc::backend_failure, "use_noop_device: cannot link " + driver + " into " + s.root + ": " +
                                           std::strerror(errno));
}

// Unless the caller chose an xrt.ini, an empty one: a stray xrt.ini beside
// the executable or in the working directory cannot change the device.
void isolate_ini(noop_state& s) {
  if (std::getenv("XRT_INI_PATH")) return;
  std::ofstream((s.root + "/xrt.ini").c_str()) << "# empty: isolates xrtio's no-op device from stray xrt.ini\n";
  s.owns_ini = true;
  ::setenv("XRT_INI_PATH", (s.root + "/xrt.ini").c_str(), 1);
}

void set_completion_delay(std::chrono::microseconds completion_delay) {
  try {
    xrt::ini::set("Runtime.noop_completion_delay_us", static_cast<unsigned>(completion_delay.count()));
  } catch (const std::exception& e) {
    throw error(errc::not_supported, "use_noop_device: cannot set the completion delay to " +
                                         std::to_string(completion_delay.count()) +
                                         " us after XRT read its configuration (set it before the first device "
                                         "open): " + e.what());
  }
}

}  // namespace

void use_noop_device(std::chrono::microseconds completion_delay) {
  if (completion_delay.count() < 0)
    throw error(errc::invalid_size, "use_noop_device: negative completion delay " +
                                        std::to_string(completion_delay.count()) + " us");
  auto& s = noop();
  std::lock_guard lock(s.mutex);
  if (s.configured && s.delay == completion_delay) return;
  if (!s.configured) {
    make_root(s);
    isolate_ini(s);
    ::setenv("XCL_EMULATION_MODE", "noop", 1);
    ::setenv("XILINX_XRT", s.root.c_str(), 1);
    s.configured = true;
  }
  set_completion_delay(completion_delay);
  s.delay = completion_delay;
}

}  // namespace xrtio::xrt_backend
