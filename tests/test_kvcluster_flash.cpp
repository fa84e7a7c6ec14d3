// DynaKV's flash management (seed 003 section 5): byte-exact placement over
// pages, read runs, the dual-head pool, the page-aligned write buffer.
#include <gtest/gtest.h>

#include <numeric>
#include <tuple>

#include "policies/kvcluster/flash_layout.h"
#include "policies/kvcluster/kv_cluster.h"
#include "sim/error.h"
#include "sim/rng.h"
#include "test_kvcluster_util.h"

namespace mobisim::policies::kvcluster {
namespace {

using testing::DriftingKeys;
using testing::make;

std::vector<float> random_query(sim::Rng& rng, int dim) {
  std::vector<float> q(dim);
  for (float& x : q) x = static_cast<float>(rng.normal());
  return q;
}

kernel::Mat random_queries(int n, int dim, std::uint64_t seed) {
  sim::Rng rng(seed, 2, "test/kvcluster", "prefill-queries");
  kernel::Mat m(n, dim);
  for (int i = 0; i < n; ++i)
    for (int d = 0; d < dim; ++d) m(i, d) = static_cast<float>(rng.normal());
  return m;
}

TEST(KvClusterFlash, ReadRunsAreContiguousPagesComputedByHand) {
  // 1 KB entries, 4 KB pages, strict sequence order: entry p at p KB.
  ClusterTable t(2);
  for (int i = 0; i < 12; ++i) {
    const float k[2] = {static_cast<float>(i), 0};
    t.append_key(k);
  }
  FlashLayout f(Placement::kSequence, 1024, 4096);
  f.place_initial(t);
  EXPECT_EQ(f.offset_of(5), 5 * 1024);
  auto runs = f.read_runs_of({0, 1, 2, 3});  // page 0 only
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].offset_bytes, 0);
  EXPECT_EQ(runs[0].bytes, 4096);
  EXPECT_EQ(runs[0].entries, 4);
  runs = f.read_runs_of({3, 4});  // pages 0 and 1: one command of two pages
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].bytes, 8192);
  runs = f.read_runs_of({0, 9});  // pages 0 and 2: two commands
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].offset_bytes, 8192);
  EXPECT_EQ(runs[1].entries, 1);
}

TEST(KvClusterFlash, RunsCountTheirByteContiguousPiecesByHand) {
  // 1 KB entries, 4 KB pages: positions 0-1 and 3 lie in page 0, 4-5 in page 1, 7 in page 1 too.
  ClusterTable t(2);
  for (int i = 0; i < 12; ++i) {
    const float k[2] = {static_cast<float>(i), 0};
    t.append_key(k);
  }
  FlashLayout f(Placement::kSequence, 1024, 4096);
  f.place_initial(t);
  auto runs = f.read_runs_of({7, 0, 1, 3, 4, 5});
  // One command (pages 0-1) of six entries in three contiguous pieces: {0, 1}, {3, 4, 5}, {7}.
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].entries, 6);
  EXPECT_EQ(runs[0].pieces, 3);
  EXPECT_EQ(runs[0].longest_piece, 3);
  runs = f.read_runs_of({1, 9, 10});  // pages 0 and 2: {1} alone, {9, 10} one piece
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].pieces, 1);
  EXPECT_EQ(runs[1].pieces, 1);
  EXPECT_EQ(runs[1].longest_piece, 2);
  // Any order gives the same runs, and a position asked for twice counts twice, as before the
  // linear (bitmap) sort: {3, 3, 4} is one page run of three entries in two pieces ({3}, {3, 4}).
  for (const std::vector<int>& asked : {std::vector<int>{3, 3, 4}, std::vector<int>{4, 3, 3}}) {
    runs = f.read_runs_of(asked);
    ASSERT_EQ(runs.size(), 1u);  // 3 in page 0, 4 in page 1: one run of two pages
    EXPECT_EQ(runs[0].bytes, 2 * 4096);
    EXPECT_EQ(runs[0].entries, 3);
    EXPECT_EQ(runs[0].pieces, 2);
    EXPECT_EQ(runs[0].longest_piece, 2);
  }
}

TEST(KvClusterFlash, UnmergedReadsIssueOneCommandPerContiguousPieceByHand) {
  ClusterTable t(2);
  for (int i = 0; i < 12; ++i) {
    const float k[2] = {static_cast<float>(i), 0};
    t.append_key(k);
  }
  FlashLayout f(Placement::kSequence, 1024, 4096, 8, ReadMerge::kContiguousPieces);
  f.place_initial(t);
  // {0, 1} in page 0, {3, 4, 5} across pages 0-1, {7} in page 1: three commands, page 0 and
  // page 1 each read twice (5 pages where merged page runs read 2 in one command).
  const auto runs = f.read_runs_of({7, 0, 1, 3, 4, 5});
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].offset_bytes, 0);
  EXPECT_EQ(runs[0].bytes, 4096);
  EXPECT_EQ(runs[0].entries, 2);
  EXPECT_EQ(runs[1].offset_bytes, 0);
  EXPECT_EQ(runs[1].bytes, 8192);
  EXPECT_EQ(runs[1].entries, 3);
  EXPECT_EQ(runs[2].offset_bytes, 4096);
  EXPECT_EQ(runs[2].bytes, 4096);
  EXPECT_EQ(runs[2].entries, 1);
  EXPECT_THROW(read_merge_from_string("pages"), ConfigError);
}

