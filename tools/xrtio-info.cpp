// xrtio-info: the devices XRT sees and what an xclbin holds (uuid, kernels,
// compute units, arguments with kind, size, type and memory bank, memory
// banks). A missing, truncated or corrupt xclbin is reported on stderr with
// a non-zero exit, never a crash: xrtio checks the file's structure before
// XRT parses it (xrt_backend::inspect_xclbin). See docs/TOOLS.md.
//
// Usage: xrtio-info [--noop[=DELAY_US]] [--devices] [XCLBIN...]
//   --noop      use XRT's no-op device (xrt_backend::use_noop_device)
//   --devices   list devices (the default when no xclbin is given)
// Exit status: 0 all fine, 1 some xclbin could not be read, 2 usage.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "xrtio/error.hpp"
#include "xrtio/xrt.hpp"

namespace {

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string human(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + " " + units[u];
}

void print(const xrtio::xrt_backend::xclbin_info& x) {
  using xrtio::backend::arg_kind;
  std::cout << "xclbin:   " << x.path << " (" << x.file_size << " bytes)\n"
            << "uuid:     " << x.uuid << "\n"
            << "platform: " << (x.platform.empty() ? "-" : x.platform) << "\n"
            << "memory banks: " << x.banks.size() << "\n";
  auto tag = [&](int index) -> std::string {
    for (auto& b : x.banks)
      if (b.index == index) return b.tag;
    return "?";
  };
  for (auto& b : x.banks)
    std::cout << "  [" << b.index << "] " << b.tag << "  " << b.type << "  " << (b.used ? "used" : "unused")
              << "  base " << hex(b.base_address) << "  size " << human(b.size_bytes) << "\n";
  std::cout << "kernels: " << x.kernels.size() << "\n";
  for (auto& k : x.kernels) {
    std::cout << "  " << k.name << "\n    compute units: " << k.compute_units.size() << "\n";
    for (auto& c : k.compute_units) std::cout << "      " << c.name << " @ " << hex(c.base_address) << "\n";
    std::cout << "    arguments: " << k.args.size() << "\n";
    for (auto& a : k.args) {
      std::cout << "      " << a.index << " " << a.name << "  " << (a.kind == arg_kind::buffer ? "buffer" : "scalar")
                << "  " << a.type << "  " << a.size << " bytes  offset " << hex(a.offset) << "  port " << a.port;
      if (a.kind == arg_kind::buffer) {
        if (a.banks.empty()) {
          std::cout << "  no memory connection";
        } else {
          std::cout << "  group_id " << a.group_id << " (";
          for (std::size_t i = 0; i < a.banks.size(); ++i)
            std::cout << (i ? ", " : "") << a.banks[i] << ":" << tag(a.banks[i]);
          std::cout << ")";
        }
      }
      std::cout << "\n";
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool devices = false;
  std::vector<std::string> files;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--devices") {
        devices = true;
      } else if (a == "--noop" || a.rfind("--noop=", 0) == 0) {
        long us = 0;
        if (a.size() > 7) {
          std::size_t used = 0;
          us = std::stol(a.substr(7), &used);
          if (used != a.size() - 7 || us < 0) throw std::invalid_argument(a);
        }
        xrtio::xrt_backend::use_noop_device(std::chrono::microseconds(us));
      } else if (a == "-h" || a == "--help") {
        std::cout << "usage: xrtio-info [--noop[=DELAY_US]] [--devices] [XCLBIN...]\n";
        return 0;
      } else if (!a.empty() && a[0] == '-') {
        std::cerr << "xrtio-info: unknown option " << a << "\nusage: xrtio-info [--noop[=DELAY_US]] [--devices] [XCLBIN...]\n";
        return 2;
      } else {
        files.push_back(a);
      }
    }
  } catch (const std::invalid_argument&) {
    std::cerr << "xrtio-info: --noop takes a non-negative delay in microseconds\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "xrtio-info: " << e.what() << "\n";
    return 2;
  }

  int status = 0;
  if (devices || files.empty()) {
    try {
      auto list = xrtio::xrt_backend::list_devices();
      std::cout << "devices: " << list.size() << "\n";
      for (auto& d : list) std::cout << "  " << d << "\n";
    } catch (const std::exception& e) {
      std::cerr << "xrtio-info: listing devices: " << e.what() << "\n";
      status = 1;
    }
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    try {
      auto info = xrtio::xrt_backend::inspect_xclbin(files[i]);
      if (i || devices) std::cout << "\n";
      print(info);
    } catch (const std::exception& e) {
      std::cerr << "xrtio-info: " << e.what() << "\n";
      status = 1;
    }
  }
  std::cout.flush();
  return status;
}
