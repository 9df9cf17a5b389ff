// Calls into a backend: an xrtio::error passes through, any other exception
// becomes errc::backend_failure naming the operation (docs/DESIGN.md, "Errors").
#pragma once

#include <exception>
#include <string>

#include "xrtio/error.hpp"

namespace xrtio::detail {

template <class F>
void native_call(const char* what, F&& f) {
  try {
    f();
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    throw error(errc::backend_failure, std::string(what) + ": " + e.what());
  }
}

}  // namespace xrtio::detail
