// The text description xrtio-mkxclbin reads and its parser. Needs nothing but
// XRT's xclbin.h (for the bank types), so a fuzz target can call
// parse_description alone.
#pragma once

#include <xclbin.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace xrtio::mkxclbin {

/// A description the tool cannot turn into an xclbin. The message names the
/// line when one line is at fault ("line 3: ...").
struct bad_input : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A `bank` line: one MEM_TOPOLOGY entry.
struct bank_desc {
  std::string tag;
  std::uint64_t size = 0;              ///< bytes
  std::optional<std::uint64_t> base;   ///< default: the end of the previous bank
  std::uint8_t type = MEM_DDR4;
  bool used = true;
};
/// An `arg` line.
struct arg_desc {
  std::string name, type;
  bool buffer = true;
  std::uint64_t size = 0;  ///< register bytes (a buffer's pointer takes 8)
  std::vector<std::string> banks;
};
/// A `cu` line: one IP_LAYOUT entry.
struct cu_desc {
  std::string name;
  std::optional<std::uint64_t> base;  ///< default: the next free slot (sections.cpp)
};
/// A `kernel` line and the `cu` and `arg` lines after it.
struct kernel_desc {
  std::string name;
  std::vector<cu_desc> cus;
  std::vector<arg_desc> args;
};
/// A whole description, checked: at least one kernel, each with a compute
/// unit, and every bank an argument names declared.
struct description {
  std::string platform = "xrtio_synthetic";
  std::optional<std::string> uuid;  ///< as written; checked when the xclbin is built
  std::vector<bank_desc> banks;
  std::vector<kernel_desc> kernels;
};

// Description format (docs/TOOLS.md): one statement per line; '#' starts a
// comment; fields are separated by blanks; numbers are decimal or 0x-hex,
// sizes may end in K, M or G (binary units).
//
//   platform NAME                         header platform (VBNV)
//   uuid XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX
//   bank TAG size=SIZE [base=ADDR] [type=DDR4|DDR3|DRAM|HBM|HOST|BRAM|URAM] [unused]
//   kernel NAME                           starts a kernel; cu/arg lines below belong to it
//   cu NAME [base=ADDR]                   a compute unit (IP_LAYOUT "kernel:cu")
//   arg NAME buffer TYPE BANK[,BANK...]   a global-memory argument (e.g. "int*")
//   arg NAME scalar TYPE SIZE             a scalar argument of SIZE bytes (e.g. "uint 4")
//
// Throws bad_input, naming the line where one line is at fault.
description parse_description(std::string_view text);

}  // namespace xrtio::mkxclbin
