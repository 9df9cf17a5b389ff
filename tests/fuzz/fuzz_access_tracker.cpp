// Fuzz target: the access tracker (docs/DESIGN.md, invariant 6) driven by
// random acquire / retry / withdraw / release / retain sequences over random
// overlapping ranges of three allocations, checked step by step against a
// reference model written from the documented rules, not from the code:
//
// - any number of readers or one writer per overlapping byte range; the
//   requests of one acquisition never conflict with each other;
// - all or nothing: a refused acquisition changes no lease;
// - the first request (in order) that is blocked decides the outcome: by a
//   held lease, `retained` if that lease's run was retained, else
//   `conflict`; by an earlier conflicting waiter (any waiter for a
//   newcomer), `conflict`;
// - with a waiter, `conflict` becomes `queued`, and the waiter takes its
//   place (once per range) in every tracker it touches, in sequence order;
//   success removes it from those trackers;
// - release and withdraw free what they name and nothing else; a stale id
//   (other than the shared-read id, a count: see access_tracker.hpp)
//   releases nothing;
// - no lost wake-up: a queued waiter whose retry would now end (acquired, or
//   refused for good by a retained range) has been told so since its last try.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "fuzz_input.hpp"
#include "xrtio/detail/access_tracker.hpp"

namespace {

using xrtio::detail::access_listener;
using xrtio::detail::access_mode;
using xrtio::detail::access_request;
using xrtio::detail::access_tracker;
using xrtio::detail::access_waiter;
using xrtio::detail::acquire_status;
using xrtio::detail::holder_kind;

/// Three allocations of 64 bytes: small enough that random ranges overlap often.
constexpr unsigned allocations = 3;
constexpr std::size_t allocation_bytes = 64;
/// Runs that may wait for their leases at the same time.
constexpr unsigned owners = 4;
/// Requests in one acquisition (a run with up to four buffer arguments).
constexpr unsigned max_requests = 4;
/// Operations per input, and leases held at once (beyond it, acquisitions
/// turn into releases): bound the time one input takes.
constexpr unsigned max_steps = 256;
constexpr std::size_t max_leases = 32;

struct range_req {
  unsigned alloc;
  std::size_t begin, end;
  access_mode mode;
};

struct model_lease {
  unsigned alloc;
  std::size_t begin, end;
  access_mode mode;
  holder_kind holder;
  std::uint64_t id;
  unsigned grant;  // which successful acquisition made it
};

struct model_waiter {
  unsigned alloc;
  std::uint64_t seq;
  unsigned owner;
  std::size_t begin, end;
  access_mode mode;
};

struct owner_listener final : access_listener {
  bool told = false;
  void access_released() noexcept override { told = true; }
};

struct owner_state {
  owner_listener listener;
  bool queued = false;  // has entries in the model's queues
  std::uint64_t seq = 0;
  std::vector<range_req> reqs;
};

bool overlaps(std::size_t b1, std::size_t e1, std::size_t b2, std::size_t e2) { return b1 < e2 && b2 < e1; }
bool conflicting(access_mode a, access_mode b) { return a == access_mode::write || b == access_mode::write; }

const char* status_name(acquire_status s) {
  switch (s) {
    case acquire_status::acquired: return "acquired";
    case acquire_status::conflict: return "conflict";
    case acquire_status::retained: return "retained";
    case acquire_status::queued: return "queued";
  }
  return "?";
}

class harness {
 public:
  explicit harness(xfuzz::fuzz_input& in) : in_(in) {}

  void run() {
    for (unsigned step = 0; step < max_steps && !in_.empty(); ++step) {
      for (auto& o : owners_) o.listener.told = false;
      unsigned op = in_.byte() % 7;
      if (op <= 2 && leases_.size() >= max_leases) op = 4;
      switch (op) {
        case 0: acquire_newcomer(); break;
        case 1: acquire_waiter(); break;
        case 2: retry(); break;
        case 3: withdraw(); break;
        case 4: release(); break;
        case 5: release_stale(); break;
        case 6: retain(); break;
      }
      check_counts();
      check_no_lost_wakeup();
      check_no_conflicting_leases();
    }
    // Leave nothing behind: withdraw every waiter, release every lease.
    for (unsigned o = 0; o < owners; ++o)
      if (owners_[o].queued) withdraw_owner(o);
    for (auto& l : leases_) trackers_[l.alloc].release(l.id);
    leases_.clear();
    check_counts();
  }

 private:
  xfuzz::fuzz_input& in_;
  // With their extent, so that whole-allocation reads by runs take the
  // lock-free shared path and mix with the locked one.
  static_assert(allocations == 3);
  std::array<access_tracker, allocations> trackers_{access_tracker(allocation_bytes), access_tracker(allocation_bytes),
                                                    access_tracker(allocation_bytes)};
  std::array<owner_state, owners> owners_;
  std::vector<model_lease> leases_;
  std::vector<model_waiter> queue_;  // every allocation's, each in ascending seq
  std::vector<std::uint64_t> released_ids_;
  unsigned grants_ = 0;
  // Which owners were told since their last attempt (reset only by an attempt).
  std::array<bool, owners> told_since_try_{};

  std::vector<range_req> random_requests() {
    std::vector<range_req> reqs(1 + in_.byte() % max_requests);
    for (auto& r : reqs) {
      r.alloc = in_.byte() % allocations;
      if (in_.byte() % 4 == 0) {  // the whole allocation: reads by runs take the shared path
        r.begin = 0;
        r.end = allocation_bytes;
      } else {
        r.begin = in_.in_range(0, allocation_bytes - 1);
        r.end = r.begin + 1 + in_.in_range(0, allocation_bytes - 1 - r.begin);  // never empty (buffer::sub refuses size 0)
      }
      r.mode = in_.flag() ? access_mode::write : access_mode::read;
    }
    return reqs;
  }

  // The model's verdict: acquired, or the first blocked request's status
  // (and, for a held blocker, the set of statuses its holders allow).
  struct verdict {
    bool acquired = true;
    bool by_retained = false, by_other = false;  // held blockers of the deciding request
    bool by_waiter = false;
  };
  verdict judge(const std::vector<range_req>& reqs, const owner_state* w) const {
    for (auto& r : reqs) {
      verdict v;
      for (auto& l : leases_)
        if (l.alloc == r.alloc && overlaps(r.begin, r.end, l.begin, l.end) && conflicting(r.mode, l.mode))
          (l.holder == holder_kind::retained ? v.by_retained : v.by_other) = true;
      if (v.by_retained || v.by_other) {
        v.acquired = false;
        return v;
      }
      for (auto& q : queue_) {
        if (q.alloc != r.alloc) continue;
        if (w && (&owners_[q.owner] == w || q.seq >= w->seq)) continue;
        if (overlaps(r.begin, r.end, q.begin, q.end) && conflicting(r.mode, q.mode)) {
          v.acquired = false;
          v.by_waiter = true;
          return v;
        }
      }
    }
    return {};
  }

  static std::string describe(const std::vector<range_req>& reqs) {
    std::string s;
    for (auto& r : reqs)
      s += " [" + std::to_string(r.alloc) + ":" + std::to_string(r.begin) + "," + std::to_string(r.end) +
           (r.mode == access_mode::write ? " w]" : " r]");
    return s;
  }

