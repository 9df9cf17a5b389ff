// What every handle of one open file and every transfer in flight on it
// share: the descriptors and how they may be used (docs/DESIGN.md, "File I/O").
#pragma once

#include <atomic>
#include <string>

#include "reactor/ring_registrations.hpp"
#include "xrtio/file.hpp"

namespace xrtio::detail {

struct file_state {
  int fd = -1;
  // O_DIRECT files with misaligned_policy::bounce: the same file opened
  // without O_DIRECT, for the pieces O_DIRECT cannot take (-1: none).
  int buffered_fd = -1;
  bool direct = false;
  bool stream = false;  // pipe, socket, character device: no offsets
  std::string fallback_reason;
  // preadv2(RWF_NOWAIT) was refused on fd (file system or emulator without
  // it): inline reads are not tried again.
  std::atomic<bool> nowait_refused{false};
  file_options options;
  // Its slots in the file tables of the rings that performed its transfers
  // (file_options::register_with_ring): emptied by ~file_state before fd is
  // closed, so that no ring keeps the file open after it.
  ring_registrations rings;

  file_state() = default;
  file_state(const file_state&) = delete;
  file_state& operator=(const file_state&) = delete;
  ~file_state();
};

}  // namespace xrtio::detail