TEST(KvClusterFlash, DualHeadClustersGrowInwardFromBothEnds) {
  ClusterTable t(1);
  for (int i = 0; i < 6; ++i) {
    const float k[1] = {static_cast<float>(i < 3 ? 0 : 100)};
    t.append_key(k);
  }
  const int a = t.make_cluster({0, 1, 2}), b = t.make_cluster({3, 4, 5});
  FlashLayout f(Placement::kIntraCluster, 512, 4096);
  f.place_initial(t);
  // One pool of 2 x 3 entries: a at slots 0..2, b at slots 5, 4, 3.
  EXPECT_EQ(f.stats().pools, 1);
  EXPECT_EQ(f.offset_of(0), 0);
  EXPECT_EQ(f.offset_of(2), 2 * 512);
  EXPECT_EQ(f.offset_of(3), 5 * 512);
  EXPECT_EQ(f.offset_of(5), 3 * 512);
  // The pool is full: both clusters read in one command.
  EXPECT_EQ(f.read_runs(t, {a, b}).size(), 1u);
  f.check_invariants(t);
  // Appending to a full pool moves the cluster to a new pool (3 entries moved).
  const float k[1] = {1};
  t.add_entry(a, t.append_key(k));
  f.sync(t);
  f.check_invariants(t);
  EXPECT_EQ(f.stats().moved_bytes, 3 * 512);
  EXPECT_EQ(f.stats().pools, 2);
}

// Runs a policy over a drifting stream with the layout kept in sync, checking
// after every step that no pool overlaps and every flash entry reads back at
// its recorded offset.
void run_with_layout(const std::string& policy_yaml, Placement placement, int hot_buffers, FlashStats* stats) {
  auto p = make(policy_yaml);
  DriftingKeys gen(8, 4, 17);
  ClusterTable t(8);
  p->prefill(t, gen.block(128));
  FlashLayout f(placement, 256, 4096, hot_buffers);
  f.place_initial(t, co_retrieval_counts(t, random_queries(32, 8, 17), p->top_k()));
  sim::Rng qrng(17, 1, "test/kvcluster", "queries");
  for (int s = 0; s < 800; ++s) {
    const auto q = random_query(qrng, 8);
    const auto out = p->decode_step(t, q.data(), gen.next(0.1, s, 100).data());
    f.sync(t, out);
    f.check_invariants(t);
    t.check_invariants();
  }
  for (int pos = 0; pos < t.n_entries(); ++pos) {
    if (t.residence(pos) == Residence::kBuffer || t.cluster(t.cluster_of(pos)).local_window) continue;
    ASSERT_TRUE(f.placed(pos)) << "position " << pos << " never reached flash";
    EXPECT_TRUE(f.content_at(f.offset_of(pos)) == pos || f.in_write_buffer(pos)) << "position " << pos;
  }
  *stats = f.stats();
}

TEST(KvClusterFlash, DualHeadPoolNeverOverlapsAndEveryEntryReadsBack) {
  FlashStats st;
  for (const char* policy : {"{impl: dynakv, top_k: 2, tokens_per_cluster: 8, tau_scale: 1.2}",
                             "{impl: pqcache, top_k: 2, tokens_per_cluster: 8}",
                             "{impl: clusterkv, top_k: 2, tokens_per_cluster: 8, window: 16}"}) {
    for (auto placement : {Placement::kIntraCluster, Placement::kInterCluster}) {
      run_with_layout(policy, placement, 4, &st);
      EXPECT_GT(st.logical_write_bytes, 0) << policy;
    }
  }
  run_with_layout("{impl: pqcache, top_k: 2}", Placement::kSequence, 4, &st);
}

TEST(KvClusterFlash, PageBufferRemovesWriteAmplificationAndDualHeadAvoidsPermutation) {
  FlashStats cold, hot;
  run_with_layout("{impl: pqcache, top_k: 2, tokens_per_cluster: 8}", Placement::kIntraCluster, 0, &cold);
  run_with_layout("{impl: pqcache, top_k: 2, tokens_per_cluster: 8}", Placement::kIntraCluster, 64, &hot);
  // Cold appends program a whole 4 KB page per 256 B entry (16x); buffered appends far less.
  EXPECT_GE(cold.physical_write_bytes - hot.physical_write_bytes, 800 * (4096 - 256) / 2);
  EXPECT_LT(hot.physical_write_bytes, 3 * hot.logical_write_bytes);
  // A packed cluster-by-cluster layout shifts later clusters on every append.
  EXPECT_GT(hot.naive_moved_bytes, 20 * std::max<std::int64_t>(hot.moved_bytes, 256));
}

