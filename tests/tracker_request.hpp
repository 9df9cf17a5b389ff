// A request for one range of one allocation's tracker, as run_core builds
// them: shared by the access tracker suites (test_memory, test_shared_reads).
#pragma once

#include <cstddef>

#include "xrtio/detail/access_tracker.hpp"

namespace ttest {

inline xrtio::detail::access_request req(xrtio::detail::access_tracker& t, std::size_t b, std::size_t e,
                                         xrtio::detail::access_mode m) {
  xrtio::detail::access_request r;
  r.tracker = &t;
  r.begin = b;
  r.end = e;
  r.mode = m;
  return r;
}

}  // namespace ttest
