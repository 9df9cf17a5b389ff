// Helpers shared by the foundation suites (memory, budget, sim, sync runs).
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "xrtio/context.hpp"
#include "xrtio/error.hpp"
#include "xrtio/sim.hpp"

namespace ftest {

/// Runs `f`, requires it to throw xrtio::error with `want`, returns what().
template <class F>
std::string error_of(F&& f, xrtio::errc want) {
  try {
    f();
  } catch (const xrtio::error& e) {
    CHECK_MESSAGE(e.code() == xrtio::make_error_code(want), "got ", e.code().message(), ": ", e.what());
    return e.what();
  }
  FAIL("expected xrtio::error(", xrtio::make_error_code(want).message(), ")");
  return {};
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

inline xrtio::sim::device& device_of(const xrtio::context& ctx) {
  return xrtio::sim::device_of(ctx);
}

}  // namespace ftest

#define CHECK_CONTAINS(s, part) \
  CHECK_MESSAGE(ftest::contains((s), (part)), "\"", (s), "\" lacks \"", (part), "\"")
