// The per-step scans of a DynaKV replay (policies/kvcluster/cluster_scan.h), at the sizes of
// Table 6 and Table 2 (head_dim 128):
//   BM_CentroidScores/<clusters>/<queries>: a GQA group's queries against every centroid
//     (selection); multiply-adds per second.
//   BM_SquaredDistances/<clusters>: a new key against every centroid (assignment).
//   BM_KeyScores/<keys>/<queries>: the exact attention of a block of decode steps' queries over the
//     keys (attention mass, accuracy_every = 1); multiply-adds per second.
// Each is equal bit for bit to the Eigen expression it replaced (tests/test_kvcluster_scan.cpp);
// on x86-64 the AVX2 version runs where the CPU has it.
#include <benchmark/benchmark.h>

#include <vector>

#include "policies/kvcluster/cluster_scan.h"
#include "sim/rng.h"

namespace {

using namespace mobisim;
using namespace mobisim::policies::kvcluster;

constexpr int kDim = 128;

std::vector<double> normals(std::size_t n, std::uint64_t seed) {
  sim::Rng rng(seed, 0, "bench/kvcluster", "scan");
  std::vector<double> v(n);
  for (auto& x : v) x = rng.normal(0.0, 1.0);
  return v;
}

CentroidPanels panels_of(int rows) {
  const auto c = normals(static_cast<std::size_t>(rows) * kDim, 1);
  CentroidPanels p(kDim);
  p.grow(rows);
  for (int r = 0; r < rows; ++r) p.set_row(r, c.data() + static_cast<std::size_t>(r) * kDim);
  return p;
}

void BM_CentroidScores(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), heads = static_cast<int>(state.range(1));
  const CentroidPanels p = panels_of(rows);
  const auto q = normals(static_cast<std::size_t>(heads) * kDim, 2);
  std::vector<const double*> qs;
  for (int h = 0; h < heads; ++h) qs.push_back(q.data() + static_cast<std::size_t>(h) * kDim);
  std::vector<double> out(static_cast<std::size_t>(rows) * heads);
  for (auto _ : state) {
    centroid_scores(p, qs.data(), heads, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(rows) * heads * kDim * state.iterations(),
                                               benchmark::Counter::kIsRate);
}
// About 530 clusters per table at 16K tokens (Table 6), 2,100 at 64K; GQA groups of 3 and 8.
BENCHMARK(BM_CentroidScores)->Args({530, 3})->Args({530, 8})->Args({2100, 8});

void BM_SquaredDistances(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0));
  const CentroidPanels p = panels_of(rows);
  const auto k = normals(kDim, 3);
  std::vector<double> out(static_cast<std::size_t>(rows));
  for (auto _ : state) {
    squared_distances(p, k.data(), out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["MAC/s"] =
      benchmark::Counter(static_cast<double>(rows) * kDim * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SquaredDistances)->Arg(530)->Arg(2100);

void BM_KeyScores(benchmark::State& state) {
  const int keys = static_cast<int>(state.range(0)), queries = static_cast<int>(state.range(1));
  const auto kd = normals(static_cast<std::size_t>(keys + queries) * kDim, 4);
  const std::vector<float> k(kd.begin(), kd.end());
  const auto qd = normals(static_cast<std::size_t>(queries) * kDim, 5);
  const std::vector<float> q(qd.begin(), qd.end());
  std::vector<const float*> qs;
  std::vector<int> n;
  std::vector<std::vector<float>> out(static_cast<std::size_t>(queries));
  std::vector<float*> outs;
  for (int j = 0; j < queries; ++j) {
    qs.push_back(q.data() + static_cast<std::size_t>(j) * kDim);
    n.push_back(keys + j);  // one more key a step (accuracy_every = 1)
    out[j].resize(static_cast<std::size_t>(n.back()));
    outs.push_back(out[j].data());
  }
  for (auto _ : state) {
    key_scores(k.data(), kDim, qs.data(), n.data(), queries, 0.088f, outs.data());
    benchmark::DoNotOptimize(outs.data());
  }
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(keys) * queries * kDim * state.iterations(),
                                               benchmark::Counter::kIsRate);
}
// Table 2: 2,560 keys at the end of a 512 + 2,048 session, blocks of 16 steps.
BENCHMARK(BM_KeyScores)->Args({2560, 16})->Args({2560, 1});

}  // namespace
