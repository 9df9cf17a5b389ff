// use_noop_device: points XRT at its built-in no-op device through a
// temporary XILINX_XRT root, so the XRT suites run without hardware
// (docs/DESIGN.md, "Testing without hardware: the no-op device").
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
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
/// The root's entries, relative to it.
constexpr const char* lib_dir = "lib";
constexpr const char* lib_driver_link = "lib/libxrt_noop.so.2";
constexpr const char* ini_name = "xrt.ini";

struct noop_state {
  std::mutex mutex;
  bool configured = false;
  bool exit_removal = false;  // remove_noop_root is registered with std::atexit
  std::chrono::microseconds delay{0};
  std::string root;  // once configured: the temporary root XRT reads
  pid_t owner = 0;   // the process that made it
};

noop_state& noop() {
  static auto* s = new noop_state;  // never destroyed: read by the atexit handler
  return *s;
}

std::string driver_in(const std::string& dir) { return dir + "/" + noop_driver; }

// Everything a root can hold: the driver's link, lib/, and xrt.ini (any
// xrt.ini in it is ours, the directory is a fresh mkdtemp one). What is
// not there fails to unlink, harmlessly. Relative to the root's descriptor,
// so no path is built: nothing to allocate (it runs at exit and in a
// destructor) and no full path to be too long.
void remove_root(const std::string& root) noexcept {
  int dir = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::unlinkat(dir, lib_driver_link, 0);
    ::unlinkat(dir, ini_name, 0);
    ::unlinkat(dir, lib_dir, AT_REMOVEDIR);
    ::close(dir);
  }
  ::rmdir(root.c_str());
}

// At exit XRT is done with the root (it loaded its driver and read its
// xrt.ini when it first needed them). Not before: a device may be opened
// at any time, and children inherit XILINX_XRT and XRT_INI_PATH pointing
// into it. Only in the process that made it: a forked child's exit would
// otherwise remove its parent's root while the parent still uses it. A
// process that ends without exit() (a signal, _exit, abort) leaves it
// behind, named xrtio-noop-XXXXXX in $TMPDIR.
void remove_noop_root() {
  auto& s = noop();
  if (s.root.empty() || ::getpid() != s.owner) return;
  remove_root(s.root);
}

// Registered once, before anything is made, where a failure can still be
// reported: a root made without its removal registered would outlive the process.
void register_exit_removal(noop_state& s) {
  if (s.exit_removal) return;
  if (std::atexit(remove_noop_root) != 0)
    throw error(errc::backend_failure, "use_noop_device: cannot register the temporary directory's removal at exit");
  s.exit_removal = true;
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

// A root being set up: removed again, with whatever was made in it, unless
// the setup completes (nothing reads it yet, and a retry makes a new one).
class pending_root {
 public:
  explicit pending_root(std::string path) noexcept : path_(std::move(path)) {}
  pending_root(const pending_root&) = delete;
  pending_root& operator=(const pending_root&) = delete;
  ~pending_root() {
    if (!kept_) remove_root(path_);
  }
  const std::string& path() const noexcept { return path_; }
  /// The setup completed: the path, no longer removed here.
  std::string keep() noexcept {
    kept_ = true;
    return std::move(path_);
  }

 private:
  std::string path_;
  bool kept_ = false;
};

// The installed no-op driver's real path.
std::string noop_driver_path() {
  auto driver = find_noop_driver();
  if (driver.empty())
    throw error(errc::not_supported, "use_noop_device: XRT's no-op driver libxrt_noop.so.2 is not installed "
                                     "(looked in $XILINX_XRT/lib, /usr/lib/<multiarch>, /opt/xilinx/xrt/lib)");
  return driver;
}

// A fresh directory under $TMPDIR (or /tmp). Its path is made before the
// directory, so nothing that can throw lies between mkdtemp and its
// pending_root.
std::string make_temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/xrtio-noop-XXXXXX";
  if (!::mkdtemp(path.data()))
    throw error(errc::backend_failure, "use_noop_device: mkdtemp(" + path + "): " + std::strerror(errno));
  return path;
}

// The root's lib/ holds a symlink to the installed no-op driver.
void link_driver(const std::string& root, const std::string& driver) {
  if (::mkdir((root + "/" + lib_dir).c_str(), lib_dir_mode) != 0 ||
      ::symlink(driver.c_str(), (root + "/" + lib_driver_link).c_str()) != 0)
    throw error(errc::backend_failure,
                "use_noop_device: cannot link " + driver + " into " + root + ": " + std::strerror(errno));
}

// Unless the caller chose an xrt.ini, an empty one: a stray xrt.ini beside
// the executable or in the working directory cannot change the device.
// Returns whether it wrote one (XRT_INI_PATH is to point at it).
bool write_empty_ini(const std::string& root) {
  if (std::getenv("XRT_INI_PATH")) return false;
  std::ofstream f((root + "/" + ini_name).c_str());
  f << "# empty: isolates xrtio's no-op device from stray xrt.ini\n";
  f.close();
  if (!f) throw error(errc::backend_failure, "use_noop_device: cannot write " + root + "/" + ini_name);
  return true;
}

void set_env(const char* name, const std::string& value) {
  if (::setenv(name, value.c_str(), 1) != 0)
    throw error(errc::backend_failure, std::string("use_noop_device: setenv ") + name + ": " + std::strerror(errno));
}

// The variables that point XRT at the root, set together: if one cannot be
// set, those set before are put back as they were, so that none names the
// root, which the failed setup removes.
void point_xrt_at(const std::string& root, bool ini) {
  constexpr const char* names[] = {"XRT_INI_PATH", "XCL_EMULATION_MODE", "XILINX_XRT"};
  std::optional<std::string> before[std::size(names)];
  for (std::size_t i = 0; i < std::size(names); ++i)
    if (const char* v = std::getenv(names[i])) before[i] = v;
  try {
    if (ini) set_env(names[0], root + "/" + ini_name);
    set_env(names[1], "noop");
    set_env(names[2], root);
  } catch (...) {
    for (std::size_t i = 0; i < std::size(names); ++i)
      if (before[i])
        ::setenv(names[i], before[i]->c_str(), 1);
      else
        ::unsetenv(names[i]);
    throw;
  }
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
    register_exit_removal(s);
    auto driver = noop_driver_path();
    pending_root root(make_temp_dir());  // removed again if a step below fails
    link_driver(root.path(), driver);
    point_xrt_at(root.path(), write_empty_ini(root.path()));
    s.root = root.keep();
    s.owner = ::getpid();
    s.configured = true;
  }
  set_completion_delay(completion_delay);
  s.delay = completion_delay;
}

}  // namespace xrtio::xrt_backend
