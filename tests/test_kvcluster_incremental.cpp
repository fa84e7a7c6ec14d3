// The counts DynaKV's replay keeps up to date instead of recomputing them every decode step
// (docs/speed.md, fourth pass), each compared with the recomputed value: the running sums of the
// packed layout's moved bytes, the live-cluster count, and the selection that starts from the last
// one's end (equal to ranking every candidate).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "policies/kvcluster/flash_layout.h"
#include "policies/kvcluster/kv_cluster.h"
#include "policies/kvcluster/running_sums.h"
#include "sim/rng.h"
#include "test_kvcluster_util.h"

namespace mobisim::policies::kvcluster {
namespace {

using testing::DriftingKeys;
using testing::make;

TEST(KvClusterIncremental, RunningSumsEqualTheSumsRecomputed) {
  sim::Rng rng(5, 0, "test/kvcluster", "running-sums");
  RunningSums sums;
  std::vector<std::int64_t> ref;
  for (int op = 0; op < 3000; ++op) {
    if (ref.empty() || rng.bernoulli(0.3)) {
      const auto v = static_cast<std::int64_t>(rng.uniform_int(100));
      sums.push_back(v);
      ref.push_back(v);
    } else {
      const int i = static_cast<int>(rng.uniform_int(ref.size()));
      const auto v = static_cast<std::int64_t>(rng.uniform_int(100));
      sums.set(i, v);
      ref[i] = v;
    }
    if (op % 37 != 0) continue;
    ASSERT_EQ(sums.size(), static_cast<int>(ref.size()));
    for (int i = 0; i < static_cast<int>(ref.size()); ++i) {
      ASSERT_EQ(sums.value(i), ref[i]);
      ASSERT_EQ(sums.after(i), std::accumulate(ref.begin() + i + 1, ref.end(), std::int64_t{0})) << "op " << op;
      ASSERT_EQ(sums.prefix(i), std::accumulate(ref.begin(), ref.begin() + i, std::int64_t{0})) << "op " << op;
    }
  }
}

TEST(KvClusterIncremental, PackedLayoutMovesEveryLaterClusterByHand) {
  // Clusters of 3, 2 and 4 entries placed in id order (intra), no page buffers. Appending to
  // cluster 0 shifts clusters 1 and 2 (6 entries), to cluster 2 nothing, then to cluster 1
  // cluster 2's 5 entries: (6 + 0 + 5) x 256 bytes.
  ClusterTable t(2);
  for (int i = 0; i < 12; ++i) {
    const float k[2] = {static_cast<float>(i), 0};
    t.append_key(k);
  }
  t.make_cluster({0, 1, 2});
  t.make_cluster({3, 4});
  t.make_cluster({5, 6, 7, 8});
  FlashLayout f(Placement::kIntraCluster, 256, 4096, 0);
  f.place_initial(t);
  const std::int64_t want[3] = {6 * 256, 6 * 256, 11 * 256};
  const int into[3] = {0, 2, 1};
  for (int i = 0; i < 3; ++i) {
    t.add_entry(into[i], 9 + i);
    f.sync(t);
    EXPECT_EQ(f.stats().naive_moved_bytes, want[i]) << "append " << i;
    f.check_invariants(t);
  }
}

// Random decode steps of every policy (splits, forced loads, local windows, pool overflows): the
// live count equals the count over the clusters, the layout's running sums its placed lists
// (check_invariants of both compare them), after every step.
TEST(KvClusterIncremental, LiveCountAndPackedSumsFollowRandomSteps) {
  for (const char* policy : {"{impl: dynakv, top_k: 2, tokens_per_cluster: 8, tau_scale: 1.1, b_max: 4}",
                             "{impl: dynakv, top_k_percent: 20, tokens_per_cluster: 8, tau_scale: 0.8, b_max: 0}",
                             "{impl: pqcache, top_k: 2, tokens_per_cluster: 8}",
                             "{impl: clusterkv, top_k: 2, tokens_per_cluster: 8, window: 16}"}) {
    auto p = make(policy);
    for (int hot : {0, 4}) {
      DriftingKeys gen(8, 6, 31);
      ClusterTable t(8);
      p->prefill(t, gen.block(96));
      FlashLayout f(Placement::kInterCluster, 256, 4096, hot);
      f.place_initial(t);
      sim::Rng rng(31, 1, "test/kvcluster", "incremental");
      int splits = 0;
      for (int step = 0; step < 400; ++step) {
        std::vector<float> q(8);
        for (float& x : q) x = static_cast<float>(rng.normal());
        const StepOutcome out = p->decode_step(t, q.data(), gen.next(0.3, step, 40).data());
        f.sync(t, out);
        splits += out.splits;
        ASSERT_NO_THROW(t.check_invariants()) << policy << " step " << step;
        ASSERT_NO_THROW(f.check_invariants(t)) << policy << " step " << step;
        int live = 0;
        for (const auto& c : t.clusters()) live += c.size() > 0;
        ASSERT_EQ(t.n_alive(), live) << policy << " step " << step;
      }
      if (std::string(policy).find("dynakv") != std::string::npos) {
        EXPECT_GT(splits, 0) << policy;
      }
      if (std::string(policy).find("clusterkv") == std::string::npos) {
        EXPECT_GT(f.stats().naive_moved_bytes, 0) << policy;  // ClusterKV only ever makes new clusters
      }
    }
  }
}

// Two copies of a table fed the same steps, one selecting from the last selection's end and one
// ranking every candidate every time: their selections are equal at every step, by count and by
// share, for queries that drift slowly (the floor holds) and that jump (it does not).
TEST(KvClusterIncremental, SelectionFromTheLastEndEqualsRankingEveryCandidate) {
  for (const char* policy : {"{impl: dynakv, top_k_percent: 10, tokens_per_cluster: 4}",
                             "{impl: dynakv, top_k: 5, tokens_per_cluster: 4}",
                             "{impl: dynakv, top_k_percent: 0, tokens_per_cluster: 4}"}) {
    auto p = make(policy);
    DriftingKeys gen(16, 24, 8);
    const kernel::Mat prefill = gen.block(640);  // 160 clusters: keep_top_bins bins them
    ClusterTable fast(16), full(16);
    p->prefill(fast, prefill);
    p->prefill(full, prefill);
    full.set_rank_floor(false);
    sim::Rng rng(8, 1, "test/kvcluster", "drifting-queries");
    std::vector<std::vector<float>> qs(3, std::vector<float>(16));
    for (auto& q : qs)
      for (float& x : q) x = static_cast<float>(rng.normal());
    for (int step = 0; step < 600; ++step) {
      const bool jump = step % 97 == 0;
      for (auto& q : qs)
        for (float& x : q) x = jump ? static_cast<float>(rng.normal()) : x + static_cast<float>(rng.normal(0.0, 0.05));
      const float* group[3] = {qs[0].data(), qs[1].data(), qs[2].data()};
      const std::vector<int> a = fast.select_union(QueryGroup(group), p->top_k());
      const std::vector<int> b = full.select_union(QueryGroup(group), p->top_k());
      ASSERT_EQ(a, b) << policy << " step " << step;
      const auto k = gen.next(0.05, step, 50);
      p->decode_selected(fast, a, 3, k.data());
      p->decode_selected(full, b, 3, k.data());
    }
    EXPECT_EQ(full.rank_floor_hits(), 0);
    // Most selections were found above the floor: the path compared is the one taken.
    EXPECT_GT(fast.rank_floor_hits(), 600 * 3 / 2) << policy;
  }
}

}  // namespace
}  // namespace mobisim::policies::kvcluster
