// Oracles 2-8 on a synthetic model written by the test (fixed seed) and on
// stories260K when present, plus the hooks' own invariants.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "models/kernel/checkpoint.h"
#include "models/kernel/drafters.h"
#include "models/kernel/kmeans.h"
#include "models/kernel/oracles.h"
#include "models/kernel/transformer.h"
#include "sim/error.h"
#include "sim/rng.h"
#include "test_kernel_util.h"

namespace mobisim::kernel {
namespace {

using testing::TempFile;

// The synthetic model goes through a file, as a user's would.
Model synthetic_from_file() {
  TempFile f(".bin");
  write_llama2c(f.path, testing::tiny_llama(7));
  return load_llama2c(f.path);
}

void expect_rows_pass(const std::vector<OracleRow>& rows) {
  for (const auto& r : rows) EXPECT_TRUE(!r.must_pass || r.pass) << r.id << " " << r.compared << " = " << r.value;
}

Mat logits_all(const Model& m, KVCache& cache, const std::vector<int>& toks, const ForwardOptions* base = nullptr) {
  RunState st;
  ForwardOptions o = base ? *base : ForwardOptions{};
  o.logits = Logits::kAll;
  return forward(m, cache, st, toks, o);
}

TEST(KernelOracles, Oracle2PrefixReuseSynthetic) {
  const Model m = synthetic_from_file();
  const auto seq = sample_sequence(m, 80, 3);
  KVCache full(m.config);
  const Mat ref = logits_all(m, full, seq);
  for (int p : {1, 17, 40, 79}) {
    KVCache c = cache_with_prefix(m, full, p);
    const Mat got = logits_all(m, c, std::vector<int>(seq.begin() + p, seq.end()));
    EXPECT_LT((got - ref.bottomRows(seq.size() - p)).cwiseAbs().maxCoeff(), 1e-4f) << "p=" << p;
  }
  const auto row = oracle_prefix_reuse(m, seq);
  EXPECT_TRUE(row.pass) << row.value;
}

TEST(KernelOracles, Oracle3PerCacheOffsetMatchesAndWithoutOffsetDoesNot) {
  const Model m = synthetic_from_file();
  const auto seq = sample_sequence(m, 64, 4);
  KVCache full(m.config);
  const Mat ref = logits_all(m, full, seq);
  // QKV of the first 40 positions from a request that continued differently, sliced per chunk.
  std::vector<int> other(seq.begin(), seq.begin() + 40);
  for (int i = 0; i < 10; ++i) other.push_back((i * 37) % m.config.vocab_size);
  Capture cap;
  {
    KVCache c(m.config);
    ForwardOptions o;
    o.capture = &cap;
    logits_all(m, c, other, &o);
  }
  ASSERT_EQ(cap.rows(), 50);
  // Slicing per chunk then concatenating gives back the span.
  const Capture qkv = cap.slice(0, 25).concat(cap.slice(25, 40));
  ASSERT_EQ(qkv.rows(), 40);
  EXPECT_EQ((qkv.k[2] - cap.k[2].topRows(40)).cwiseAbs().maxCoeff(), 0.0f);

  for (bool offset : {true, false}) {
    KVCache c(m.config);
    FlopCounter fl;
    ForwardOptions o;
    o.reuse = &qkv;
    o.rope_offset = offset;
    o.flops = &fl;
    const float d = (logits_all(m, c, seq, &o) - ref).cwiseAbs().maxCoeff();
    if (offset) {
      EXPECT_LT(d, 1e-4f);
    } else {
      EXPECT_GT(d, 1e-2f) << "without the RoPE offset the reuse must NOT reproduce the full prefill";
    }
    // Only the 24 fresh positions were projected.
    EXPECT_EQ(fl.of(models::OpKind::kQProj), 2.0 * 24 * m.config.dim * m.config.q_dim() * m.config.n_layers);
  }
  const auto rows = oracle_percache(m, seq, 5);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].pass);
  EXPECT_TRUE(rows[1].pass);
}

TEST(KernelOracles, Oracle3CaptureSpanMatchesFullCapture) {
  const Model m = testing::tiny_qwen();
  const auto seq = sample_sequence(m, 30, 5);
  Capture all, span;
  KVCache a(m.config), b(m.config);
  ForwardOptions o1, o2;
  o1.capture = &all;
  o2.capture = &span;
  o2.capture_from = 7;
  o2.capture_to = 19;
  logits_all(m, a, seq, &o1);
  logits_all(m, b, seq, &o2);
  EXPECT_EQ(span.begin, 7);
  EXPECT_EQ(span.rows(), 12);
  const Capture s = all.slice(7, 19);
  for (int l = 0; l < m.config.n_layers; ++l) {
    EXPECT_EQ(s.q[l], span.q[l]);
    EXPECT_EQ(s.hidden[l], span.hidden[l]);
    // Captured K/V are what the cache holds.
    EXPECT_EQ(Mat(a.k[l].middleRows(7, 12)), span.k[l]);
  }
  EXPECT_THROW(all.slice(5, 40), InputError);
}

