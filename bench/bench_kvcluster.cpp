// DynaKV session replay speed (seed 003): decode steps simulated per second for
// a drifting session of 8 layers x 8 KV heads (head_dim 64), with the flash
// layout kept byte-exact and every layer's reads timed on the simulated UFS 4.0
// of the OnePlus 12. Target: Table 6 for one model (decode lengths 1K + 2K + 4K
// + 8K + 16K = 31K steps) in under 10 s on one core, i.e. >= 3100 steps/s at 16K.
#include <benchmark/benchmark.h>

#include <string>

#include "devices/device.h"
#include "policies/kvcluster/session_replay.h"
#include "sim/params.h"
#include "sim/registry.h"
#include "traces/kv_session.h"

namespace {

using namespace mobisim;
using namespace mobisim::policies::kvcluster;

void replay(benchmark::State& state, const char* policy_yaml, bool timed_io) {
  traces::DriftingSpec spec;
  spec.n_layers = 8;
  spec.n_kv_heads = 8;
  spec.head_dim = 64;
  spec.prefill = 1024;
  spec.decode = static_cast<int>(state.range(0)) - spec.prefill;
  const auto session = traces::generate_drifting_session(spec);
  auto policy = Registry<KvClusterPolicy>::instance().create(load_yaml_string(policy_yaml, "bench"), ConfigSource{});
  ReplayOptions opt;
  opt.entry_bytes = 2 * 64;  // FP8 K + V
  if (timed_io) opt.storage = devices::load_device_profile("oneplus-12").require_storage("bench");
  for (auto _ : state) {
    const auto r = replay_session(session, *policy, opt);
    benchmark::DoNotOptimize(r.steps.data());
  }
  state.counters["steps/s"] =
      benchmark::Counter(static_cast<double>(spec.decode) * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_DynaKvReplay(benchmark::State& state) { replay(state, "{impl: dynakv, top_k_percent: 10}", true); }
void BM_DynaKvReplayNoIoTiming(benchmark::State& state) { replay(state, "{impl: dynakv, top_k_percent: 10}", false); }
void BM_PqCacheReplay(benchmark::State& state) { replay(state, "{impl: pqcache, top_k_percent: 10}", true); }

BENCHMARK(BM_DynaKvReplay)->Arg(2048)->Arg(16384)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_DynaKvReplayNoIoTiming)->Arg(2048)->Arg(16384)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_PqCacheReplay)->Arg(16384)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