  // Calls the tracker, checks its answer against the model's and applies it
  // to the model. `w`: the waiter, or null for a newcomer without one.
  acquire_status attempt(const std::vector<range_req>& reqs, holder_kind holder, owner_state* w) {
    const verdict v = judge(reqs, w);
    std::vector<access_request> real(reqs.size());
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      real[i].tracker = &trackers_[reqs[i].alloc];
      real[i].begin = reqs[i].begin;
      real[i].end = reqs[i].end;
      real[i].mode = reqs[i].mode;
    }
    access_waiter waiter;
    if (w) waiter = {w, w->seq, &w->listener};
    std::string why;
    const acquire_status st = access_tracker::acquire(real, holder, &why, w ? &waiter : nullptr);
    const std::string ctx = std::string("acquire") + describe(reqs) + (w ? " (waiter)" : "") + ": tracker says " +
                            status_name(st);
    if (v.acquired) {
      XFUZZ_CHECK(st == acquire_status::acquired, ctx + ", the model acquired");
      for (std::size_t i = 0; i < reqs.size(); ++i) {
        XFUZZ_CHECK(real[i].id != 0, ctx + ": lease id 0");
        // Shared reads (whole allocation, by a run, no write held or queued)
        // all carry shared_read_id; every other lease its own id.
        const bool shared = holder == holder_kind::run && reqs[i].mode == access_mode::read && reqs[i].begin == 0 &&
                            reqs[i].end == allocation_bytes;
        if (real[i].id == access_tracker::shared_read_id)
          XFUZZ_CHECK(shared, ctx + ": a lease other than a run's whole-allocation read took the shared path");
        else
          for (auto& l : leases_)
            XFUZZ_CHECK(!(l.alloc == reqs[i].alloc && l.id == real[i].id), ctx + ": id already held");
        leases_.push_back({reqs[i].alloc, reqs[i].begin, reqs[i].end, reqs[i].mode, holder, real[i].id, grants_});
      }
      ++grants_;
      if (w) remove_waiter(*w, reqs);
      return st;
    }
    XFUZZ_CHECK(st != acquire_status::acquired, ctx + ", the model found a conflict");
    XFUZZ_CHECK(why.find("conflicts with range") != std::string::npos, ctx + ": no description of the conflict: " + why);
    if (st == acquire_status::retained) {
      XFUZZ_CHECK(v.by_retained, ctx + ": no retained lease blocks the deciding request");
      return st;
    }
    XFUZZ_CHECK(v.by_other || v.by_waiter, ctx + ": only a retained lease blocks the deciding request");
    if (!w) {
      XFUZZ_CHECK(st == acquire_status::conflict, ctx + ": a newcomer without a waiter is refused, not queued");
      return st;
    }
    XFUZZ_CHECK(st == acquire_status::queued, ctx + ": a waiter that conflicts is queued");
    for (auto& r : reqs) {
      const unsigned o = static_cast<unsigned>(w - owners_.data());
      bool present = std::any_of(queue_.begin(), queue_.end(), [&](const model_waiter& q) {
        return q.owner == o && q.alloc == r.alloc && q.begin == r.begin && q.end == r.end && q.mode == r.mode;
      });
      if (!present) queue_.push_back({r.alloc, w->seq, o, r.begin, r.end, r.mode});
    }
    std::stable_sort(queue_.begin(), queue_.end(), [](auto& a, auto& b) { return a.seq < b.seq; });
    w->queued = true;
    return st;
  }

  // Success takes the waiter out of the trackers its requests touch.
  void remove_waiter(owner_state& w, const std::vector<range_req>& reqs) {
    const unsigned o = static_cast<unsigned>(&w - owners_.data());
    std::erase_if(queue_, [&](const model_waiter& q) {
      return q.owner == o &&
             std::any_of(reqs.begin(), reqs.end(), [&](const range_req& r) { return r.alloc == q.alloc; });
    });
    w.queued = std::any_of(queue_.begin(), queue_.end(), [&](const model_waiter& q) { return q.owner == o; });
  }

  void acquire_newcomer() {
    auto reqs = random_requests();
    attempt(reqs, in_.flag() ? holder_kind::host : holder_kind::run, nullptr);
  }

  void acquire_waiter() {
    unsigned o = in_.byte() % owners;
    auto& w = owners_[o];
    if (w.queued) return;
    w.reqs = random_requests();
    w.seq = access_tracker::next_wait_seq();
    told_since_try_[o] = false;
    attempt(w.reqs, holder_kind::run, &w);
  }

  // The reactor's retry: same requests, same waiter; a retained range ends
  // the run, which withdraws (reactor::retry_waiting).
  void retry() {
    unsigned o = in_.byte() % owners;
    auto& w = owners_[o];
    if (!w.queued) return;
    told_since_try_[o] = false;
    if (attempt(w.reqs, holder_kind::run, &w) == acquire_status::retained) withdraw_owner(o);
  }

  void withdraw() {
    unsigned o = in_.byte() % owners;
    if (owners_[o].queued) withdraw_owner(o);
  }

