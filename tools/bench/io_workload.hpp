// One --io cell's workload: the case (4 KiB random or 1 MiB sequential
// reads), the cache state, the queue depth, and the offsets it reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace bench::io {

enum class io_case { rand4k, seq1m };

inline const char* case_name(io_case c) noexcept { return c == io_case::rand4k ? "rand4k" : "seq1m"; }
inline std::size_t request_bytes(io_case c) noexcept { return c == io_case::rand4k ? 4096 : 1 << 20; }

// The xrtio contenders' file_options set from the command line; negative:
// the library's default.
struct xrtio_knobs {
  std::int64_t inline_limit = -1;  // inline_read_limit (--io-inline-limit)
  std::int64_t worker_min = -1;    // worker_read_min (--io-worker-min)
  std::int64_t worker_floor = -1;  // worker_in_flight_min (--io-worker-floor)
};

// What a contender needs to run one cell. cold: open with O_DIRECT (the page
// cache bypassed) and read into 4 KiB-aligned buffers; hot: buffered, the
// file in the page cache.
struct io_spec {
  io_case kind = io_case::rand4k;
  bool cold = false;
  int depth = 1;
  std::string path;
  std::uint64_t file_size = 0;  // a multiple of 1 MiB
  double warm_s = 0.05, window_s = 0.2;
  xrtio_knobs knobs;
  std::size_t bytes() const noexcept { return request_bytes(kind); }
};

// The file offsets of a cell's requests: uniformly random 4 KiB blocks
// (xorshift64*, seeded per contender thread so runs repeat), or 1 MiB steps
// through the file, wrapping at its end.
class offset_gen {
 public:
  offset_gen(const io_spec& s, std::uint64_t seed) noexcept
      : kind_(s.kind), blocks_(s.file_size / s.bytes()), state_(seed | 1) {}
  std::uint64_t next() noexcept {
    if (kind_ == io_case::seq1m) {
      std::uint64_t off = cursor_ * request_bytes(kind_);
      cursor_ = cursor_ + 1 == blocks_ ? 0 : cursor_ + 1;
      return off;
    }
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return ((state_ * 0x2545f4914f6cdd1dull) % blocks_) * request_bytes(kind_);
  }

 private:
  io_case kind_;
  std::uint64_t blocks_, state_, cursor_ = 0;
};

}  // namespace bench::io
