// A request for one range of one allocation's tracker, as run_core builds
// them, a one-request acquisition and a listener that counts its calls:
// shared by the access tracker suites (test_memory, test_shared_reads,
// test_lone_lease).
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

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

inline xrtio::detail::acquire_status take(xrtio::detail::access_request& r,
                                          xrtio::detail::holder_kind h = xrtio::detail::holder_kind::run,
                                          std::string* why = nullptr, const xrtio::detail::access_waiter* w = nullptr) {
  return xrtio::detail::access_tracker::acquire({&r, 1}, h, why, w);
}

struct counting_listener final : xrtio::detail::access_listener {
  std::atomic<int> told{0};
  void access_released() noexcept override { told.fetch_add(1); }
};

}  // namespace ttest