  void withdraw_owner(unsigned o) {
    auto& w = owners_[o];
    std::vector<access_request> real(w.reqs.size());
    for (std::size_t i = 0; i < w.reqs.size(); ++i) real[i].tracker = &trackers_[w.reqs[i].alloc];
    access_tracker::withdraw(real, &w);
    std::erase_if(queue_, [&](const model_waiter& q) { return q.owner == o; });
    w.queued = false;
    note_told();
  }

  void release() {
    if (leases_.empty()) return;
    auto i = in_.in_range(0, leases_.size() - 1);
    auto l = leases_[i];
    leases_.erase(leases_.begin() + static_cast<std::ptrdiff_t>(i));
    trackers_[l.alloc].release(l.id);
    // A shared read's id names no entry (a count): releasing it again would
    // release another run's read, which the contract leaves to the caller.
    if (l.id != access_tracker::shared_read_id) released_ids_.push_back(l.id);
    note_told();
  }

  // A stale id (released before, or made up) releases nothing.
  void release_stale() {
    std::uint64_t id = (!released_ids_.empty() && in_.flag())
                           ? released_ids_[in_.in_range(0, released_ids_.size() - 1)]
                           : in_.raw(8);
    if (id == access_tracker::shared_read_id) return;  // see release()
    unsigned a = in_.byte() % allocations;
    for (auto& l : leases_)
      if (l.alloc == a && l.id == id) return;  // made up, but live: not stale
    trackers_[a].release(id);
    note_told();
  }

  // A refused abort: the run's leases are kept for good (run_core::retain).
  void retain() {
    if (leases_.empty()) return;
    auto& l = leases_[in_.in_range(0, leases_.size() - 1)];
    l.id = trackers_[l.alloc].mark_retained(l.id);
    l.holder = holder_kind::retained;
    note_told();
  }

  void note_told() {
    for (unsigned o = 0; o < owners; ++o)
      if (owners_[o].listener.told) told_since_try_[o] = true;
  }

  void check_counts() const {
    for (unsigned a = 0; a < allocations; ++a) {
      auto held = std::count_if(leases_.begin(), leases_.end(), [&](auto& l) { return l.alloc == a; });
      auto waiting = std::count_if(queue_.begin(), queue_.end(), [&](auto& q) { return q.alloc == a; });
      XFUZZ_CHECK(trackers_[a].active_count() == static_cast<std::size_t>(held),
            "allocation " + std::to_string(a) + ": tracker holds " + std::to_string(trackers_[a].active_count()) +
                " leases, the model " + std::to_string(held));
      XFUZZ_CHECK(trackers_[a].waiting_count() == static_cast<std::size_t>(waiting),
            "allocation " + std::to_string(a) + ": tracker has " + std::to_string(trackers_[a].waiting_count()) +
                " waiters, the model " + std::to_string(waiting));
    }
  }

  // A queued run is retried only when told: one whose retry would now end
  // and was not told since its last try would wait forever.
  void check_no_lost_wakeup() const {
    for (unsigned o = 0; o < owners; ++o) {
      auto& w = owners_[o];
      if (!w.queued) continue;
      const verdict v = judge(w.reqs, &w);
      const bool would_end = v.acquired || (v.by_retained && !v.by_other);
      XFUZZ_CHECK(!would_end || told_since_try_[o],
            "owner " + std::to_string(o) + " (" + describe(w.reqs) + ") could now " +
                (v.acquired ? "acquire" : "fail with range_retained") + " but was not told since its last try");
    }
  }

  // The safety property itself, whatever led here: two held leases that
  // conflict were granted by the same acquisition.
  void check_no_conflicting_leases() const {
    for (std::size_t i = 0; i < leases_.size(); ++i)
      for (std::size_t j = i + 1; j < leases_.size(); ++j) {
        auto& a = leases_[i];
        auto& b = leases_[j];
        XFUZZ_CHECK(a.grant == b.grant || a.alloc != b.alloc || !overlaps(a.begin, a.end, b.begin, b.end) ||
                  !conflicting(a.mode, b.mode),
              "conflicting leases held: [" + std::to_string(a.begin) + "," + std::to_string(a.end) + ") and [" +
                  std::to_string(b.begin) + "," + std::to_string(b.end) + ") of allocation " + std::to_string(a.alloc));
      }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  xfuzz::fuzz_input in({data, size});
  harness(in).run();
  return 0;
}
