// Everything xrtio offers, in one include.
#pragma once

#include "xrtio/async_run.hpp"
#include "xrtio/buffer.hpp"
#include "xrtio/context.hpp"
#include "xrtio/error.hpp"
#include "xrtio/file.hpp"
#include "xrtio/inloop.hpp"
#include "xrtio/load_file.hpp"
#include "xrtio/memory_budget.hpp"
#include "xrtio/metrics.hpp"
#include "xrtio/prepared.hpp"
#include "xrtio/run.hpp"
#include "xrtio/run_state.hpp"
#include "xrtio/runtime.hpp"
#include "xrtio/sim.hpp"
#include "xrtio/trace.hpp"
