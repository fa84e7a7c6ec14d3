// The discrete-event core: ordering, cancellation, processes, resources, stores, interrupts.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "sim/digest.h"
#include "sim/event.h"
#include "sim/resource.h"
#include "sim/simulator.h"

namespace mobisim::sim {
namespace {

TEST(SimCore, EventsOrderedByTimeThenPriorityThenInsertion) {
  Simulator sim;
  std::vector<std::string> order;
  sim.schedule_call(20, [&] { order.push_back("t20"); });
  sim.schedule_call(10, [&] { order.push_back("t10-late"); }, kPriorityLate);
  sim.schedule_call(10, [&] { order.push_back("t10-normal-a"); });
  sim.schedule_call(10, [&] { order.push_back("t10-urgent"); }, kPriorityUrgent);
  sim.schedule_call(10, [&] { order.push_back("t10-normal-b"); });
  sim.run();
  EXPECT_EQ(order, (std::vector<std::string>{"t10-urgent", "t10-normal-a", "t10-normal-b", "t10-late", "t20"}));
  EXPECT_EQ(sim.now(), 20);
  EXPECT_EQ(sim.events_processed(), 5u);
}

TEST(SimCore, CancelledEventsAreSkipped) {
  Simulator sim;
  int fired = 0;
  EventId a = sim.schedule_call(5, [&] { fired += 1; });
  sim.schedule_call(6, [&] { fired += 10; });
  sim.cancel(a);
  sim.run();
  EXPECT_EQ(fired, 10);
  EXPECT_EQ(sim.events_processed(), 1u);
}

Task<int> add_later(Simulator& sim, int a, int b) {
  co_await sim.timeout(7);
  co_return a + b;
}

Task<void> parent(Simulator& sim, std::vector<std::string>& log, int& result) {
  log.push_back("parent start at " + std::to_string(sim.now()));
  result = co_await add_later(sim, 2, 3);
  log.push_back("parent got result at " + std::to_string(sim.now()));
}

TEST(SimCore, TasksAwaitOtherTasksAndReturnValues) {
  Simulator sim;
  std::vector<std::string> log;
  int result = 0;
  sim.start(parent(sim, log, result));
  sim.run();
  EXPECT_EQ(result, 5);
  EXPECT_EQ(log, (std::vector<std::string>{"parent start at 0", "parent got result at 7"}));
}

Task<void> tagger(Simulator& sim, std::vector<int>& log, int tag) {
  log.push_back(tag);
  co_await sim.timeout(0);
  log.push_back(tag + 100);
}

TEST(SimCore, ProcessesStartInCreationOrder) {
  Simulator sim;
  std::vector<int> log;
  for (int i = 0; i < 4; ++i) sim.start(tagger(sim, log, i));
  sim.run();
  EXPECT_EQ(log, (std::vector<int>{0, 1, 2, 3, 100, 101, 102, 103}));
}

Task<void> failing(Simulator& sim) {
  co_await sim.timeout(3);
  throw std::runtime_error("boom");
}

TEST(SimCore, ProcessExceptionIsRethrownFromRun) {
  Simulator sim;
  sim.start(failing(sim), "faulty");
  try {
    sim.run();
    FAIL() << "run() should rethrow";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("faulty"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos);
  }
}

Task<void> use_server(Simulator& sim, Resource& r, Time hold, std::vector<std::pair<int, Time>>& log, int id,
                      int priority = 0) {
  auto lease = co_await r.acquire(priority);
  log.emplace_back(id, sim.now());
  co_await sim.timeout(hold);
}

TEST(SimCore, ResourceServesFifoWithCapacity) {
  Simulator sim;
  Resource r(sim, "server", 2);
  std::vector<std::pair<int, Time>> log;
  for (int i = 0; i < 5; ++i) sim.start(use_server(sim, r, 10, log, i));
  sim.run();
  // Two at a time: starts at 0,0,10,10,20.
  EXPECT_EQ(log, (std::vector<std::pair<int, Time>>{{0, 0}, {1, 0}, {2, 10}, {3, 10}, {4, 20}}));
  EXPECT_DOUBLE_EQ(r.busy_slot_seconds(), 50e-9);
}

Task<void> delayed_use(Simulator& sim, Resource& r, Time delay, Time hold, std::vector<std::pair<int, Time>>& log,
                       int id, int priority) {
  co_await sim.timeout(delay);
  auto lease = co_await r.acquire(priority);
  log.emplace_back(id, sim.now());
  co_await sim.timeout(hold);
}

TEST(SimCore, PriorityQueueServesLowerValueFirst) {
  Simulator sim;
  Resource r(sim, "cpu", 1);
  std::vector<std::pair<int, Time>> log;
  sim.start(delayed_use(sim, r, 0, 10, log, 0, 5));
  sim.start(delayed_use(sim, r, 1, 10, log, 1, 5));  // background, queued first
  sim.start(delayed_use(sim, r, 2, 10, log, 2, 0));  // user query, queued later but more urgent
  sim.run();
  EXPECT_EQ(log, (std::vector<std::pair<int, Time>>{{0, 0}, {2, 10}, {1, 20}}));
}

Task<void> background(Simulator& sim, Resource& r, std::vector<std::string>& log) {
  auto lease = co_await r.acquire(1, false, /*preemptible=*/true);
  try {
    co_await sim.timeout(100);
    log.push_back("background finished");
  } catch (const Interrupt& e) {
    log.push_back("background preempted at " + std::to_string(sim.now()));
  }
}

Task<void> urgent(Simulator& sim, Resource& r, std::vector<std::string>& log) {
  co_await sim.timeout(30);
  auto lease = co_await r.acquire(0, /*preempt=*/true);
  log.push_back("user started at " + std::to_string(sim.now()));
  co_await sim.timeout(10);
}

TEST(SimCore, PreemptionInterruptsBackgroundWork) {
  Simulator sim;
  Resource r(sim, "cpu", 1);
  std::vector<std::string> log;
  sim.start(background(sim, r, log));
  sim.start(urgent(sim, r, log));
  sim.run();
  EXPECT_EQ(log, (std::vector<std::string>{"user started at 30", "background preempted at 30"}));
  EXPECT_EQ(r.preemptions(), 1u);
  EXPECT_EQ(r.in_use(), 0);
}

Task<void> consumer(Simulator& sim, Store<int>& s, std::vector<std::pair<int, Time>>& got) {
  for (int i = 0; i < 3; ++i) {
    int v = co_await s.get();
    got.emplace_back(v, sim.now());
  }
}

Task<void> producer(Simulator& sim, Store<int>& s) {
  s.put(1);
  co_await sim.timeout(5);
  s.put(2);
  s.put(3);
}

TEST(SimCore, StoreDeliversInFifoOrderAndBlocksWhenEmpty) {
  Simulator sim;
  Store<int> s(sim);
  std::vector<std::pair<int, Time>> got;
  sim.start(consumer(sim, s, got));
  sim.start(producer(sim, s));
  sim.run();
  EXPECT_EQ(got, (std::vector<std::pair<int, Time>>{{1, 0}, {2, 5}, {3, 5}}));
}

Task<void> wait_any(Simulator& sim, std::vector<Event> evs, int& which, Time& when) {
  which = co_await any_of(sim, evs);
  when = sim.now();
}

Task<void> wait_all(Simulator& sim, std::vector<Event> evs, Time& when) {
  co_await all_of(sim, evs);
  when = sim.now();
}

TEST(SimCore, AnyOfAndAllOf) {
  Simulator sim;
  Event a = sim.timeout_event(30), b = sim.timeout_event(10), c = sim.timeout_event(20);
  int which = -1;
  Time any_t = -1, all_t = -1;
  sim.start(wait_any(sim, {a, b, c}, which, any_t));
  sim.start(wait_all(sim, {a, b, c}, all_t));
  sim.run();
  EXPECT_EQ(which, 1);
  EXPECT_EQ(any_t, 10);
  EXPECT_EQ(all_t, 30);
}

TEST(SimCore, RunUntilStopsAndKeepsLaterEvents) {
  Simulator sim;
  int fired = 0;
  sim.schedule_call(5, [&] { ++fired; });
  sim.schedule_call(50, [&] { ++fired; });
  sim.run_until(20);
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(sim.now(), 20);
  EXPECT_EQ(sim.pending_events(), 1u);
  sim.run();
  EXPECT_EQ(fired, 2);
}

Task<void> forever(Simulator& sim, Resource& r) {
  auto lease = co_await r.acquire();
  co_await sim.timeout(1000000);
}

TEST(SimCore, UnfinishedProcessesAreDestroyedCleanly) {
  // Run under ASan in CI: frames of unfinished processes (and their leases) must not leak or crash.
  Resource* leaked = nullptr;
  {
    Simulator sim;
    Resource r(sim, "r", 1);
    leaked = &r;
    sim.start(forever(sim, r));
    sim.run_until(10);
    EXPECT_EQ(r.in_use(), 1);
  }
  (void)leaked;
}

// The file digest as sim/digest.h specifies it, one byte at a time: four FNV-1a-64 lanes over the
// little-endian 8-byte words (word i into lane i mod 4), then byte-wise FNV-1a-64 over the lanes,
// the tail bytes and the byte count. Every way of feeding the bytes must give this value.
std::uint64_t reference_digest(const std::vector<unsigned char>& bytes) {
  constexpr std::uint64_t kPrime = 0x100000001b3ULL, kBasis = 0xcbf29ce484222325ULL;
  std::uint64_t lane[4] = {kBasis, kBasis + 1, kBasis + 2, kBasis + 3};
  const std::size_t words = bytes.size() / 8;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t w = 0;
    for (int b = 7; b >= 0; --b) w = (w << 8) | bytes[8 * i + static_cast<std::size_t>(b)];
    lane[i % 4] = (lane[i % 4] ^ w) * kPrime;
  }
  std::uint64_t h = kBasis;
  auto feed = [&](std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * kPrime;
  };
  for (std::uint64_t l : lane) feed(l, 8);
  for (std::size_t i = 8 * words; i < bytes.size(); ++i) feed(bytes[i], 1);
  feed(bytes.size(), 8);
  return h;
}

TEST(SimDigest, AnySplitOfTheBytesGivesTheSpecifiedDigest) {
  std::mt19937_64 rng(31);
  for (std::size_t size : {0u, 1u, 7u, 8u, 31u, 32u, 33u, 100u, 1000u, 4099u}) {
    std::vector<unsigned char> bytes(size);
    for (auto& b : bytes) b = static_cast<unsigned char>(rng());
    const std::uint64_t want = reference_digest(bytes);
    for (int trial = 0; trial < 20; ++trial) {
      mobisim::Digest d;
      std::size_t pos = 0;
      while (pos < size) {  // pieces of 0..40 bytes: partial words, whole rounds and odd lane phases
        const std::size_t n = std::min<std::size_t>(size - pos, rng() % 41);
        d.update(bytes.data() + pos, n);
        pos += n;
      }
      EXPECT_EQ(d.finish(), want) << "size " << size << " trial " << trial;
    }
  }
  std::vector<unsigned char> flipped(64, 0);
  const std::uint64_t zeros = reference_digest(flipped);
  flipped[37] ^= 4;
  EXPECT_NE(reference_digest(flipped), zeros);
}

}  // namespace
}  // namespace mobisim::sim
