// Sweep-engine overhead (issue "Sweeps": < 5% per point against running the point alone).
// Both sides start the same `mobisim` binary for the same eight points of a one-user quick start:
// BM_PointsRunAlone runs them as eight `mobisim run` commands, BM_PointsThroughSweep as one
// `mobisim sweep` of the eight points (validation, index rewrites, progress included). Compare the
// per-point times they report: (sweep - alone) / alone is the overhead. BM_PointsThroughSweepInProcess
// runs the same sweep with --in-process (the points one after another in the sweep's process, one
// workload generation for all): what that saves per point.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#ifndef MOBISIM_BINARY
#define MOBISIM_BINARY "mobisim"
#endif

namespace {

namespace fs = std::filesystem;

const fs::path& work_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / "mobisim-bench-sweep";
    fs::create_directories(d);
    std::ofstream(d / "base.yaml")
        << "name: base\nseed: 1\nexperiment:\n  impl: rag_qa\n  device: pixel7\n"
           "  model: {base: llama-3.2-3b, weight_dtype: int4, activation_dtype: fp32, kv_dtype: fp32}\n"
           "  workload: {generate: default, max_users: 1, max_queries_per_user: 10}\n"
           "  pipeline: {compute_unit: cpu, top_k: 3}\n"
           "  policies: [{impl: naive}, {impl: percache, knowledge_type: notes}]\n";
    std::ofstream(d / "sweep.yaml") << "sweep:\n  base: " << (d / "base.yaml").string()
                                    << "\n  grid: {experiment.pipeline.system_prompt_tokens: [32, 48, 64, 80, 96, 112, 128, 144]}\n";
    return d;
  }();
  return dir;
}

void run(const std::string& cmd, benchmark::State& state) {
  if (std::system(cmd.c_str()) != 0) state.SkipWithError(("command failed: " + cmd).c_str());
}

void BM_PointsRunAlone(benchmark::State& state) {
  const auto& d = work_dir();
  for (auto _ : state)
    for (int tokens : {32, 48, 64, 80, 96, 112, 128, 144})
      run(std::string(MOBISIM_BINARY) + " run " + (d / "base.yaml").string() +
              " -p experiment.pipeline.system_prompt_tokens=" + std::to_string(tokens) +
              " --quiet --no-plot --output " + (d / ("alone" + std::to_string(tokens) + ".h5")).string(),
          state);
  state.counters["s_per_point"] = benchmark::Counter(8.0 * static_cast<double>(state.iterations()),
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_PointsRunAlone)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

// The eight points as one `mobisim sweep` with `flags`, into OUTPUT `out`.
void sweep_points(benchmark::State& state, const std::string& flags, const std::string& out) {
  const auto& d = work_dir();
  for (auto _ : state)
    run(std::string(MOBISIM_BINARY) + " sweep " + (d / "sweep.yaml").string() + " --quiet" + flags + " --output " +
            (d / out).string(),
        state);
  state.counters["s_per_point"] = benchmark::Counter(8.0 * static_cast<double>(state.iterations()),
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_PointsThroughSweep(benchmark::State& state) { sweep_points(state, "", "sweep"); }
BENCHMARK(BM_PointsThroughSweep)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

void BM_PointsThroughSweepInProcess(benchmark::State& state) { sweep_points(state, " --in-process", "sweep_in_process"); }
BENCHMARK(BM_PointsThroughSweepInProcess)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

}  // namespace
