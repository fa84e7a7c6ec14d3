// The phone's shared resources on the hot path: a decode step is one request to a compute unit.
// Its work moves bytes over the DRAM bus shared with the other units (a flow of
// sim::SharedBandwidth) instead of a plain timeout; these benchmarks time both, alone and with a
// second unit streaming beside it. Reported: simulated steps per wall-clock second.
#include <benchmark/benchmark.h>

#include "devices/device.h"
#include "sim/simulator.h"

namespace {

using namespace mobisim;

sim::Task<void> steps(devices::Device& d, std::string unit, long n, double dram_bytes) {
  for (long i = 0; i < n; ++i)
    co_await d.compute_for(unit, devices::UnitCost{0.05, 1e9, dram_bytes}, "decode");
}

// Arg 0: steps move no DRAM bytes (a plain timeout, as before the shared bus); 1: each moves
// 1 GB at 20 GB/s on the Pixel 7's 51.2 GB/s bus (a flow, never slowed).
void BM_DecodeStepsAlone(benchmark::State& state) {
  const devices::DeviceProfile profile = devices::load_device_profile("pixel7");
  const double bytes = state.range(0) ? 1e9 : 0.0;
  const long n = 200000;
  long total = 0;
  for (auto _ : state) {
    sim::Simulator sim;
    sim::StatGroup stats("bench");
    {
      devices::Device dev(sim, profile, stats);
      sim.start(steps(dev, "cpu", n, bytes));
      sim.run();
      sim.shutdown();
    }
    total += n;
  }
  state.counters["steps/s"] = benchmark::Counter(static_cast<double>(total), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeStepsAlone)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// CPU and GPU decoding at once, each wanting 40 GB/s of the 51.2: every step is re-planned.
void BM_DecodeStepsSharingTheBus(benchmark::State& state) {
  const devices::DeviceProfile profile = devices::load_device_profile("pixel7");
  const long n = 100000;
  long total = 0;
  for (auto _ : state) {
    sim::Simulator sim;
    sim::StatGroup stats("bench");
    {
      devices::Device dev(sim, profile, stats);
      sim.start(steps(dev, "cpu", n, 2e9));
      sim.start(steps(dev, "gpu", n, 2e9));
      sim.run();
      sim.shutdown();
    }
    total += 2 * n;
  }
  state.counters["steps/s"] = benchmark::Counter(static_cast<double>(total), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeStepsSharingTheBus)->Unit(benchmark::kMillisecond);

}  // namespace
