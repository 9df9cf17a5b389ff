// The process's retained runs (see retained_registry.hpp), and the public
// retained_runs() / reap_retained().
#include "run/retained_registry.hpp"

#include <cstdio>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <mutex>

#include "xrtio/run.hpp"

namespace xrtio::detail {
namespace {

// Made once, in static storage, and never destroyed: LeakSanitizer sees
// every retained record as reachable, and no static destructor frees memory
// a device may still write at exit. Not on the heap: its first use may be
// in a noexcept function (retained_runs(), keep_retained), where a failed
// allocation ended the process (test "retained runs: the registry's first
// use allocates nothing...").
struct retained_registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<retained_record>> records;
};
retained_registry& registry() noexcept {
  alignas(retained_registry) static std::byte storage[sizeof(retained_registry)];
  static auto* r = ::new (storage) retained_registry;  // constructing it allocates nothing
  return *r;
}

// A record may go once no abort is still under way on it and its device
// reports a final state.
bool reapable(const retained_record& r) noexcept {
  bool abort_busy = r.ticket && r.ticket->get() == abort_ticket::pending;
  auto* n = r.native();
  return !abort_busy && n && is_final(n->state());
}

}  // namespace

void retention_out_of_memory() noexcept {
  std::fputs("xrtio: out of memory while retaining a run the device will not release\n", stderr);
  std::abort();
}

void keep_retained(std::unique_ptr<retained_record> r) noexcept {
  auto& reg = registry();
  std::lock_guard lock(reg.mutex);
  try {
    reg.records.push_back(std::move(r));
  } catch (...) {
    retention_out_of_memory();
  }
}

}  // namespace xrtio::detail

namespace xrtio {

std::size_t retained_runs() noexcept {
  auto& reg = detail::registry();
  std::lock_guard lock(reg.mutex);
  return reg.records.size();
}

std::size_t reap_retained() noexcept {
  auto& reg = detail::registry();
  std::vector<std::unique_ptr<detail::retained_record>> done;
  {
    std::lock_guard lock(reg.mutex);
    auto& v = reg.records;
    for (std::size_t i = 0; i < v.size();) {
      if (!detail::reapable(*v[i])) {
        ++i;
        continue;
      }
      try {
        done.push_back(std::move(v[i]));
      } catch (...) {
        break;  // no memory to list it: reap it another time
      }
      v[i] = std::move(v.back());
      v.pop_back();
    }
  }
  // Outside the lock: leases first, then the native run, then the buffers.
  for (auto& r : done) {
    for (auto& q : r->reqs) q.tracker->release(q.id);
    r->run.reset();
    if (r->prepared) r->prepared->in_flight.store(false, std::memory_order_release);
  }
  return done.size();
}

}  // namespace xrtio
