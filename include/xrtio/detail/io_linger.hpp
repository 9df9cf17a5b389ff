// Keeping a submitting io thread awake while its short run is out
// (docs/DESIGN.md, "The io thread lingers"): in reactor-thread mode a
// completion that finds its io_context asleep costs a wake-up, about 10 us
// on this project's VM, more than a short run itself. So a run submitted from
// inside a handler of an io_context, while the runtime's recent runs are
// short, defers a handler to that io_context that re-defers itself until the
// completion has run on this thread or an adaptive budget has passed.
#pragma once

#include <asio/io_context.hpp>
#include <chrono>

namespace xrtio::detail {

class reactor;

/// How long at most a run submitted now to `r` keeps its submitting thread
/// awake: `r`'s spin window in reactor-thread mode while the runs it
/// completed recently took less than that on the device, else 0 (no
/// linger). Any thread.
std::chrono::nanoseconds linger_window(const reactor& r) noexcept;

/// On a thread running `io`, inside one of its handlers, right after a
/// submission: keeps this thread running `io` until a batch of completions
/// has run on it or an adaptive budget (at most `window`) has passed. If it
/// already lingers, the linger goes on for the new run instead
/// (src/reactor/io_linger.cpp). With `window` 0 it only makes this thread's
/// state, once: called for every run submitted from a handler, so that the
/// thread's one allocation happens at its first such run, not at the first
/// linger, which may come in the middle of a steady state.
void linger_begin(asio::io_context& io, std::chrono::nanoseconds window) noexcept;

/// A batch of completions is about to run on this thread.
void linger_note_completions() noexcept;

/// Whether this thread lingers now (a linger handler is queued or running):
/// for tests.
bool linger_active_here() noexcept;

}  // namespace xrtio::detail
