// DynaKV and its baselines (seed 003 section 4, Algorithm 1): hand-computed
// running variance, Algorithm 1's branches, the delayed-split invariant, and
// cluster-restricted attention against full attention on the real kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "models/kernel/checkpoint.h"
#include "models/kernel/oracles.h"
#include "policies/kvcluster/dynakv.h"
#include "policies/kvcluster/kv_cluster.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "sim/rng.h"
#include "test_kernel_util.h"
#include "test_kvcluster_util.h"

namespace mobisim::policies::kvcluster {
namespace {

using testing::DriftingKeys;
using testing::make;
using testing::rows;

TEST(KvClusterVariance, WelfordUpdateMatchesHandComputedValue) {
  // Cluster {(0,0), (2,0)}: r = (1,0), sigma^2 = (1 + 1) / 2 = 1.
  ClusterTable t(2);
  t.append_key(rows({{0, 0}}).data());
  t.append_key(rows({{2, 0}}).data());
  const int c = t.make_cluster({0, 1});
  EXPECT_DOUBLE_EQ(t.cluster(c).variance, 1.0);
  // Adding (1,3): r' = (1,1); squared distances 2, 2, 4 -> sigma'^2 = 8/3.
  const float k[2] = {1, 3};
  EXPECT_DOUBLE_EQ(t.variance_with(c, k), 8.0 / 3.0);
  t.add_entry(c, t.append_key(k));
  EXPECT_DOUBLE_EQ(t.cluster(c).variance, 8.0 / 3.0);
  EXPECT_DOUBLE_EQ(t.cluster(c).centroid[0], 1.0);
  EXPECT_DOUBLE_EQ(t.cluster(c).centroid[1], 1.0);
  EXPECT_EQ(t.cluster(c).n, 3);
}

TEST(KvClusterVariance, RunningVarianceEqualsRecomputedOverLongStreams) {
  DriftingKeys gen(16, 3, 5);
  ClusterTable t(16);
  t.append_key(gen.next(0.0, 0, 0).data());
  const int c = t.make_cluster({0});
  for (int i = 1; i < 2000; ++i) {
    const auto k = gen.next(0.05, i, 0);
    const double predicted = t.variance_with(c, k.data());
    t.add_entry(c, t.append_key(k.data()));
    ASSERT_NEAR(t.cluster(c).variance, predicted, 1e-9 * (1 + predicted));
  }
  const double running = t.cluster(c).variance;
  const auto centroid = t.cluster(c).centroid;
  ClusterTable& mut = t;
  mut.recompute_stats(c);
  EXPECT_NEAR(running, t.cluster(c).variance, 1e-9 * running);
  for (int d = 0; d < 16; ++d) EXPECT_NEAR(centroid[d], t.cluster(c).centroid[d], 1e-9 * (1 + std::abs(centroid[d])));
}

TEST(KvClusterSelect, RanksCentroidsByDotProductAndCoversThePercentage) {
  ClusterTable t(2);
  for (auto k : {rows({{10, 0}}), rows({{11, 0}}), rows({{0, 10}}), rows({{-10, 0}}), rows({{-9, 1}}), rows({{-11, -1}})})
    t.append_key(k.data());
  const int right = t.make_cluster({0, 1}), up = t.make_cluster({2}), left = t.make_cluster({3, 4, 5});
  const float q[2] = {1, 0.1f};  // scores: right 10.5, up 1, left -10
  EXPECT_EQ(t.select(q, TopK{1, 0}), (std::vector<int>{right}));
  EXPECT_EQ(t.select(q, TopK{2, 0}), (std::vector<int>{right, up}));
  // 6 entries: 40% needs 2.4 entries -> right (2) then up (3).
  EXPECT_EQ(t.select(q, TopK{0, 40.0}), (std::vector<int>{right, up}));
  EXPECT_EQ(t.select(q, TopK{0, 30.0}), (std::vector<int>{right}));
  EXPECT_EQ(t.select(q, TopK{0, 100.0}).size(), 3u);
  (void)left;
}

TEST(KvClusterSelect, GqaUnionKeepsTheFirstHeadsRankingThenAddsEachFurtherHeadsNewClusters) {
  ClusterTable t(2);
  for (auto k : {rows({{10, 0}}), rows({{11, 0}}), rows({{0, 10}}), rows({{-10, 0}}), rows({{-9, 1}}), rows({{-11, -1}})})
    t.append_key(k.data());
  const int right = t.make_cluster({0, 1}), up = t.make_cluster({2}), left = t.make_cluster({3, 4, 5});
  const float east[2] = {1, 0.1f}, west[2] = {-1, 0}, north[2] = {0, 1};
  // One cluster per head: east -> right, west -> left, north -> up.
  const float* two[2] = {east, west};
  EXPECT_EQ(t.select_union(QueryGroup(two), TopK{1, 0}), (std::vector<int>{right, left}));
  const float* three[3] = {west, east, north};
  EXPECT_EQ(t.select_union(QueryGroup(three), TopK{1, 0}), (std::vector<int>{left, right, up}));
  // Two per head: east -> {right, up}, north -> {up, right (5.5 vs left's -9.3)}: nothing new.
  const float* overlapping[2] = {east, north};
  EXPECT_EQ(t.select_union(QueryGroup(overlapping), TopK{2, 0}), (std::vector<int>{right, up}));
  // A group of one (or of one query repeated) is the plain selection.
  const float* same[3] = {east, east, east};
  EXPECT_EQ(t.select_union(QueryGroup(same), TopK{0, 40.0}), t.select(east, TopK{0, 40.0}));
  EXPECT_TRUE(t.select_union(QueryGroup(), TopK{1, 0}).empty());
}

TEST(KvClusterPrefill, KMeansPartitionHasCentroidRepresentatives) {
  DriftingKeys gen(8, 4, 3);
  auto p = make("{impl: pqcache, tokens_per_cluster: 16}");
  ClusterTable t(8);
  p->prefill(t, gen.block(100));
  EXPECT_LE(t.n_alive(), 7);  // ceil(100 / 16)
  EXPECT_GE(t.n_alive(), 4);
  t.check_invariants();
  for (int c = 0; c < static_cast<int>(t.clusters().size()); ++c) {
    std::vector<double> mean(8, 0.0);
    for (int pos : t.cluster(c).members)
      for (int d = 0; d < 8; ++d) mean[d] += t.key(pos)[d] / static_cast<double>(t.cluster(c).members.size());
    for (int d = 0; d < 8; ++d) EXPECT_NEAR(mean[d], t.cluster(c).centroid[d], 1e-9);  // eq. 4
  }
}

TEST(KvClusterPolicies, StaticUpdateNeverSplitsAndLocalUpdateFragments) {
  auto pq = make("{impl: pqcache}");
  auto ckv = make("{impl: clusterkv, window: 32, local_tokens_per_cluster: 4}");
  DriftingKeys g1(8, 3, 11), g2(8, 3, 11);
  ClusterTable a(8), b(8);
  pq->prefill(a, g1.block(64));
  ckv->prefill(b, g2.block(64));
  const int m0 = a.n_alive();
  const float q[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  for (int s = 0; s < 320; ++s) {
    pq->decode_step(a, q, g1.next(0.1, s, 64).data());
    ckv->decode_step(b, q, g2.next(0.1, s, 64).data());
  }
  a.check_invariants();
  b.check_invariants();
  EXPECT_EQ(a.n_alive(), m0);                    // static: the prefill clusters only
  EXPECT_EQ(b.n_alive(), m0 + 320 / 32 * 8);     // 10 windows x ceil(32/4) local clusters
  EXPECT_EQ(b.cluster(b.local_window()).size(), 0);
}

// ClusterKV's own defaults (sjtu-zhao-lab/ClusterKV at cb66a229: window=320, window_nlist=8): the
// first 319 decoded entries wait in the window; the 320th fills it and the window becomes
// ceil(320 / 40) = 8 local clusters beside the prefill's, and is empty again.
TEST(KvClusterPolicies, ClusterKvDefaultsClusterEvery320EntriesIntoEightClusters) {
  auto ckv = make("{impl: clusterkv}");
  DriftingKeys gen(8, 3, 11);
  ClusterTable t(8);
  ckv->prefill(t, gen.block(64));
  const int m0 = t.n_alive();  // the prefill's clusters (64 / 32 = 2 at most)
  const float q[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  for (int s = 0; s < 319; ++s) ckv->decode_step(t, q, gen.next(0.1, s, 64).data());
  EXPECT_EQ(t.cluster(t.local_window()).size(), 319);
  EXPECT_EQ(t.n_alive(), m0 + 1);  // the window is one live cluster
  ckv->decode_step(t, q, gen.next(0.1, 319, 64).data());
  t.check_invariants();
  EXPECT_EQ(t.cluster(t.local_window()).size(), 0);
  EXPECT_EQ(t.n_alive(), m0 + 8);
}

// Seed 003, section 6.1 (Pipeline 1): retrieval systems keep their representatives "cached persistently
// in memory"; DynaKV stores them on flash. So each policy's default, and either can be asked for.
TEST(KvClusterPolicies, RepresentativesLiveOnFlashForDynaKvAndInDramForTheBaselines) {
  EXPECT_TRUE(make("{impl: dynakv}")->representatives_on_flash());
  for (const char* impl : {"no_cluster", "pqcache", "clusterkv"})
    EXPECT_FALSE(make(fmt::format("{{impl: {}}}", impl))->representatives_on_flash()) << impl;
  EXPECT_FALSE(make("{impl: dynakv, representatives: dram}")->representatives_on_flash());
  EXPECT_TRUE(make("{impl: pqcache, representatives: flash}")->representatives_on_flash());
  EXPECT_THROW(make("{impl: pqcache, representatives: gpu}"), ConfigError);
}

// Runs Algorithm 1 on a drifting stream and checks the invariant after every step.
struct DelayedSplitRun {
  int splits = 0, forced = 0, max_buffered = 0, steps_with_buffer = 0;
};
DelayedSplitRun run_dynakv(const KvClusterPolicy& p, int b_max, int steps, std::uint64_t seed) {
  DriftingKeys gen(8, 3, seed);
  ClusterTable t(8);
  p.prefill(t, gen.block(64));
  DelayedSplitRun r;
  sim::Rng qrng(seed, 1, "test/kvcluster", "queries");
  for (int s = 0; s < steps; ++s) {
    std::vector<float> q(8);
    for (float& x : q) x = static_cast<float>(qrng.normal());
    const auto k = gen.next(0.2, s, 48);
    const int before = t.n_entries();
    const auto out = p.decode_step(t, q.data(), k.data());
    EXPECT_EQ(t.n_entries(), before + 1);
    t.check_invariants();  // throws when an entry is lost, duplicated or misplaced
    EXPECT_LT(t.total_buffered(), std::max(b_max, 1)) << "step " << s;
    r.splits += out.splits;
    r.forced += static_cast<int>(out.forced_loads.size());
    r.max_buffered = std::max<int>(r.max_buffered, static_cast<int>(t.total_buffered()));
    r.steps_with_buffer += t.total_buffered() > 0;
  }
  return r;
}

TEST(KvClusterDynaKv, DelayedSplitLosesNoEntryAndRespectsTheBufferBudget) {
  for (int b_max : {0, 1, 4, 16}) {
    auto p = make(fmt::format("{{impl: dynakv, tau_scale: 1.2, b_max: {}, top_k: 1, tokens_per_cluster: 8}}", b_max));
    const auto r = run_dynakv(*p, b_max, 600, 21 + b_max);
    EXPECT_GT(r.splits, 0) << "b_max " << b_max;
    if (b_max >= 4) {
      EXPECT_GT(r.steps_with_buffer, 0) << "the delayed path was never taken (b_max " << b_max << ")";
      EXPECT_GT(r.forced, 0) << "the buffer budget never forced a load (b_max " << b_max << ")";
    }
    if (b_max <= 1) {
      EXPECT_EQ(r.max_buffered, 0);
    }
  }
}

TEST(KvClusterDynaKv, BranchesOfAlgorithmOne) {
  // Two prefill clusters on a line, tau = 1 (explicit, one head).
  auto p = make("{impl: dynakv, tau_h: [1.0], b_max: 2, top_k: 1}");
  ClusterTable u(2, 0);
  for (auto k : {rows({{0, 0}}), rows({{1, 0}}), rows({{100, 0}}), rows({{101, 0}})}) u.append_key(k.data());
  const int a = u.make_cluster({0, 1}), b = u.make_cluster({2, 3});  // sigma^2 = 0.25 each
  u.set_threshold(1.0);
  const float q_a[2] = {-1, 0};  // selects cluster a (score -0.5 vs -100.5)
  // (0.5, 0) joins a: squared distances 0.25, 0.25, 0 -> sigma^2 = 1/6 <= 1 -> appended.
  auto o1 = p->decode_step(u, q_a, rows({{0.5f, 0}}).data());
  EXPECT_EQ(u.cluster(a).n, 3);
  EXPECT_NEAR(u.cluster(a).variance, 1.0 / 6.0, 1e-12);
  EXPECT_EQ(o1.selected, (std::vector<int>{a}));
  // (104, 0) is nearest b, would give sigma^2 > 1, b is not loaded -> buffered.
  auto o2 = p->decode_step(u, q_a, rows({{104, 0}}).data());
  EXPECT_EQ(u.cluster(b).buffered.size(), 1u);
  EXPECT_TRUE(u.cluster(b).split_pending);
  EXPECT_EQ(o2.splits, 0);
  EXPECT_TRUE(o2.forced_loads.empty());
  // Another far entry for b: the buffer reaches B_max = 2 -> b is loaded and split.
  auto o3 = p->decode_step(u, q_a, rows({{105, 0}}).data());
  EXPECT_EQ(o3.forced_loads, (std::vector<int>{b}));
  EXPECT_EQ(o3.splits, 1);
  EXPECT_EQ(u.total_buffered(), 0);
  u.check_invariants();
  // The split separates {100, 101} from {104, 105}.
  EXPECT_EQ(u.cluster(b).size() + u.cluster(static_cast<int>(u.clusters().size()) - 1).size(), 4);
  EXPECT_EQ(u.cluster(b).size(), 2);
  // A far entry for a while a is loaded splits a immediately (no buffering).
  auto o4 = p->decode_step(u, q_a, rows({{-6, 0}}).data());
  EXPECT_EQ(o4.splits, 1);
  EXPECT_TRUE(o4.forced_loads.empty());
  EXPECT_EQ(u.total_buffered(), 0);
  u.check_invariants();
}

TEST(KvClusterDynaKv, FlaggedClusterBuffersEveryNewEntryUntilItIsLoaded) {
  // Section 4.2: "newly added KV entries belonging to the flagged cluster are stored in a memory
  // buffer until the cluster is eventually loaded". a = {0, 1}, b = {100, 101} on a line (sigma^2
  // 0.25 each, centroids 0.5 and 100.5), tau = 1, B_max = 3.
  auto p = make("{impl: dynakv, tau_h: [1.0], b_max: 3, top_k: 1}");
  ClusterTable u(2, 0);
  for (auto k : {rows({{0, 0}}), rows({{1, 0}}), rows({{100, 0}}), rows({{101, 0}})}) u.append_key(k.data());
  const int a = u.make_cluster({0, 1}), b = u.make_cluster({2, 3});
  u.set_threshold(1.0);
  const float q_a[2] = {-1, 0}, q_b[2] = {1, 0};  // select a (-0.5 > -100.5), b (100.5 > 0.5)
  // (104, 0): sigma_b^2 would be (2 x 0.25 + 3.5^2 x 2/3) / 3 = 2.89 > 1, b not loaded -> Buf_b, flag.
  p->decode_step(u, q_a, rows({{104, 0}}).data());
  ASSERT_TRUE(u.cluster(b).split_pending);
  // (100.5, 0) sits on b's centroid: sigma^2 would be (2 x 0.25 + 0) / 3 = 1/6 <= 1, but b is flagged,
  // so it waits in Buf_b too (2 < B_max: no forced load); b's statistics keep its two flash members.
  EXPECT_NEAR(u.variance_with(b, rows({{100.5f, 0}}).data()), 1.0 / 6.0, 1e-12);
  const auto o2 = p->decode_step(u, q_a, rows({{100.5f, 0}}).data());
  EXPECT_EQ(u.cluster(b).buffered.size(), 2u);
  EXPECT_EQ(u.cluster(b).n, 2);
  EXPECT_NEAR(u.cluster(b).variance, 0.25, 1e-12);
  EXPECT_TRUE(o2.updated.empty());
  EXPECT_TRUE(o2.forced_loads.empty());
  // b retrieved: its delayed split runs over {100, 101, 104, 100.5} -> {100, 100.5, 101} and {104};
  // the step's own key (0.5, 0) joins a (sigma^2 = 1/6).
  const auto o3 = p->decode_step(u, q_b, rows({{0.5f, 0}}).data());
  EXPECT_EQ(o3.splits, 1);
  EXPECT_TRUE(o3.forced_loads.empty());
  EXPECT_EQ(u.total_buffered(), 0);
  EXPECT_EQ(u.cluster(a).n, 3);
  const int child = static_cast<int>(u.clusters().size()) - 1;
  EXPECT_EQ(std::min(u.cluster(b).size(), u.cluster(child).size()), 1);
  EXPECT_EQ(u.cluster(b).size() + u.cluster(child).size(), 4);
  u.check_invariants();
}

TEST(KvClusterDynaKv, LowerVarianceThanStaticUpdateOnADriftingStream) {
  auto pq = make("{impl: pqcache}");
  auto dk = make("{impl: dynakv}");
  DriftingKeys g1(16, 4, 9), g2(16, 4, 9);
  ClusterTable a(16), b(16);
  pq->prefill(a, g1.block(128));
  dk->prefill(b, g2.block(128));
  sim::Rng qrng(9, 1, "test/kvcluster", "queries");
  for (int s = 0; s < 1500; ++s) {
    std::vector<float> q(16);
    for (float& x : q) x = static_cast<float>(qrng.normal());
    pq->decode_step(a, q.data(), g1.next(0.05, s, 150).data());
    dk->decode_step(b, q.data(), g2.next(0.05, s, 150).data());
  }
  EXPECT_LT(b.mean_variance(), 0.8 * a.mean_variance());
  EXPECT_GT(b.n_alive(), a.n_alive());
}

TEST(KvClusterConfig, BadParametersAreClearErrors) {
  EXPECT_THROW(make("{impl: dynakv, b_max: -1}"), ConfigError);
  EXPECT_THROW(make("{impl: dynakv, tau_h: [1.0, -2.0]}"), ConfigError);
  EXPECT_THROW(make("{impl: dynakv, top_k_percent: 150}"), ConfigError);
  EXPECT_THROW(make("{impl: kmeans_magic}"), ConfigError);
  auto p = make("{impl: dynakv, tau_h: [1.0, 2.0]}");
  EXPECT_NO_THROW(p->check_heads(2));
  try {
    p->check_heads(3);
    FAIL() << "three heads, two thresholds";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tau_h has 2 values"), std::string::npos) << e.what();
  }
  ClusterTable t(2, 5);  // head 5 has no threshold
  EXPECT_THROW(p->prefill(t, rows({{0, 0}, {1, 1}})), ConfigError);
}

// ---------------------------------------------------------------------------
// Cluster-restricted attention on the real kernel.
// ---------------------------------------------------------------------------
struct KernelSession {
  kernel::Model m;
  std::vector<int> seq;
  int prefill = 0;
};

double max_logit_gap(const KernelSession& s, const std::string& policy_yaml, int decode_steps,
                     double* mean_mass = nullptr) {
  using namespace kernel;
  const Config& c = s.m.config;
  auto p = make(policy_yaml);
  KVCache cache(c), full(c);
  RunState st, st_full;
  ForwardOptions o;
  o.logits = Logits::kNone;
  forward(s.m, cache, st, std::span<const int>(s.seq.data(), s.prefill), o);
  forward(s.m, full, st_full, std::span<const int>(s.seq.data(), s.prefill), o);
  std::vector<ClusterTable> tables;
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) {
      tables.emplace_back(c.head_dim, l * c.n_kv_heads + h);
      p->prefill(tables.back(), cache.k[l].block(0, h * c.head_dim, s.prefill, c.head_dim));
    }
  p->check_heads(static_cast<int>(tables.size()));
  double gap = 0;
  SubsetStats stats;
  for (int t = 0; t < decode_steps; ++t) {
    const int tok = s.seq[s.prefill + t];
    // Selection per query head; the KV head's table is advanced once per step below.
    ForwardOptions so;
    Capture cap;
    so.logits = Logits::kLast;
    so.subset_stats = &stats;
    so.capture = &cap;
    so.kv_selector = [&](int l, int h, const float* q, int) {
      return p->attended_positions(tables[l * c.n_kv_heads + h / c.kv_mul()], q);
    };
    const int one[1] = {tok};
    const Mat& logits = forward(s.m, cache, st, one, so);
    const float* ref = forward_token(s.m, full, st_full, tok);
    for (int v = 0; v < c.vocab_size; ++v) gap = std::max(gap, static_cast<double>(std::abs(logits(0, v) - ref[v])));
    // Advance every table with the step's new key; Algorithm 1 selects with the
    // query of the group's first query head.
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const int pos = cache.length - 1;
        const float* q = cap.q[l].row(0).data() + h * c.kv_mul() * c.head_dim;
        p->decode_step(tables[l * c.n_kv_heads + h], q, cache.k[l].row(pos).data() + h * c.head_dim);
      }
  }
  for (auto& tab : tables) tab.check_invariants();
  if (mean_mass) *mean_mass = std::accumulate(stats.mass.begin(), stats.mass.end(), 0.0) / stats.mass.size();
  return gap;
}

KernelSession synthetic_session() {
  KernelSession s{kernel::testing::tiny_llama(), {}, 48};
  s.seq = kernel::sample_sequence(s.m, 80, 3);
  return s;
}

TEST(KvClusterKernel, TopKCoveringEveryClusterEqualsFullAttention) {
  const auto s = synthetic_session();
  for (const char* impl : {"no_cluster", "pqcache", "clusterkv", "dynakv"}) {
    const double gap = max_logit_gap(s, fmt::format("{{impl: {}, top_k_percent: 100, tokens_per_cluster: 8, "
                                                    "{}}}", impl, std::string(impl) == "clusterkv" ? "window: 8" : "seed: 2"),
                                     s.seq.size() - s.prefill);
    EXPECT_LT(gap, 1e-4) << impl;
  }
}

TEST(KvClusterKernel, PartialTopKDiffersFromFullAttention) {
  // The check above can fail: with 10% of the clusters the logits move.
  const auto s = synthetic_session();
  double mass = 0;
  const double gap = max_logit_gap(s, "{impl: dynakv, top_k_percent: 10, tokens_per_cluster: 8}", 16, &mass);
  EXPECT_GT(gap, 1e-3);
  EXPECT_LT(mass, 0.999);
}

TEST(KvClusterKernel, Stories260kTopKCoveringEveryClusterEqualsFullAttention) {
  MOBISIM_REQUIRE_FILE(kernel::testing::stories_path());
  KernelSession s{kernel::load_model(kernel::testing::stories_path()), {}, 96};
  s.seq = kernel::sample_sequence(s.m, 160, 5);
  for (const char* impl : {"pqcache", "dynakv"}) {
    const double gap = max_logit_gap(s, fmt::format("{{impl: {}, top_k_percent: 100, tokens_per_cluster: 16}}", impl),
                                     s.seq.size() - s.prefill);
    EXPECT_LT(gap, 1e-4) << impl;
  }
}

}  // namespace
}  // namespace mobisim::policies::kvcluster
