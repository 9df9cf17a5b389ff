// The EMBEDDED_METADATA section: the XML XRT reads kernels and arguments from,
// with register offsets in Vitis' layout.
#include "metadata_xml.hpp"

#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>

#include "encoding.hpp"

namespace xrtio::mkxclbin {
namespace {

/// The first argument's register: 0x00-0x0c hold Vitis' control, global
/// interrupt enable, IP interrupt enable and status registers.
constexpr std::uint64_t first_arg_offset = 0x10;
/// Each argument takes its size rounded up to 4 bytes (32-bit AXI-Lite
/// registers), then a 4-byte gap, as Vitis lays them out.
constexpr std::uint64_t register_bytes = 4;
constexpr std::uint64_t arg_gap = 4;
/// The smallest S_AXI_CONTROL range (4 KiB); it doubles until the registers fit.
constexpr std::uint64_t min_control_range = 0x1000;

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// Each argument's register offset; `end` is where the next one would go.
struct register_map {
  std::vector<std::uint64_t> offsets;
  std::uint64_t end = first_arg_offset;
};

register_map layout_registers(const kernel_desc& k) {
  register_map r;
  for (auto& a : k.args) {
    r.offsets.push_back(r.end);
    r.end += ((a.size + register_bytes - 1) & ~(register_bytes - 1)) + arg_gap;
  }
  return r;
}

std::uint64_t control_range(std::uint64_t end) {
  std::uint64_t range = min_control_range;
  while (range < end) range <<= 1;
  return range;
}

void write_arg(std::ostream& x, const arg_desc& a, std::size_t id, std::uint64_t offset) {
  x << "          <arg name=\"" << xml_escape(a.name) << "\" addressQualifier=\"" << (a.buffer ? 1 : 0)
    << "\" id=\"" << id << "\" port=\"" << (a.buffer ? "M_AXI_GMEM" : "S_AXI_CONTROL") << "\" size=\""
    << hex(a.size) << "\" offset=\"" << hex(offset) << "\" hostOffset=\"0x0\" hostSize=\"" << hex(a.size)
    << "\" type=\"" << xml_escape(a.type) << "\"/>\n";
}

void write_kernel(std::ostream& x, const kernel_desc& k) {
  auto regs = layout_registers(k);
  x << "        <kernel name=\"" << xml_escape(k.name)
    << "\" language=\"c\" type=\"pl\" hwControlProtocol=\"ap_ctrl_hs\">\n"
    << "          <port name=\"S_AXI_CONTROL\" mode=\"slave\" range=\"" << hex(control_range(regs.end))
    << "\" dataWidth=\"32\" portType=\"addressable\" base=\"0x0\"/>\n"
    << "          <port name=\"M_AXI_GMEM\" mode=\"master\" range=\"0xFFFFFFFF\" dataWidth=\"32\" "
       "portType=\"addressable\" base=\"0x0\"/>\n";
  for (std::size_t i = 0; i < k.args.size(); ++i) write_arg(x, k.args[i], i, regs.offsets[i]);
  for (auto& c : k.cus) x << "          <instance name=\"" << xml_escape(c.name) << "\"/>\n";
  x << "        </kernel>\n";
}

}  // namespace

std::vector<char> embedded_metadata_section(const description& d) {
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<project name=\"xrtio-mkxclbin\">\n"
    << "  <platform vendor=\"xrtio\" boardid=\"synthetic\" name=\"" << xml_escape(d.platform) << "\">\n"
    << "    <device name=\"fpga0\" fpgaDevice=\"synthetic\">\n"
    << "      <core name=\"OCL_REGION_0\" target=\"hw\" type=\"clc_region\">\n";
  for (auto& k : d.kernels) write_kernel(x, k);
  x << "      </core>\n    </device>\n  </platform>\n</project>\n";
  std::string xml = x.str();
  return {xml.begin(), xml.end()};
}

}  // namespace xrtio::mkxclbin
