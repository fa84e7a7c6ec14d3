// Background work gives a unit up at layer boundaries (Device::compute_layers), timed by hand: a
// background pass of L layers of t each on the CPU; a foreground request that arrives during layer
// k gets the unit exactly at the end of layer k, and the background pass ends later by exactly the
// foreground's busy time. Nothing better waiting, the pass is compute_for's one busy span.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "devices/device.h"
#include "experiments/simulation.h"
#include "sim/resource.h"
#include "sim/stats.h"

namespace mobisim {
namespace {

using sim::Time;
constexpr Time kMs = sim::kMillisecond;
constexpr int kBackground = 1, kForeground = 0;

// 4 layers of 10 ms: 40 ms alone. `dram_bytes` > 0 runs it as a flow on the DRAM bus (1 MB in
// 40 ms is far below the bus: alone on it, a flow takes its own time to the nanosecond).
devices::UnitCost four_layers_of_10ms(double dram_bytes) { return devices::UnitCost{0.040, 4e9, dram_bytes}; }
constexpr int kLayers = 4;

sim::Task<void> background_pass(devices::Device& d, devices::UnitCost c, int priority, Time& end) {
  co_await d.compute_layers("cpu", c, kLayers, "background prefill", priority);
  end = d.sim().now();
}

// A request that arrives at `arrival` and keeps the CPU busy for `busy`; `start` is when it got it.
struct Foreground {
  Time arrival = 0, busy = 0;
  Time start = -1, end = -1;
};
sim::Task<void> foreground_request(devices::Device& d, Foreground& f, int priority) {
  co_await d.sim().timeout(f.arrival);
  co_await d.busy("cpu", f.busy, "foreground", priority);
  f.end = d.sim().now();
  f.start = f.end - f.busy;
}

// The CPU's busy_s counter (devices/device.h: what compute_for adds for each piece of work).
double cpu_busy_counter_s(const sim::StatGroup& stats) {
  for (const auto& [path, value] : stats.flatten())
    if (path == "phone.device.cpu.busy_s") return value;
  ADD_FAILURE() << "no phone.device.cpu.busy_s";
  return -1;
}

struct Outcome {
  Time background_end = -1;
  double cpu_busy_s = 0, busy_counter_s = 0;
  std::uint64_t yield_requests = 0;
};
Outcome run_with(std::vector<Foreground>& fg, double dram_bytes, int background_priority = kBackground,
                 int foreground_priority = kForeground) {
  const devices::DeviceProfile phone = devices::load_device_profile("pixel7");
  sim::StatGroup stats("phone");
  experiments::SimulatedRun run(phone, stats.child("device"));
  Outcome out;
  run.start(background_pass(run.device(), four_layers_of_10ms(dram_bytes), background_priority, out.background_end),
            "background");
  for (Foreground& f : fg) run.start(foreground_request(run.device(), f, foreground_priority), "foreground");
  run.run();
  out.cpu_busy_s = run.device().busy_seconds("cpu");
  out.busy_counter_s = cpu_busy_counter_s(stats);
  out.yield_requests = run.device().unit_queue("cpu").yield_requests();
  return out;
}

class UnitYield : public ::testing::TestWithParam<double> {};  // the pass's DRAM bytes (0: a plain timeout)

TEST_P(UnitYield, AForegroundRequestArrivingMidLayerGetsTheUnitAtThatLayersEnd) {
  // Layer 3 runs 20-30 ms; the request arrives at 23 ms, runs 30-37 ms; the pass's last layer
  // then runs 37-47 ms: 40 ms of its own + 7 ms of the request's.
  std::vector<Foreground> fg{{23 * kMs, 7 * kMs}};
  const Outcome o = run_with(fg, GetParam());
  EXPECT_EQ(fg[0].start, 30 * kMs);
  EXPECT_EQ(fg[0].end, 37 * kMs);
  EXPECT_EQ(o.background_end, 47 * kMs);
  EXPECT_EQ(o.background_end - 40 * kMs, fg[0].busy);
  EXPECT_EQ(o.yield_requests, 1u);
  // The CPU was busy the whole 47 ms: 40 of the pass (in two holds), 7 of the request.
  EXPECT_NEAR(o.cpu_busy_s, 0.047, 1e-15);
  EXPECT_NEAR(o.busy_counter_s, 0.047, 1e-15);
}

TEST_P(UnitYield, ARequestArrivingAtALayerEndWaitsForNothing) {
  std::vector<Foreground> fg{{20 * kMs, 3 * kMs}};
  const Outcome o = run_with(fg, GetParam());
  EXPECT_EQ(fg[0].start, 20 * kMs);
  EXPECT_EQ(o.background_end, 43 * kMs);
}

TEST_P(UnitYield, RequestsWaitingTogetherAllGoBeforeThePassResumes) {
  // Both arrive during layer 3 (20-30 ms): 30-33 and 33-36 ms, the pass's layer 4 at 36-46 ms.
  std::vector<Foreground> fg{{21 * kMs, 3 * kMs}, {25 * kMs, 3 * kMs}};
  const Outcome o = run_with(fg, GetParam());
  EXPECT_EQ(fg[0].start, 30 * kMs);
  EXPECT_EQ(fg[1].start, 33 * kMs);
  EXPECT_EQ(o.background_end, 46 * kMs);
  EXPECT_EQ(o.yield_requests, 1u);  // one per hold of the unit
}

TEST_P(UnitYield, ThePassYieldsAgainAfterItResumesAndNotAfterItsLastLayer) {
  // Yields at 10 ms to a request arriving at 5 ms (10-12 ms); resumed, its layer 2 runs 12-22 ms
  // and a second request arriving at 15 ms gets the unit at 22 ms (22-24 ms); layers 3-4: 24-44 ms.
  // A third arriving during the last layer (at 40 ms) waits for the pass's end at 44 ms.
  std::vector<Foreground> fg{{5 * kMs, 2 * kMs}, {15 * kMs, 2 * kMs}, {40 * kMs, 1 * kMs}};
  const Outcome o = run_with(fg, GetParam());
  EXPECT_EQ(fg[0].start, 10 * kMs);
  EXPECT_EQ(fg[1].start, 22 * kMs);
  EXPECT_EQ(o.background_end, 44 * kMs);
  EXPECT_EQ(fg[2].start, 44 * kMs);
  EXPECT_EQ(o.yield_requests, 3u);
}

TEST_P(UnitYield, EqualPrioritiesDoNotYield) {
  // Two foreground apps' work: first come, first served, the pass whole.
  std::vector<Foreground> fg{{23 * kMs, 7 * kMs}};
  const Outcome o = run_with(fg, GetParam(), kForeground, kForeground);
  EXPECT_EQ(o.background_end, 40 * kMs);
  EXPECT_EQ(fg[0].start, 40 * kMs);
  EXPECT_EQ(o.yield_requests, 0u);
}

INSTANTIATE_TEST_SUITE_P(TimeoutAndDramFlow, UnitYield, ::testing::Values(0.0, 1e6));

// With nothing better waiting, a layered pass is compute_for: the same end and the same busy
// counter, bit for bit (the roofline seconds, not the rounded nanoseconds).
sim::Task<void> whole_pass(devices::Device& d, devices::UnitCost c, bool layered, Time& end) {
  if (layered)
    co_await d.compute_layers("cpu", c, 28, "pass", kBackground);
  else
    co_await d.compute_for("cpu", c, "pass", kBackground);
  end = d.sim().now();
}
TEST(UnitYieldAlone, ALayeredPassNobodyWaitsForIsComputeFor) {
  const devices::DeviceProfile phone = devices::load_device_profile("pixel7");
  const devices::UnitCost c{0.0123456789123, 3e10, 2.5e8};  // a DRAM flow of odd length
  Time ends[2] = {-1, -1};
  double busy[2] = {0, 0}, flops[2] = {0, 0};
  for (int layered = 0; layered < 2; ++layered) {
    sim::StatGroup stats("phone");
    experiments::SimulatedRun run(phone, stats.child("device"));
    run.start(whole_pass(run.device(), c, layered == 1, ends[layered]), "pass");
    run.run();
    busy[layered] = cpu_busy_counter_s(stats);
    flops[layered] = run.device().flops();
  }
  EXPECT_EQ(ends[0], ends[1]);
  EXPECT_EQ(ends[0], sim::from_seconds(c.seconds));
  EXPECT_EQ(busy[0], busy[1]);
  EXPECT_EQ(busy[1], c.seconds);
  EXPECT_EQ(flops[0], flops[1]);
}

}  // namespace
}  // namespace mobisim
