// The phone's shared resources, timed by hand: the DRAM capacity ledger (what does not fit is
// refused or stops the run, naming DRAM and the sizes) and the DRAM bus that CPU, GPU and NPU
// share (a bandwidth-bound pair takes the sum of its bytes over the shared bandwidth).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "devices/device.h"
#include "sim/error.h"
#include "sim/shared_bandwidth.h"
#include "sim/simulator.h"

namespace mobisim {
namespace {

using sim::Time;

sim::Task<void> flow_and_note(sim::SharedBandwidth& bus, double bytes, Time alone, Time& done, sim::Simulator& s) {
  co_await bus.flow(bytes, alone);
  done = s.now();
}

TEST(SharedBandwidth, ALoneFlowTakesExactlyItsOwnTime) {
  sim::Simulator s;
  sim::SharedBandwidth bus(s, "bus", 10e9);
  Time done = -1;
  // 1 GB wanted in 0.3 s (3.3 GB/s): the bus has room, so the flow is a plain 0.3 s.
  s.start(flow_and_note(bus, 1e9, 300'000'001, done, s));
  s.run();
  EXPECT_EQ(done, 300'000'001);
  EXPECT_EQ(bus.contention_delay_s(), 0.0);
}

TEST(SharedBandwidth, TwoBandwidthBoundFlowsTakeTheSumOfTheirBytesOverTheBus) {
  sim::Simulator s;
  sim::SharedBandwidth bus(s, "bus", 10e9);
  Time a = -1, b = -1;
  // Each wants the whole 10 GB/s: 1 GB alone in 0.1 s, 3 GB alone in 0.3 s. Shared, each gets
  // 5 GB/s until the first ends at 0.2 s (1 GB moved); the other then has 2 GB left at 10 GB/s:
  // it ends at 0.4 s = (1 + 3) GB / 10 GB/s.
  s.start(flow_and_note(bus, 1e9, 100'000'000, a, s));
  s.start(flow_and_note(bus, 3e9, 300'000'000, b, s));
  s.run();
  EXPECT_EQ(a, 200'000'000);
  EXPECT_EQ(b, 400'000'000);
  EXPECT_NEAR(bus.contention_delay_s(), 0.1 + 0.1, 1e-12);
}

TEST(SharedBandwidth, AFlowWantingLessThanItsShareIsNotSlowed) {
  sim::Simulator s;
  sim::SharedBandwidth bus(s, "bus", 10e9);
  Time light = -1, heavy = -1;
  // Max-min: the light flow wants 2 GB/s (0.2 GB in 0.1 s) and gets it; the heavy one wants
  // 10 GB/s and gets the remaining 8 GB/s for 0.1 s (0.8 GB), then 10 GB/s for its last 0.2 GB.
  s.start(flow_and_note(bus, 0.2e9, 100'000'000, light, s));
  s.start(flow_and_note(bus, 1e9, 100'000'000, heavy, s));
  s.run();
  EXPECT_EQ(light, 100'000'000);
  EXPECT_EQ(heavy, 120'000'000);
}

sim::Task<void> interrupted_flow(sim::SharedBandwidth& bus, bool& interrupted) {
  try {
    co_await bus.flow(10e9, 1'000'000'000);
  } catch (const sim::Interrupt&) {
    interrupted = true;
  }
}

sim::Task<void> interrupt_at(sim::Simulator& s, sim::ProcessHandle target, Time at) {
  co_await s.timeout(at);
  s.interrupt(target.state(), "preempted");
}

TEST(SharedBandwidth, AnInterruptedFlowLeavesAndTheOthersSpeedUp) {
  sim::Simulator s;
  sim::SharedBandwidth bus(s, "bus", 10e9);
  bool interrupted = false;
  Time other = -1;
  auto victim = s.start(interrupted_flow(bus, interrupted));
  s.start(flow_and_note(bus, 2e9, 200'000'000, other, s));
  s.start(interrupt_at(s, victim, 100'000'000));
  s.run();
  EXPECT_TRUE(interrupted);
  // 0.5 GB moved in the first 0.1 s at 5 GB/s, then the bus is its own: 1.5 GB at 10 GB/s.
  EXPECT_EQ(other, 250'000'000);
  EXPECT_EQ(bus.active_flows(), 0u);
}

devices::DeviceProfile phone(double dram_gb, double reserved_gb) {
  const std::string yaml = fmt::format(R"(
name: test-phone
base_power_w: 0
compute:
  cpu: {{peak_tflops: {{fp16: 1.0}}, mem_bandwidth_gbps: 10, compute_efficiency: 1, gemv_compute_efficiency: 1, bandwidth_efficiency: 1,
        call_overhead_us: 0, active_power_w: 1, idle_power_w: 0}}
npu: {{peak_tops_int8: 10, peak_tflops_fp16: 5, max_utilization: 1, half_utilization_chunk: 64, exec_overhead_ms: 0,
      mem_bandwidth_gbps: 10, graph_load_ms_per_layer: 0, active_power_w: 1, idle_power_w: 0}}
dram: {{capacity_gb: {}, bandwidth_gbps: 10, reserved_gb: {}}}
)", dram_gb, reserved_gb);
  return devices::DeviceProfile::from_yaml(YAML::Load(yaml), ConfigSource{});
}

sim::Task<void> stream_on(devices::Device& d, std::string unit, double bytes, Time& done) {
  // Bandwidth-bound work: its roofline time is its bytes over the unit's 10 GB/s.
  co_await d.compute_for(unit, devices::UnitCost{bytes / 10e9, 0, bytes}, "stream");
  done = d.sim().now();
}

TEST(PhoneResources, CpuAndNpuShareTheDramBandwidth) {
  sim::Simulator s;
  sim::StatGroup stats("d");
  devices::Device dev(s, phone(8, 3), stats);
  Time cpu = -1, npu = -1;
  s.start(stream_on(dev, "cpu", 1e9, cpu));
  s.start(stream_on(dev, "npu", 1e9, npu));
  s.run();
  // Alone, each takes 0.1 s; together they move 2 GB over one 10 GB/s bus: both end at 0.2 s.
  EXPECT_EQ(cpu, 200'000'000);
  EXPECT_EQ(npu, 200'000'000);
  EXPECT_NEAR(dev.busy_seconds("cpu"), 0.2, 1e-12);
}

TEST(PhoneResources, OneUnitAloneRunsAtItsRoofline) {
  sim::Simulator s;
  sim::StatGroup stats("d");
  devices::Device dev(s, phone(8, 3), stats);
  Time a = -1, b = -1;
  s.start(stream_on(dev, "cpu", 1e9, a));
  s.start(stream_on(dev, "cpu", 1e9, b));  // the same unit: queued, not sharing
  s.run();
  EXPECT_EQ(a, 100'000'000);
  EXPECT_EQ(b, 200'000'000);
}

TEST(PhoneResources, DramLedgerRefusesWhatDoesNotFitAndTracksThePeak) {
  sim::Simulator s;
  sim::StatGroup stats("d");
  devices::Device dev(s, phone(8, 3), stats);  // 5 GB usable
  devices::Dram& dram = dev.dram();
  EXPECT_DOUBLE_EQ(dram.capacity_bytes(), 5e9);
  dram.reserve("chat/weights", 4e9);
  EXPECT_FALSE(dram.try_allocate("chat/kv", 2e9));
  EXPECT_DOUBLE_EQ(dram.used_bytes(), 4e9);
  EXPECT_TRUE(dram.try_allocate("chat/kv", 1e9));
  dram.release("chat/kv", 1e9);
  EXPECT_DOUBLE_EQ(dram.used_bytes(), 4e9);
  EXPECT_DOUBLE_EQ(dram.peak_bytes(), 5e9);
  EXPECT_DOUBLE_EQ(dram.owner_peaks().at("chat/kv"), 1e9);
  EXPECT_DOUBLE_EQ(dram.group_peaks().at("chat"), 5e9);  // weights and K/V of one app together
}

TEST(PhoneResources, WeightsThatDoNotFitStopTheRunNamingDramAndTheSizes) {
  sim::Simulator s;
  sim::StatGroup stats("d");
  devices::Device dev(s, phone(3.5, 3), stats);  // 0.5 GB usable
  try {
    dev.dram().reserve("assistant/weights", 1.9e9);
    FAIL() << "expected DramOverflow";
  } catch (const devices::DramOverflow& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("DRAM of test-phone is full"), std::string::npos) << what;
    EXPECT_NE(what.find("'assistant/weights' needs 1.900 GB"), std::string::npos) << what;
    EXPECT_NE(what.find("0.500 GB"), std::string::npos) << what;
    EXPECT_EQ(e.exit_code(), kExitFailure);
  }
}

TEST(PhoneResources, AUnitOnTheSharedBusCannotOutrunTheDram) {
  const std::string yaml = R"(
name: fast-cpu
base_power_w: 0
compute:
  cpu: {peak_tflops: {fp16: 1.0}, mem_bandwidth_gbps: 40, compute_efficiency: 1, gemv_compute_efficiency: 1, bandwidth_efficiency: 1,
        call_overhead_us: 0, active_power_w: 1, idle_power_w: 0}
dram: {capacity_gb: 8, bandwidth_gbps: 10, reserved_gb: 3}
)";
  try {
    devices::DeviceProfile::from_yaml(YAML::Load(yaml), ConfigSource{});
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("compute.cpu.mem_bandwidth_gbps"), std::string::npos) << what;
    EXPECT_NE(what.find("above the DRAM's own bandwidth_gbps = 10 GB/s"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace mobisim
