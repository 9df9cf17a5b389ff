// The --io contenders' names and the dispatch from a name to its cell.
#include "io_contenders.hpp"

#include <cstdio>
#include <exception>

#include "io_common.hpp"

namespace bench::io {

const std::vector<std::string>& all_io_contenders() {
  static const std::vector<std::string> names = {"xrtio", "xrtio-inloop", "pread-thread", "pread-thread-1buf", "pread-post",
                                                  "pread-pool", "asio-file", "raw-uring"};
  return names;
}

std::optional<io_result> run_io_contender(const std::string& name, const io_spec& s, std::string& why) {
  reset_cell();
  try {
    if (name == "pread-thread" || name == "pread-thread-1buf") return run_pread_thread(s, name == "pread-thread-1buf");
    if (name == "pread-pool" || name == "pread-post") return run_pread_pool(s, name == "pread-post");
    if (name == "raw-uring") return run_raw_uring(s);
    if (name == "asio-file") return run_asio_file(s);
    if (is_xrtio(name))
      return run_xrtio_file(s, name.starts_with("xrtio-inloop"), !name.ends_with("-noreg"));
    why = "unknown contender";
    return std::nullopt;
  } catch (const unavailable& e) {
    why = e.what();
    return std::nullopt;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s %s %s QD=%d: %s\n", name.c_str(), case_name(s.kind), s.cold ? "cold" : "hot", s.depth,
                 e.what());
    io_result r;
    r.errors = 1;
    return r;
  }
}

}  // namespace bench::io
