// The reactor's intake queue (src/reactor/intake_queue.hpp; docs/DESIGN.md,
// "Intake and wake-ups"): a ring of pointers with a linked stack behind it
// when full. What the reactor relies on: nothing lost or taken twice, and
// each pushing thread's runs taken in the order it pushed them.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>
#include <vector>

#include "../src/reactor/intake_queue.hpp"
#include "../src/reactor/reactor.hpp"
#include "xrtio/runtime.hpp"

namespace xrtio::detail {
struct reactor_test_access {
  static auto& incoming(reactor& r) noexcept { return r.incoming_; }
};
}  // namespace xrtio::detail

namespace {
struct node {
  node* next = nullptr;
  std::uint64_t pos = 0;
  int producer = 0;
  int seq = 0;
};
using small_queue = xrtio::detail::intake_queue<node, &node::next, &node::pos, 64>;

std::vector<int> take_seqs(small_queue& q) {
  std::vector<int> out;
  q.take_all([](node*) noexcept {}, [&](node* n) noexcept { out.push_back(n->seq); });
  return out;
}

std::vector<int> iota(int from, int to) {
  std::vector<int> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return v;
}
}  // namespace

TEST_CASE("intake queue: empty until a push, in the ring or in the stack behind it, and empty again once taken") {
  small_queue q;
  std::vector<node> nodes(100);
  CHECK(q.empty());
  nodes[0].seq = 0;
  q.push(&nodes[0]);
  CHECK_FALSE(q.empty());
  CHECK(take_seqs(q) == std::vector<int>{0});
  CHECK(q.empty());
  // Fill the ring (64), then one more, which goes to the stack.
  for (int i = 0; i < 65; ++i) {
    nodes[i].seq = i;
    q.push(&nodes[i]);
  }
  CHECK_FALSE(q.empty());
  CHECK(take_seqs(q) == iota(0, 65));
  CHECK(q.empty());
  CHECK(take_seqs(q).empty());
}

TEST_CASE("intake queue: more than the ring holds comes out whole and in push order, many times over") {
  small_queue q;
  std::vector<node> nodes(1000);
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 1000; ++i) {
      nodes[i].seq = i;
      nodes[i].next = nullptr;
      q.push(&nodes[i]);
    }
    CHECK(take_seqs(q) == iota(0, 1000));
    CHECK(q.empty());
  }
}

// The order rule: a run pushed to the stack (the ring full) is taken just
// before the ring slot at its place, so runs its thread pushes to the ring
// afterwards, once there is room again, come after it. Here the room
// appears while the consumer is taking (the push comes from take()):
// taking the whole ring before the stack would give the new runs first.
TEST_CASE("intake queue: a run pushed while the ring drains comes out after the older runs in the stack") {
  small_queue q;
  std::vector<node> nodes(80);
  for (int i = 0; i < 80; ++i) nodes[i].seq = i;
  for (int i = 0; i < 70; ++i) q.push(&nodes[i]);  // 64 in the ring, 6 in the stack
  std::vector<int> out;
  int pushed = 70;
  q.take_all([](node*) noexcept {},
             [&](node* n) noexcept {
               out.push_back(n->seq);
               if (pushed < 80) q.push(&nodes[pushed++]);  // room in the ring after the first batch
             });
  // What take_all did not reach in this call comes with the next.
  auto rest = take_seqs(q);
  out.insert(out.end(), rest.begin(), rest.end());
  CHECK(out == iota(0, 80));
}

// A submitter preempted between claiming its slot and publishing it: the
// consumer must stop there (what follows is someone's later run), empty()
// reads true (the claimer wakes the loop after publishing), settled() false
// (the loop's exit during shutdown waits for it).
TEST_CASE("intake queue: a slot claimed and not yet published holds back the runs after it until it is published") {
  small_queue q;
  std::vector<node> nodes(3);
  for (int i = 0; i < 3; ++i) nodes[i].seq = i;
  auto slot = q.claim(&nodes[0]);
  REQUIRE(slot != small_queue::no_place);
  q.push(&nodes[1]);
  q.push(&nodes[2]);
  CHECK(take_seqs(q).empty());
  CHECK(q.empty());
  CHECK_FALSE(q.settled());
  q.publish(slot, &nodes[0]);
  CHECK_FALSE(q.empty());
  CHECK(take_seqs(q) == iota(0, 3));
  CHECK(q.empty());
  CHECK(q.settled());
}

