// The built-in descriptions behind --vadd and --npu (docs/TOOLS.md), and the
// options that select and print them.
#pragma once

#include <string_view>

namespace xrtio::mkxclbin {

/// vadd: c[i] = a[i] + b[i], describing like the sample vadd-noop.xclbin.
inline constexpr std::string_view vadd_preset = R"(# vadd: c[i] = a[i] + b[i], like the sample vadd-noop.xclbin
platform xilinx_noop_fake_1_0
bank bank0 size=1G base=0x0 type=DDR4
kernel vadd
cu vadd_1 base=0x1800000
arg a buffer int* bank0
arg b buffer int* bank0
arg c buffer int* bank0
arg n scalar uint 4
)";

/// The argument layout of a Ryzen AI NPU kernel as mlir-aie / IRON host code
/// calls it (xrtio/xrt.hpp, "NPU calling convention"): opcode, instruction
/// buffer on group 1, instruction word count, data buffers on groups 3, 4, 5.
/// Only the layout: there is no AIE program, and the banks are synthetic.
inline constexpr std::string_view npu_preset = R"(# npu: the MLIR_AIE argument layout (opcode, instr, ninstr, bo0..bo2)
platform xrtio_npu_layout
bank unused0 size=64M unused
bank instr size=64M
bank unused2 size=64M unused
bank data0 size=64M
bank data1 size=64M
bank data2 size=64M
kernel MLIR_AIE
cu MLIRAIE
arg opcode scalar ulong 8
arg instr buffer char* instr
arg ninstr scalar uint 4
arg bo0 buffer void* data0
arg bo1 buffer void* data1
arg bo2 buffer void* data2
)";

/// A preset and its two options: one builds from it, the other prints it.
struct preset {
  std::string_view option;        ///< e.g. "--vadd"
  std::string_view print_option;  ///< e.g. "--print-vadd"
  std::string_view text;
};

inline constexpr preset presets[] = {{"--vadd", "--print-vadd", vadd_preset}, {"--npu", "--print-npu", npu_preset}};

}  // namespace xrtio::mkxclbin
