// xrtio::kernel: a kernel of a context's program and its argument metadata.
#include <string>

#include "xrtio/context.hpp"
#include "xrtio/error.hpp"

namespace xrtio {

int kernel::group_id(unsigned index) const {
  const auto& a = args();
  if (index >= a.size())
    throw error(errc::out_of_range, "kernel " + name() + ": group_id(" + std::to_string(index) + ") but it has " +
                                        std::to_string(a.size()) + " arguments");
  return a[index].group_id;
}

xrtio::context kernel::context() const {
  xrtio::context c;
  return c.state_ = context_, c;
}

}  // namespace xrtio