// The runs that went to the stack while the ring was full wait for their
// place: here behind a claimed slot at the ring's head. Taken as soon as the
// stack is read, they would come out ahead of the 64 runs before them.
TEST_CASE("intake queue: runs in the stack wait for the claimed slot before their place") {
  small_queue q;
  std::vector<node> nodes(70);
  for (int i = 0; i < 70; ++i) nodes[i].seq = i;
  auto slot = q.claim(&nodes[0]);
  for (int i = 1; i < 64; ++i) q.push(&nodes[i]);  // the ring is full
  for (int i = 64; i < 70; ++i) q.push(&nodes[i]);  // to the stack, places at 64
  CHECK(take_seqs(q).empty());                     // the stack is taken, its runs wait
  CHECK(q.empty());
  CHECK_FALSE(q.settled());
  q.publish(slot, &nodes[0]);
  CHECK(take_seqs(q) == iota(0, 70));
  CHECK(q.settled());
}

TEST_CASE("intake queue: take_all_fifo links everything in push order") {
  small_queue q;
  std::vector<node> nodes(100);
  for (int i = 0; i < 100; ++i) {
    nodes[i].seq = i;
    q.push(&nodes[i]);
  }
  std::vector<int> out;
  for (node* n = q.take_all_fifo(); n; n = n->next) out.push_back(n->seq);
  CHECK(out == iota(0, 100));
  CHECK(q.take_all_fifo() == nullptr);
}

// Under TSan in CI: the ring's publication and the consumer's hand-back.
TEST_CASE("intake queue: four threads pushing while one takes: nothing lost or doubled, each thread's order kept") {
  constexpr int producers = 4, per = 50000;
  small_queue q;
  std::vector<std::vector<node>> nodes(producers, std::vector<node>(per));
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      started.fetch_add(1);
      while (started.load() < producers) {
      }
      for (int i = 0; i < per; ++i) {
        nodes[p][i].producer = p;
        nodes[p][i].seq = i;
        q.push(&nodes[p][i]);
      }
    });
  }
  std::vector<int> next(producers, 0);
  int taken = 0, out_of_order = 0, passes = 0;
  while (taken < producers * per) {
    ++passes;
    q.take_all([](node* n) noexcept { __builtin_prefetch(n); },
               [&](node* n) noexcept {
                 if (n->seq != next[n->producer]) ++out_of_order;
                 next[n->producer] = n->seq + 1;
                 ++taken;
               });
  }
  for (auto& t : threads) t.join();
  CHECK(out_of_order == 0);
  CHECK(taken == producers * per);
  for (int p = 0; p < producers; ++p) CHECK(next[p] == per);
  CHECK(q.empty());
  MESSAGE(passes << " passes of the consumer");
}

TEST_CASE("intake queue: the reactor's shutdown ends after its grace period although a slot stays claimed") {
  // A submitter preempted between claiming its slot and publishing it, for
  // longer than the grace period. Within the grace period the loop waits for
  // it (settled()); past it, the loop must exit (empty()): a late run is
  // then the late submitter's to complete (complete_orphans), and the loop
  // must not spin until that submitter runs again.
  using namespace std::chrono_literals;
  xrtio::runtime_options o;
  o.shutdown_grace = 30ms;
  xrtio::runtime rt(o);
  auto& rx = *xrtio::detail::access::reactor(rt);
  auto& incoming = xrtio::detail::reactor_test_access::incoming(rx);
  REQUIRE(incoming.claim(nullptr) != incoming.no_place);  // the ring is empty: a slot, never published
  auto t0 = std::chrono::steady_clock::now();
  auto stopped = std::async(std::launch::async, [&] { rx.stop(); });
  if (stopped.wait_for(10s) != std::future_status::ready) {
    // The loop is spinning for good; it cannot be joined. Report and end the
    // process here rather than hang in the runtime's destructor.
    FAIL_CHECK("the reactor's shutdown did not end within 10 s with a slot claimed and unpublished");
    std::fputs("intake queue: shutdown hung (see the failed check above)\n", stderr);
    std::fflush(nullptr);
    std::_Exit(EXIT_FAILURE);
  }
  CHECK(std::chrono::steady_clock::now() - t0 >= 30ms);  // it did wait out the grace period
}
