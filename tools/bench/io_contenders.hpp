// The --io contenders: ways to read a file into memory, each run for one
// cell (case, cache, queue depth). xrtio: io_xrtio.cpp; pread-thread,
// pread-pool: io_pread_*.cpp; asio-file: io_asio_file.cpp (a child
// process); raw-uring (the host limit): io_raw_uring.cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io_measure.hpp"
#include "io_workload.hpp"

namespace bench::io {

constexpr int pool_threads = 4;  // pread-pool

// Every contender, in the default order; raw-uring is the host limit, not a
// contender: the ratios leave it out. Two more rows are references, shown
// and never the best an xrtio row is measured against: pread-thread-1buf
// reads every request into one buffer, keeping none of what it read
// (io_pread_thread.cpp), and pread-post reads on the io thread itself, then
// posts the completion: the least a cached read completed through an
// executor costs (io_pread_pool.cpp).
const std::vector<std::string>& all_io_contenders();
inline bool is_host_limit(const std::string& n) { return n == "raw-uring"; }
inline bool is_reference(const std::string& n) {
  return n == "raw-uring" || n == "pread-thread-1buf" || n == "pread-post";
}
// xrtio-noreg, xrtio-inloop-noreg: the same with file_options::register_with_ring
// off (nothing registered with the ring); not in the default list.
inline bool is_xrtio(const std::string& n) {
  return n == "xrtio" || n == "xrtio-inloop" || n == "xrtio-noreg" || n == "xrtio-inloop-noreg";
}

// Runs one cell of `name`. nullopt with `why` when it cannot run here (not
// built, no io_uring) or is unknown; a result with errors when it failed.
std::optional<io_result> run_io_contender(const std::string& name, const io_spec& s, std::string& why);

io_result run_pread_thread(const io_spec& s, bool one_buffer);
io_result run_pread_pool(const io_spec& s, bool on_io_thread);  // true: pread-post
io_result run_raw_uring(const io_spec& s);
io_result run_asio_file(const io_spec& s);  // runs xrtio-bench-asio-file
io_result run_xrtio_file(const io_spec& s, bool inloop, bool registered);

}  // namespace bench::io
