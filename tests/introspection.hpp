// Test support: what a test may look at behind xrtio's public handles
// (leases held on an allocation, who shares a buffer's or context's state),
// through the library's friend access type. Users have no such need.
#pragma once

#include "xrtio/buffer.hpp"
#include "xrtio/detail/access.hpp"

namespace xtest {

/// The access tracker of `b`'s root allocation.
inline xrtio::detail::access_tracker& tracker(const xrtio::buffer& b) {
  return *xrtio::detail::access::state(b)->tracker;
}
/// The shared state behind a buffer, context or prepared run.
template <class Handle>
const auto& state(const Handle& h) {
  return xrtio::detail::access::state(h);
}

}  // namespace xtest
