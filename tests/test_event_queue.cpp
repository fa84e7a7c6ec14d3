// The pending-event set (sim/event_queue.h) against a reference: std::priority_queue over the
// same (time, key) order, on random interleavings of pushes and pops at sizes that exercise the
// plain heap, the refill of the near tier from the far tier, and pushes on both sides of the
// boundary. Plus the simulator-level order of equal times and priorities.
#include <gtest/gtest.h>

#include <cstdint>
#include <queue>
#include <random>
#include <tuple>
#include <vector>

#include "sim/event_queue.h"
#include "sim/simulator.h"

namespace {

using mobisim::sim::EventEntry;
using mobisim::sim::EventQueue;
using mobisim::sim::QuaternaryHeap;

struct Later {
  bool operator()(const EventEntry& a, const EventEntry& b) const {
    return std::tie(a.time, a.key) > std::tie(b.time, b.key);
  }
};
using Reference = std::priority_queue<EventEntry, std::vector<EventEntry>, Later>;

// Pushes `n_ops` operations (push with probability `push_share`, else pop) of entries whose time
// is `now` plus a random delay in [0, max_delay] (many equal times when max_delay is small; keys
// unique, as the simulator's are), checking every pop and the top against the reference.
template <class Queue>
void check_against_reference(std::uint32_t seed, int n_ops, double push_share, std::int64_t max_delay,
                             int prefill) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> delay(0, max_delay);
  std::bernoulli_distribution is_push(push_share);
  Queue q;
  Reference ref;
  std::int64_t now = 0;
  std::uint64_t next_key = 0;
  auto push = [&] {
    // Keys: a random priority in the top bits, then a unique sequence number, as Simulator packs them.
    const std::uint64_t priority = rng() % 4;
    const EventEntry e{now + delay(rng), (priority << 62) | next_key++};
    q.push(e);
    ref.push(e);
  };
  for (int i = 0; i < prefill; ++i) push();
  for (int op = 0; op < n_ops; ++op) {
    if (ref.empty() || is_push(rng)) {
      push();
    } else {
      ASSERT_EQ(q.size(), ref.size());
      ASSERT_EQ(q.top().time, ref.top().time);
      ASSERT_EQ(q.top().key, ref.top().key);
      const EventEntry got = q.pop();
      const EventEntry want = ref.top();
      ref.pop();
      ASSERT_EQ(got.time, want.time) << "op " << op;
      ASSERT_EQ(got.key, want.key) << "op " << op;
      now = got.time;  // like the simulator: nothing is pushed before the last pop
    }
  }
  while (!ref.empty()) {
    const EventEntry got = q.pop();
    ASSERT_EQ(got.time, ref.top().time);
    ASSERT_EQ(got.key, ref.top().key);
    ref.pop();
  }
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0u);
}

TEST(EventQueue, HeapMatchesPriorityQueueOnRandomOperations) {
  for (std::uint32_t seed = 1; seed <= 5; ++seed)
    check_against_reference<QuaternaryHeap>(seed, 20'000, 0.5, 1'000, 0);
}

TEST(EventQueue, SmallQueueMatchesPriorityQueue) {
  for (std::uint32_t seed = 1; seed <= 5; ++seed) check_against_reference<EventQueue>(seed, 20'000, 0.5, 50, 0);
}

TEST(EventQueue, LargeQueueWithRefillsMatchesPriorityQueue) {
  // 40,000 pending: above the heap's spill size (32,768), so the far tier is used, pops refill the
  // heap from it many times, and pushes land on both sides of the boundary.
  check_against_reference<EventQueue>(7, 200'000, 0.5, 1'000'000, 40'000);
  // Equal times everywhere (delay 0..3): the order is decided by the keys alone.
  check_against_reference<EventQueue>(8, 200'000, 0.5, 3, 40'000);
  // Growing (spilling again and again) then draining (refills, then back to a plain heap).
  check_against_reference<EventQueue>(9, 200'000, 0.7, 10'000, 0);
  check_against_reference<EventQueue>(10, 200'000, 0.3, 10'000, 70'000);
}

TEST(EventQueue, RunnerUpIsTheEntryAfterTheTop) {
  EventQueue q;
  EXPECT_EQ(q.runner_up(), nullptr);
  q.push({5, 1});
  EXPECT_EQ(q.runner_up(), nullptr);
  q.push({3, 2});
  q.push({3, 1});
  q.push({9, 0});
  ASSERT_NE(q.runner_up(), nullptr);
  EXPECT_EQ(q.top().key, 1u);
  EXPECT_EQ(q.top().time, 3);
  EXPECT_EQ(q.runner_up()->time, 3);
  EXPECT_EQ(q.runner_up()->key, 2u);
}

mobisim::sim::Task<void> record_after(mobisim::sim::Simulator& sim, int id, std::vector<int>& order) {
  co_await sim.timeout(10);
  order.push_back(id);
}

// 40,000 processes waking at the same time: the simulator's queue holds most of them in its far
// tier and must still resume equal times in priority, then insertion (start) order.
TEST(EventQueue, SimulatorKeepsInsertionOrderAtEqualTimesInALargeQueue) {
  mobisim::sim::Simulator sim;
  std::vector<int> order;
  std::vector<int> calls;
  const int n = 40'000;
  for (int i = 0; i < n; ++i) sim.start(record_after(sim, i, order));
  // Calls at t = 10 with urgent and late priority, scheduled after the processes started.
  sim.schedule_call(10, [&] { calls.push_back(static_cast<int>(order.size())); }, mobisim::sim::kPriorityUrgent);
  sim.schedule_call(10, [&] { calls.push_back(static_cast<int>(order.size())); }, mobisim::sim::kPriorityLate);
  sim.run();
  ASSERT_EQ(order.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) ASSERT_EQ(order[i], i);
  // The urgent call runs before any process resumes at t = 10, the late one after all of them.
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], 0);
  EXPECT_EQ(calls[1], n);
  EXPECT_EQ(sim.now(), 10);
}

}  // namespace