TEST(KernelOracles, Oracle4NonPrefixReuseIsReportedNotExact) {
  const Model m = synthetic_from_file();
  const auto rows = oracle_nonprefix(m, 9);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_GT(rows[0].value, 1e-4) << "K/V computed under another context cannot be exact";
  EXPECT_GE(rows[1].value, 0.0);
  EXPECT_LE(rows[1].value, 1.0);
  EXPECT_FALSE(rows[0].must_pass);
}

TEST(KernelOracles, Oracle5TokenizationAtChunkBoundaries) {
  MOBISIM_REQUIRE_FILE(testing::tokenizer_path());
  MOBISIM_REQUIRE_FILE(testing::qmsum_dir());
  const auto rows = oracle_tokenization(testing::tokenizer_path(), testing::qmsum_dir(), 60, 7);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_GT(rows[0].value, 0.0) << "separate tokenization must differ somewhere, or the measures prove nothing";
  EXPECT_EQ(rows[1].value, 0.0);
  EXPECT_TRUE(rows[2].pass) << rows[2].value;
}

TEST(KernelOracles, Oracle5SkipsCleanlyWithoutData) {
  const auto rows = oracle_tokenization("/nonexistent/tok.model", "/nonexistent", 10, 1);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].skipped);
}

TEST(KernelOracles, Oracle6KvprEverySplitAndCakeOrder) {
  const Model m = testing::tiny_qwen();
  const auto seq = sample_sequence(m, 48, 6);
  Capture store;
  KVCache full(m.config);
  {
    ForwardOptions o;
    o.capture = &store;
    logits_all(m, full, seq, &o);
  }
  for (int l = 0; l <= 48; ++l) {
    FlopCounter fl;
    const KVCache c = kvpr_assemble(m, store, l, &fl);
    for (int layer = 0; layer < m.config.n_layers; ++layer) {
      ASSERT_LT((c.k[layer].topRows(48) - full.k[layer].topRows(48)).cwiseAbs().maxCoeff(), 1e-5f) << l;
      ASSERT_LT((c.v[layer].topRows(48) - full.v[layer].topRows(48)).cwiseAbs().maxCoeff(), 1e-5f) << l;
    }
    // Work is proportional to the recomputed part only.
    EXPECT_EQ(fl.of(models::OpKind::kKProj),
              (2.0 * m.config.dim + 1.0) * m.config.kv_dim() * l * m.config.n_layers);
  }
  // A wrong split (hidden states of the wrong layer) is detected: the oracle can fail.
  Capture wrong = store;
  std::swap(wrong.hidden[0], wrong.hidden[1]);
  const KVCache bad = kvpr_assemble(m, wrong, 48);
  EXPECT_GT((bad.k[0].topRows(48) - full.k[0].topRows(48)).cwiseAbs().maxCoeff(), 1e-2f);

  // Cake: compute from the front, load from the back, meet once.
  for (auto [tc, tl] : std::vector<std::pair<double, double>>{{1, 1}, {1, 4}, {4, 1}, {2, 3}}) {
    const auto plan = cake_order(10, tc, tl);
    const auto first_load = std::find(plan.begin(), plan.end(), false);
    EXPECT_TRUE(std::all_of(first_load, plan.end(), [](bool b) { return !b; }));
    const int computed = static_cast<int>(first_load - plan.begin());
    EXPECT_GE(computed, 1);  // ties go to compute, which starts first
    const KVCache c = cake_assemble(m, store, 5, plan);
    for (int layer = 0; layer < m.config.n_layers; ++layer)
      ASSERT_LT((c.k[layer].topRows(48) - full.k[layer].topRows(48)).cwiseAbs().maxCoeff(), 1e-5f);
  }
  // Equal speeds split evenly; compute 4x slower takes a fifth.
  const auto even = cake_order(10, 1, 1);
  EXPECT_EQ(std::count(even.begin(), even.end(), true), 5);
  const auto slow = cake_order(10, 4, 1);
  EXPECT_EQ(std::count(slow.begin(), slow.end(), true), 2);
  expect_rows_pass(oracle_kvpr_cake(m, seq));
}

