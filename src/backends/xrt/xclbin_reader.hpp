// The xclbin reader: checks an xclbin's structure before XRT's parser sees it
// (XRT 2.13 trusts what a corrupt file could use to crash the process), then
// describes it. Needs no device, so a fuzz target can call parse_xclbin alone.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include <experimental/xrt_xclbin.h>

#include "xrtio/xrt.hpp"

namespace xrtio::xrt_backend::detail {

/// An xclbin accepted by xrtio's checks and by XRT's parser.
struct loaded_xclbin {
  xrt::xclbin xclbin;  ///< what a device loads
  xclbin_info info;    ///< what xrtio tells its users (inspect_xclbin)
};

/// Checks the bytes of an xclbin (magic, lengths, section bounds, element
/// counts, cross-section indices), has XRT's parser read the part the header
/// claims (anything after m_length, e.g. a signature, is ignored) and
/// describes it. `name` stands for the source in messages and becomes
/// xclbin_info::path; xclbin_info::file_size is the header's m_length.
/// Opens no device.
/// Errors: errc::invalid_xclbin naming `name` and what is wrong (truncated,
/// corrupt, rejected by XRT).
xclbin_info parse_xclbin(std::span<const std::byte> bytes, const std::string& name = "<memory>");

/// Reads the file at `path`, then what parse_xclbin does, keeping XRT's
/// xrt::xclbin for a device to load.
/// Errors: errc::invalid_xclbin, also for no path, a missing or unreadable
/// file and one that is not a regular file.
loaded_xclbin load_xclbin_file(const std::string& path);

}  // namespace xrtio::xrt_backend::detail
