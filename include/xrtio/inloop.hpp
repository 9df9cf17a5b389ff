// In-loop mode: an io_context thread that is dedicated to device traffic
// observes its runtime's runs itself, between its handlers, so a completion
// reaches its coroutine with no reactor thread and no wake-up hop
// (docs/DESIGN.md, "In-loop mode").
#pragma once

#include <asio/io_context.hpp>
#include <cstddef>

#include "xrtio/runtime.hpp"

namespace xrtio {

/// Runs `io` on the calling thread together with `rt`, a runtime made with
/// runtime_options::reactor_thread = false. Between handlers this thread
/// takes rt's new runs, polls their states, enforces deadlines and aborts,
/// and posts completions (to `io` when their handlers live there: they run
/// in the same call). While rt has runs in flight and nothing else is ready
/// it polls for runtime_options::inloop_spin, then sleeps in io.run_one_until
/// with a backoff; with none in flight it blocks in io.run_one(), woken by
/// work from other threads (including runs submitted there).
///
/// Returns, like io.run(), when `io` runs out of work and rt has no run in
/// flight, or when io.stop() is called: the number of handlers run. Runs
/// still in flight then are observed by the next call, or completed (aborted
/// after shutdown_grace) by the runtime's destructor. Call it
/// from one thread at a time per runtime, and destroy `io` only after it
/// returned. Errors (thrown): errc::not_supported (rt has its own reactor
/// thread), errc::busy (another thread drives rt).
std::size_t run(asio::io_context& io, runtime& rt);

}  // namespace xrtio