TEST(KernelOracles, Oracle7EveryDrafterGivesPlainGreedyOutput) {
  const Model m = synthetic_from_file();
  const auto rows = oracle_speculative(m, 100, 3);
  EXPECT_EQ(rows.size(), 6u);
  expect_rows_pass(rows);
  // The replay drafter mostly proposes the right continuation: acceptance must show it.
  const auto ref = generate_greedy(m, std::vector<int>{1}, 100);
  ReplayDrafter replay(ref, m.config.vocab_size, 0.0, 1);
  SpeculativeStats st;
  EXPECT_EQ(speculative_greedy(m, std::vector<int>{1}, 100, replay, 5, &st), ref);
  EXPECT_GT(st.accepted_per_step(), 3.5);
}

TEST(KernelOracles, Oracle7TreeVerificationCompactsCacheLikePlainDecoding) {
  const Model m = testing::tiny_qwen();
  const std::vector<int> prompt = {1, 5, 9, 77, 120, 3};
  const auto ref = generate_greedy(m, prompt, 6);
  KVCache c(m.config);
  RunState st;
  int pending = argmax(forward(m, c, st, prompt).data(), m.config.vocab_size);
  ASSERT_EQ(pending, ref[6]);
  // Tree: a wrong first branch (sibling), then the right path with a wrong sibling at depth 2.
  DraftTree t;
  t.tokens = {(ref[7] + 1) % m.config.vocab_size, ref[7], (ref[8] + 3) % m.config.vocab_size, ref[8], ref[9]};
  t.parents = {-1, -1, 1, 1, 3};
  FlopCounter fl;
  const auto r = verify_draft(m, c, st, pending, t, &fl);
  EXPECT_EQ(r.accepted, (std::vector<int>{ref[7], ref[8], ref[9]}));
  EXPECT_EQ(r.bonus, ref[10]);
  EXPECT_EQ(c.length, 10);
  // The compacted cache continues exactly like plain decoding.
  KVCache plain(m.config);
  RunState st2;
  forward(m, plain, st2, std::vector<int>(ref.begin(), ref.begin() + 10));
  for (int l = 0; l < m.config.n_layers; ++l)
    EXPECT_LT((c.k[l].topRows(10) - plain.k[l].topRows(10)).cwiseAbs().maxCoeff(), 1e-5f);
  // Cost-model shape: 6 rows fed, tree pairs = sum of (depth + 1).
  EXPECT_EQ(r.fed, 6);
  EXPECT_EQ(r.draft_pairs, 1 + 2 + 2 + 3 + 3 + 4);
}

TEST(KernelOracles, DraftersProposeWhatTheyShould) {
  const std::vector<int> ctx = {5, 6, 7, 8, 9, 1, 2, 5, 6, 7};
  PromptLookupDrafter pld;
  EXPECT_EQ(pld.propose(ctx, 3).tokens, (std::vector<int>{8, 9, 1}));
  SuffixAutomatonDrafter sam;
  EXPECT_EQ(sam.propose(ctx, 3).tokens, (std::vector<int>{8, 9, 1}));
  EXPECT_EQ(sam.last_match_length(), 3);
  // Incremental extension: the context grows, the latest earlier occurrence is used.
  std::vector<int> ctx2 = ctx;
  for (int t : {8, 4, 5, 6, 7}) ctx2.push_back(t);
  EXPECT_EQ(sam.propose(ctx2, 2).tokens, (std::vector<int>{8, 4}));
  EXPECT_EQ(sam.last_match_length(), 3);  // "5 6 7", most recently at positions 7..9
  EXPECT_TRUE(sam.propose(std::vector<int>{1, 2, 3}, 4).tokens.empty());
  RandomDrafter tree(100, 3, 2);
  const auto t = tree.propose(ctx, 7);
  EXPECT_EQ(t.parents, (std::vector<int>{-1, -1, 0, 0, 1, 1, 2}));
}

TEST(KernelOracles, Oracle8ClusterRetrievalReportsMassAndError) {
  const Model m = synthetic_from_file();
  const auto rows = oracle_cluster_retrieval(m, 200, 5);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_GT(rows[0].value, 0.0);
  EXPECT_LE(rows[0].value, 1.0 + 1e-9);
  EXPECT_GE(rows[1].value, 0.0);
}

