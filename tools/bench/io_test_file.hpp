// The --io test file: made in --io-dir with the pattern of io_pattern.hpp,
// checked for O_DIRECT support, pulled into the page cache for hot cells,
// removed at the end.
#pragma once

#include <cstdint>
#include <string>

namespace bench::io {

struct test_file {
  std::string path;
  std::uint64_t size = 0;
  bool direct_ok = false;
  std::string direct_reason;  // why O_DIRECT cannot be used (empty when it can)

  test_file() = default;
  test_file(const test_file&) = delete;
  test_file& operator=(const test_file&) = delete;
  ~test_file();  // removes the file
};

// The default --io-dir: $TMPDIR, else the current directory.
std::string default_io_dir();

// Writes `size` bytes (rounded up to 1 MiB) of the pattern to a new file in
// dir, fsyncs it and probes O_DIRECT. False with `error` set on failure.
bool make_test_file(const std::string& dir, std::uint64_t size, test_file& f, std::string& error);

// Reads the whole file through the page cache (the hot cells' state).
void warm_page_cache(const test_file& f);

}  // namespace bench::io
