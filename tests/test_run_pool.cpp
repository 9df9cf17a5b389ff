// The backends' pool of finished native runs (src/backends/run_pool.hpp): a
// unit test of its bound and of what crosses threads (the reactor gives,
// submitters take).
#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "../src/backends/run_pool.hpp"

namespace {
std::atomic<int> live{0};
struct fake_run {
  fake_run() { live.fetch_add(1); }
  ~fake_run() { live.fetch_sub(1); }
  fake_run* pool_next = nullptr;
  int uses = 0;
};
using pool = xrtio::detail::run_pool<fake_run>;
}  // namespace

TEST_CASE("run pool: takes back what was given, keeps at most its capacity and frees the rest") {
  live = 0;
  {
    pool p(3);
    CHECK(p.take() == nullptr);
    std::vector<fake_run*> runs;
    for (int i = 0; i < 5; ++i) runs.push_back(new fake_run);
    for (auto* r : runs) p.give(r);
    CHECK(p.idle() == 3);
    CHECK(live == 3);  // two deleted at once, over the bound
    std::set<fake_run*> back;
    while (auto* r = p.take()) back.insert(r);
    CHECK(back.size() == 3);
    CHECK(p.idle() == 0);
    for (auto* r : back) {
      CHECK(r->pool_next == nullptr);
      p.give(r);
    }
    CHECK(p.idle() == 3);
  }
  CHECK(live == 0);  // the idle runs are deleted with the pool
}

TEST_CASE("run pool: one thread giving while another takes loses no run and hands none out twice") {
  live = 0;
  constexpr int total = 64, rounds = 20000;
  {
    pool p;
    std::vector<fake_run*> all;
    for (int i = 0; i < total; ++i) all.push_back(new fake_run);
    // The taker owns runs between take and give; it hands them to the giver
    // (the "reactor") through a queue of its own.
    std::atomic<fake_run*> slot[total];
    for (auto& s : slot) s = nullptr;
    for (int i = 0; i < total; ++i) p.give(all[i]);
    std::atomic<bool> done{false};
    std::atomic<int> taken{0};
    std::thread giver([&] {
      while (!done.load() || [&] { for (auto& s : slot) if (s.load()) return true; return false; }()) {
        for (auto& s : slot)
          if (auto* r = s.exchange(nullptr)) p.give(r);
      }
    });
    int i = 0;
    while (taken.load() < rounds) {
      auto* r = p.take();
      if (!r) continue;
      CHECK(++r->uses > 0);
      taken.fetch_add(1);
      // Into the first empty slot: a run handed out twice would overwrite
      // one still there or be given twice, and the counts below would differ.
      for (;; i = (i + 1) % total) {
        fake_run* expected = nullptr;
        if (slot[i].compare_exchange_strong(expected, r)) break;
      }
    }
    done = true;
    giver.join();
    int uses = 0;
    std::set<fake_run*> seen;
    std::vector<fake_run*> held;
    while (auto* r = p.take()) {
      CHECK(seen.insert(r).second);
      uses += r->uses;
      held.push_back(r);
    }
    CHECK(held.size() == std::size_t(total));
    for (auto* r : held) p.give(r);
    CHECK(uses == rounds);
    CHECK(live == total);
  }
  CHECK(live == 0);
}