TEST(KernelOracles, SubsetAttentionWithAllPositionsIsFullAttention) {
  const Model m = testing::tiny_llama();
  const auto seq = sample_sequence(m, 40, 8);
  KVCache a(m.config), b(m.config);
  RunState s1, s2;
  forward(m, a, s1, std::vector<int>(seq.begin(), seq.end() - 1));
  forward(m, b, s2, std::vector<int>(seq.begin(), seq.end() - 1));
  SubsetStats all_stats, half_stats;
  ForwardOptions o;
  o.subset_stats = &all_stats;
  o.kv_selector = [](int, int, const float*, int n) {
    std::vector<int> v(n);
    for (int i = 0; i < n; ++i) v[i] = i;
    return v;
  };
  const int last[1] = {seq.back()};
  const Mat full = forward(m, a, s1, last, o);
  for (double x : all_stats.mass) EXPECT_NEAR(x, 1.0, 1e-5);
  for (double x : all_stats.rel_error) EXPECT_LT(x, 1e-5);
  ForwardOptions h;
  h.subset_stats = &half_stats;
  h.kv_selector = [](int, int, const float*, int n) {
    std::vector<int> v;
    for (int i = 0; i < n; i += 2) v.push_back(i);
    return v;
  };
  forward(m, b, s2, last, h);
  double mass = 0;
  for (double x : half_stats.mass) mass += x;
  EXPECT_LT(mass / half_stats.mass.size(), 0.999);
  EXPECT_EQ(half_stats.attended[0], 21);  // 39 cached -> 20 even positions, plus itself
}

TEST(KernelOracles, TreeAttentionIsBitIdenticalToThePerHeadPath) {
  // Draft verification takes a lane-blocked path (tree_attention); a selector returning every
  // cached position sends the same tree through the per-(row, head) attend loop, whose key order
  // and arithmetic the fast path must reproduce exactly: the logits must be equal bit for bit.
  for (const Model& m : {testing::tiny_llama(), testing::tiny_qwen()}) {
    const auto seq = sample_sequence(m, 37, 5);
    for (const std::vector<int>& parents : {std::vector<int>{-1}, std::vector<int>{-1, 0, 0, 1, 2, 2, 5, -1, 7},
                                             std::vector<int>{-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}) {
      std::vector<int> chunk;
      for (std::size_t i = 0; i < parents.size(); ++i) chunk.push_back(seq[(i * 7) % seq.size()]);
      KVCache a(m.config), b(m.config);
      RunState s1, s2;
      forward(m, a, s1, seq);
      forward(m, b, s2, seq);
      ForwardOptions fast, slow;
      fast.logits = slow.logits = Logits::kAll;
      fast.parents = slow.parents = parents;
      slow.kv_selector = [](int, int, const float*, int n) {
        std::vector<int> v(n);
        for (int i = 0; i < n; ++i) v[i] = i;
        return v;
      };
      const Mat x = forward(m, a, s1, chunk, fast);
      const Mat y = forward(m, b, s2, chunk, slow);
      ASSERT_EQ(x.rows(), static_cast<Eigen::Index>(parents.size()));
      for (Eigen::Index r = 0; r < x.rows(); ++r)
        for (Eigen::Index v = 0; v < x.cols(); ++v) ASSERT_EQ(x(r, v), y(r, v)) << m.source << " row " << r;
      for (int l = 0; l < m.config.n_layers; ++l) EXPECT_TRUE(a.k[l] == b.k[l] && a.v[l] == b.v[l]);
    }
  }
}

TEST(KernelOracles, KMeansSeparatesObviousClusters) {
  Mat pts(60, 2);
  sim::Rng rng(3);
  for (int i = 0; i < 60; ++i) {
    const float cx = static_cast<float>((i % 3) * 10);
    pts(i, 0) = cx + static_cast<float>(rng.normal(0, 0.3));
    pts(i, 1) = static_cast<float>(rng.normal(0, 0.3));
  }
  const KMeans km = kmeans(pts, 3, 50, 1);
  for (int i = 3; i < 60; ++i) EXPECT_EQ(km.assign[i], km.assign[i % 3]);
  const float q[2] = {1.0f, 0.0f};
  EXPECT_EQ(select_by_clusters(km, q, 10).size(), 20u);  // the whole x~20 cluster
  const auto top = select_top_k(pts, q, 5);
  for (int p : top) EXPECT_EQ(p % 3, 2);
}

TEST(KernelOracles, Stories260KAllOraclesPass) {
  MOBISIM_REQUIRE_FILE(testing::stories_path());
  const Model m = load_llama2c(testing::stories_path());
  OracleOptions o;
  o.expected_greedy = {461, 461, 401, 401, 401, 461, 378, 455, 473, 456, 435, 299};
  o.tokenizer_path = testing::tokenizer_path();
  o.qmsum_dir = testing::qmsum_dir();
  o.tokenization_pairs = 60;
  const auto rows = run_all_oracles(m, o);
  expect_rows_pass(rows);
  EXPECT_GE(rows.size(), 18u);
}

TEST(KernelOracles, SyntheticAllOraclesPass) {
  const Model m = synthetic_from_file();
  OracleOptions o;
  o.long_tokens = 200;
  o.tokenization_pairs = 30;
  o.tokenizer_path = testing::tokenizer_path();
  o.qmsum_dir = testing::qmsum_dir();
  expect_rows_pass(run_all_oracles(m, o));
}

}  // namespace
}  // namespace mobisim::kernel
