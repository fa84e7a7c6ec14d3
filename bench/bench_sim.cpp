// Event-core benchmarks (Release build): an M/M/1 queue of coroutine processes and
// the classic hold model. Reported counters: events/s (simulator events popped
// per wall-clock second) and customers/s (compared against SimPy by
// bench/peers/run_peers.sh). Target: >= 10 million events/s on one core.
#include <benchmark/benchmark.h>

#include "sim/resource.h"
#include "sim/rng.h"
#include "sim/simulator.h"

namespace {

using namespace mobisim::sim;

Task<void> customer(Simulator& sim, Resource& server, Rng& rng, double service_rate_per_ns, long& served) {
  auto lease = co_await server.acquire();
  co_await sim.timeout(static_cast<Time>(rng.exponential(service_rate_per_ns)) + 1);
  ++served;
}

Task<void> source(Simulator& sim, Resource& server, Rng& rng, long n, double arrival_rate_per_ns,
                  double service_rate_per_ns, long& served) {
  for (long i = 0; i < n; ++i) {
    sim.start(customer(sim, server, rng, service_rate_per_ns, served));
    co_await sim.timeout(static_cast<Time>(rng.exponential(arrival_rate_per_ns)) + 1);
  }
}

// M/M/1 with utilisation 0.8: mean inter-arrival 1000 ns, mean service 800 ns.
void BM_MM1(benchmark::State& state) {
  const long n = state.range(0);
  std::uint64_t events = 0;
  long customers = 0;
  for (auto _ : state) {
    Simulator sim;
    Resource server(sim, "server", 1);
    Rng rng(1, 0, "bench/mm1", "arrivals");
    long served = 0;
    sim.start(source(sim, server, rng, n, 1.0 / 1000.0, 1.0 / 800.0, served));
    sim.run();
    events += sim.events_processed();
    customers += served;
    benchmark::DoNotOptimize(served);
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["customers/s"] = benchmark::Counter(static_cast<double>(customers), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MM1)->Arg(200000)->Unit(benchmark::kMillisecond);

Task<void> holder(Simulator& sim, Rng& rng, long hops) {
  for (long i = 0; i < hops; ++i) co_await sim.timeout(static_cast<Time>(rng.exponential(1.0 / 1000.0)) + 1);
}

// Hold model: `population` processes each repeatedly sleeping an exponential time;
// exercises the event queue at a steady size.
void BM_HoldModel(benchmark::State& state) {
  const long population = state.range(0);
  const long hops = 2'000'000 / population;
  std::uint64_t events = 0;
  for (auto _ : state) {
    Simulator sim;
    Rng rng(1, 0, "bench/hold", "delays");
    for (long p = 0; p < population; ++p) sim.start(holder(sim, rng, hops));
    sim.run();
    events += sim.events_processed();
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_HoldModel)->Arg(10)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond);

// The same at a steady queue size: 50 holds per process whatever the population, so at 100,000
// processes the count is not dominated by starting and finishing processes (BM_HoldModel gives
// each of them only 20 holds). Issue 12 targets: >= 10M events/s at 1,000, >= 5M at 100,000.
void BM_HoldModelSteady(benchmark::State& state) {
  const long population = state.range(0);
  const long hops = 50;
  std::uint64_t events = 0;
  for (auto _ : state) {
    Simulator sim;
    Rng rng(1, 0, "bench/hold", "delays");
    for (long p = 0; p < population; ++p) sim.start(holder(sim, rng, hops));
    sim.run();
    events += sim.events_processed();
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_HoldModelSteady)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace
