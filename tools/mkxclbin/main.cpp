// xrtio-mkxclbin's command line: reads a description file, stdin or a preset
// and writes the xclbin (docs/TOOLS.md).
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "description.hpp"
#include "presets.hpp"
#include "xclbin_writer.hpp"

namespace xrtio::mkxclbin {
namespace {

/// Exit statuses (docs/TOOLS.md): written, I/O error, bad description or usage.
constexpr int exit_written = 0;
constexpr int exit_io_error = 1;
constexpr int exit_bad_input = 2;

struct command_line {
  std::string input, output;  ///< input: a path, "-" or empty (a preset)
  std::optional<std::string> uuid;
  const preset* chosen = nullptr;
};

// Usage:
//   xrtio-mkxclbin [--uuid UUID] DESCRIPTION -o OUT.xclbin   (DESCRIPTION "-" = stdin)
//   xrtio-mkxclbin --vadd -o OUT.xclbin                      (presets.hpp)
//   xrtio-mkxclbin --print-vadd                              (prints the preset)
//   xrtio-mkxclbin --npu -o OUT.xclbin                       (the NPU argument layout preset)
//   xrtio-mkxclbin --print-npu                               (prints that preset)
// No bitstream: the output is meant for XRT's no-op device and for tests
// (docs/DESIGN.md, "Testing without hardware: the no-op device").
int usage(const char* msg = nullptr) {
  if (msg) std::cerr << "xrtio-mkxclbin: " << msg << "\n";
  std::cerr << "usage: xrtio-mkxclbin [--uuid UUID] (DESCRIPTION | - | --vadd | --npu) -o OUT.xclbin\n"
               "       xrtio-mkxclbin --print-vadd | --print-npu\n"
               "format: see docs/TOOLS.md\n";
  return exit_bad_input;
}

// The preset whose `which` option `a` is, or null.
const preset* find_preset(std::string_view a, std::string_view preset::*which) {
  for (auto& p : presets)
    if (a == p.*which) return &p;
  return nullptr;
}

// Reads the arguments into `cl`, in order. Returns the exit status when the
// command ends here (usage error, help, a preset printed), else nullopt.
std::optional<int> parse_command_line(int argc, char** argv, command_line& cl) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (auto* p = find_preset(a, &preset::option)) {
      if (cl.chosen) return usage("more than one preset");
      cl.chosen = p;
    } else if (auto* shown = find_preset(a, &preset::print_option)) {
      std::cout << shown->text;
      return exit_written;
    } else if (a == "-o" && i + 1 < argc) cl.output = argv[++i];
    else if (a == "--uuid" && i + 1 < argc) cl.uuid = argv[++i];
    else if (a == "-h" || a == "--help") return usage(), exit_written;
    else if (!a.empty() && a[0] == '-' && a != "-") return usage(("unknown option " + a).c_str());
    else if (cl.input.empty()) cl.input = a;
    else return usage("more than one description");
  }
  if (cl.output.empty()) return usage("no output (-o OUT.xclbin)");
  if ((cl.chosen != nullptr) == !cl.input.empty()) return usage("give one of DESCRIPTION, -, --vadd or --npu");
  return std::nullopt;
}

// The description text: the preset's, stdin's or the file's; nullopt, after
// a message, when the file cannot be opened.
std::optional<std::string> read_description(const command_line& cl) {
  if (cl.chosen) return std::string(cl.chosen->text);
  if (cl.input == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  std::ifstream f(cl.input);
  if (!f) {
    std::cerr << "xrtio-mkxclbin: cannot read " << cl.input << ": " << std::strerror(errno) << "\n";
    return std::nullopt;
  }
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

bool write_output(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())) || !out.flush()) {
    std::cerr << "xrtio-mkxclbin: cannot write " << path << ": " << std::strerror(errno) << "\n";
    return false;
  }
  return true;
}

int run(int argc, char** argv) {
  command_line cl;
  if (auto done = parse_command_line(argc, argv, cl)) return *done;
  auto text = read_description(cl);
  if (!text) return exit_io_error;
  std::vector<char> bytes;
  try {
    bytes = build_xclbin(parse_description(*text), *text, cl.uuid);
  } catch (const bad_input& e) {
    std::cerr << "xrtio-mkxclbin: " << (cl.chosen ? std::string(cl.chosen->option) : cl.input) << ": " << e.what()
              << "\n";
    return exit_bad_input;
  }
  return write_output(cl.output, bytes) ? exit_written : exit_io_error;
}

}  // namespace
}  // namespace xrtio::mkxclbin

int main(int argc, char** argv) { return xrtio::mkxclbin::run(argc, argv); }
