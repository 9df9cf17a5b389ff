// A runtime of its own with a simulated device bound to it: for test files
// that tune runtime_options and must not share the default runtime.
#pragma once

#include <utility>

#include "xrtio/xrtio.hpp"

struct sim_runtime {
  xrtio::runtime rt;
  xrtio::context ctx;
  explicit sim_runtime(xrtio::runtime_options o = {}, xrtio::sim::device_config cfg = {}) : rt(o) {
    ctx = xrtio::sim::open(std::move(cfg));
    ctx.bind(rt);
  }
};
