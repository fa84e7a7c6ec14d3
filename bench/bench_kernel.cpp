// Kernel speed: single-thread decode of stories260K (target: at least a plain C
// implementation's ~4000 tok/s on this machine) and batched prefill per token.
// A synthetic model of the same shape runs when the checkpoint is absent.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "models/kernel/checkpoint.h"
#include "models/kernel/transformer.h"

namespace {

using namespace mobisim::kernel;

std::string stories_path() {
  const char* env = std::getenv("MOBISIM_SHARED_DIR");
  return std::string(env && *env ? env : "../shared") + "/models/stories260K.bin";
}

// Decodes `steps` tokens greedily from BOS per iteration (context grows 1..steps).
void decode(benchmark::State& state, const Model& m) {
  const int steps = static_cast<int>(state.range(0));
  KVCache cache(m.config);
  RunState st;
  for (auto _ : state) {
    cache.length = 0;
    int tok = 1;
    for (int i = 0; i < steps; ++i) tok = argmax(forward_token(m, cache, st, tok), m.config.vocab_size);
    benchmark::DoNotOptimize(tok);
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(steps) * state.iterations(),
                                               benchmark::Counter::kIsRate);
}

void prefill(benchmark::State& state, const Model& m) {
  const int n = static_cast<int>(state.range(0));
  std::vector<int> toks(n);
  for (int i = 0; i < n; ++i) toks[i] = (i * 37 + 1) % m.config.vocab_size;
  KVCache cache(m.config);
  RunState st;
  for (auto _ : state) {
    cache.length = 0;
    benchmark::DoNotOptimize(forward(m, cache, st, toks).data());
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(n) * state.iterations(),
                                               benchmark::Counter::kIsRate);
}

void BM_KernelDecodeStories260K(benchmark::State& state) {
  if (!std::filesystem::exists(stories_path())) {
    state.SkipWithError(("stories260K.bin not found at " + stories_path() + " (set MOBISIM_SHARED_DIR)").c_str());
    return;
  }
  static const Model m = load_llama2c(stories_path());
  decode(state, m);
}
void BM_KernelPrefillStories260K(benchmark::State& state) {
  if (!std::filesystem::exists(stories_path())) {
    state.SkipWithError(("stories260K.bin not found at " + stories_path() + " (set MOBISIM_SHARED_DIR)").c_str());
    return;
  }
  static const Model m = load_llama2c(stories_path());
  prefill(state, m);
}
void BM_KernelDecodeSynthetic260K(benchmark::State& state) {
  static const Model m = make_synthetic(tiny_config(), 7);
  decode(state, m);
}
void BM_KernelPrefillSynthetic260K(benchmark::State& state) {
  static const Model m = make_synthetic(tiny_config(), 7);
  prefill(state, m);
}

BENCHMARK(BM_KernelDecodeStories260K)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KernelPrefillStories260K)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KernelDecodeSynthetic260K)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KernelPrefillSynthetic260K)->Arg(256)->Unit(benchmark::kMillisecond);

}  // namespace