TEST(KvClusterFlash, ClusterPlacementNeverIncreasesReadCommands) {
  // Keys from a mixture, positions interleaved across clusters (as a real
  // sequence is): sequence order scatters each cluster over the file.
  auto p = make("{impl: pqcache, top_k: 3, tokens_per_cluster: 16}");
  DriftingKeys gen(8, 12, 4);
  ClusterTable t(8);
  p->prefill(t, gen.block(512));
  const kernel::Mat queries = random_queries(64, 8, 4);
  const auto co = co_retrieval_counts(t, queries, p->top_k());
  FlashLayout seq(Placement::kSequence, 512, 4096), intra(Placement::kIntraCluster, 512, 4096),
      inter(Placement::kInterCluster, 512, 4096);
  seq.place_initial(t);
  intra.place_initial(t);
  inter.place_initial(t, co);
  double sum_intra = 0, sum_inter = 0, sum_seq = 0;
  for (Eigen::Index i = 0; i < queries.rows(); ++i) {
    const auto sel = t.select(queries.row(i).data(), p->top_k());
    const auto r_seq = seq.read_runs(t, sel).size(), r_intra = intra.read_runs(t, sel).size(),
               r_inter = inter.read_runs(t, sel).size();
    EXPECT_LE(r_intra, sel.size());  // each cluster is one contiguous extent
    EXPECT_LE(r_inter, sel.size());
    EXPECT_LE(r_intra, r_seq) << "query " << i;
    sum_seq += r_seq;
    sum_intra += r_intra;
    sum_inter += r_inter;
  }
  // Co-retrieved clusters adjacent: fewer commands on the queries that built the matrix.
  EXPECT_LE(sum_inter, sum_intra);
  EXPECT_LT(sum_intra, sum_seq);
}

TEST(KvClusterFlash, ReadingClustersEqualsReadingTheirPositions) {
  // read_runs_of_entries marks the clusters' slots directly; it must give exactly the runs of the
  // list of their positions (members and buffered), in every placement and merge, including the
  // sorting fallback (entry bytes not a power of two) and pending splits' buffered entries.
  // Every policy: the cluster placements read each cluster's list of offsets, which must follow
  // splits (DynaKV), appends (PQCache) and regrouped windows (ClusterKV) alike.
  for (const char* policy : {"{impl: dynakv, top_k: 4, tokens_per_cluster: 16}",
                             "{impl: pqcache, top_k: 4, tokens_per_cluster: 16}",
                             "{impl: clusterkv, top_k: 4, tokens_per_cluster: 16, window: 16}"}) {
    auto p = make(policy);
    for (auto [placement, entry, merge] :
         {std::tuple{Placement::kInterCluster, std::int64_t{256}, ReadMerge::kPageRuns},
          std::tuple{Placement::kIntraCluster, std::int64_t{512}, ReadMerge::kPageRuns},
          std::tuple{Placement::kSequence, std::int64_t{384}, ReadMerge::kPageRuns},
          std::tuple{Placement::kInterCluster, std::int64_t{256}, ReadMerge::kContiguousPieces}}) {
      DriftingKeys gen(8, 12, 7);
      ClusterTable t(8);
      p->prefill(t, gen.block(256));
      FlashLayout f(placement, entry, 4096, 8, merge);
      f.place_initial(t);
      sim::Rng rng(9, 0, "test/kvcluster", "reads");
      for (int step = 0; step < 300; ++step) {
        const auto q = random_query(rng, 8);
        const auto k = gen.next(0.05, step, 64);
        const StepOutcome out = p->decode_step(t, q.data(), k.data());
        f.sync(t, out);
        std::vector<int> clusters;
        for (int c = 0; c < static_cast<int>(t.clusters().size()); ++c)
          if (t.cluster(c).alive && rng.bernoulli(step % 50 == 49 ? 0.95 : 0.2)) clusters.push_back(c);
        rng.shuffle(clusters);
        const auto got = f.read_runs_of_entries(t, clusters);
        const auto want = f.read_runs_of(t.positions_of(clusters));
        // Every field of every run (ReadRun's operator==).
        ASSERT_EQ(got.size(), want.size()) << policy << " step " << step;
        EXPECT_TRUE(got == want) << policy << " step " << step;
      }
    }
  }
}

}  // namespace
}  // namespace mobisim::policies::kvcluster
