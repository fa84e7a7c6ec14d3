// CoordGen simulation speed (issue 10): verification steps costed per second (the inner loop of
// every SD policy: padded G_d execution + CPU attention), the progressive greedy on a 28-layer
// model, and a whole Table 3 (5 policies x the QMSum summary requests, drafting included) through
// the `mobisim` binary; target under 2 s. The Table 3 benchmark needs results/qmsum_val.h5 and the
// Llama 2 tokenizer (skipped otherwise).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>

#include "devices/device.h"
#include "models/model_spec.h"
#include "policies/specdec/sd_policies.h"

#ifndef MOBISIM_BINARY
#define MOBISIM_BINARY "mobisim"
#endif

namespace {

using namespace mobisim;

policies::specdec::SpecDecEnv k60_env() {
  const auto dev = devices::load_device_profile("redmi-k60-pro");
  const models::CostModel qwen(models::load_model_spec("qwen2.5-1.5b"));
  return {*dev.npu, dev.unit("cpu", "bench"), dev.base_power_w, qwen, qwen};
}

void BM_VerificationSteps(benchmark::State& state) {
  const auto env = k60_env();
  std::int64_t ctx = 1024, steps = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(policies::specdec::npu_verify_seconds(env, 1 + (steps % 31), ctx + steps % 512, 32,
                                                                         policies::specdec::LmHeadUnit::kCpu,
                                                                         models::DType::kF32));
    ++steps;
  }
  state.SetItemsProcessed(steps);
  state.counters["steps_per_s"] = benchmark::Counter(static_cast<double>(steps), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_VerificationSteps);

void BM_ProgressiveGreedy(benchmark::State& state) {
  const auto env = k60_env();
  const auto p = policies::specdec::make_schedule_problem(env.npu, env.cpu, env.cost, 2048,
                                                          {static_cast<int>(state.range(0)), 256, 32});
  for (auto _ : state) benchmark::DoNotOptimize(policies::specdec::schedule_progressive(p).latency_s());
}
BENCHMARK(BM_ProgressiveGreedy)->Arg(4)->Arg(28);

void BM_WholeTable3(benchmark::State& state) {
  const char* home = std::getenv("MOBISIM_HOME");
  const std::filesystem::path root = home ? home : ".";
  if (!std::filesystem::exists(root / "results/qmsum_val.h5")) {
    state.SkipWithError("results/qmsum_val.h5 missing: run `mobisim trace import qmsum ...` in MOBISIM_HOME first");
    return;
  }
  const std::string cmd = "cd '" + root.string() + "' && '" MOBISIM_BINARY
                          "' run experiments/coordgen/table3_k60.yaml --quiet --no-plot --output /tmp/mobisim-bench-t3.h5";
  for (auto _ : state)
    if (std::system(cmd.c_str()) != 0) state.SkipWithError("table 3 run failed");
}
BENCHMARK(BM_WholeTable3)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
