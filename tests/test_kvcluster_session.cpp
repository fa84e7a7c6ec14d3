// KV decode sessions (traces/kv_session.h): real capture, drifting generator,
// HDF5 round trip and bad input; policies replayed over both sources.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "models/kernel/checkpoint.h"
#include "models/kernel/oracles.h"
#include "policies/kvcluster/kv_cluster.h"
#include "policies/kvcluster/session_replay.h"
#include "policies/kvcluster/session_stats.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "test_kernel_util.h"
#include "test_kvcluster_util.h"
#include "traces/kv_session.h"

namespace mobisim::traces {
namespace {

using policies::kvcluster::ClusterTable;
using policies::kvcluster::testing::make;

DriftingSpec small_spec() {
  DriftingSpec s;
  s.n_layers = 2;
  s.n_kv_heads = 2;
  s.group = 2;
  s.head_dim = 8;
  s.prefill = 64;
  s.decode = 300;
  s.birth_every = 50;
  return s;
}

TEST(KvSession, DriftingGeneratorIsDeterministicAndShaped) {
  const auto a = generate_drifting_session(small_spec());
  const auto b = generate_drifting_session(small_spec());
  EXPECT_EQ(a.tables(), 4);
  EXPECT_EQ(a.queries.size(), 8u);
  EXPECT_EQ(a.keys[3].rows(), 364);
  EXPECT_TRUE(a.keys[3] == b.keys[3]);
  EXPECT_TRUE(a.queries[7] == b.queries[7]);
  auto spec = small_spec();
  spec.seed = 2;
  EXPECT_FALSE(generate_drifting_session(spec).keys[0] == a.keys[0]);
  spec.p_recent = 1.5;
  EXPECT_THROW(generate_drifting_session(spec), ConfigError);
}

// Query heads (traces/kv_session.h): without noise or drift a query is exactly its centre, so a head
// that always keeps its centre (persistence 1) repeats one query, heads that always follow the first
// head (correlation 1) repeat its queries, and neither key changes the keys (their own stream).
TEST(KvSession, QueryHeadsPersistAndFollowTheirGroupsFirstHead) {
  auto spec = small_spec();
  spec.group = 3;
  spec.query_noise = 0;
  spec.drift_per_step = 0;
  spec.query_gain = 1;
  const auto free_heads = generate_drifting_session(spec);
  auto follow = spec;
  follow.query_head_correlation = 1;
  const auto followers = generate_drifting_session(follow);
  auto persist = spec;
  persist.query_persistence = 1;
  const auto persistent = generate_drifting_session(persist);
  auto single = spec;
  single.group = 1;
  const auto one_head = generate_drifting_session(single);
  for (int i = 0; i < free_heads.tables(); ++i) {
    EXPECT_TRUE(free_heads.keys[i] == followers.keys[i]) << i;
    EXPECT_TRUE(free_heads.keys[i] == persistent.keys[i]) << i;
    EXPECT_TRUE(free_heads.keys[i] == one_head.keys[i]) << i;
  }
  auto changes = [](const kernel::Mat& q) {
    int n = 0;
    for (Eigen::Index t = 1; t < q.rows(); ++t) n += !(q.row(t) == q.row(t - 1));
    return n;
  };
  for (int table = 0; table < free_heads.tables(); ++table) {
    const std::size_t first = static_cast<std::size_t>(table) * 3;  // layer-major, 3 heads per KV head
    for (int g = 1; g < 3; ++g) {
      EXPECT_TRUE(followers.queries[first + g] == followers.queries[first]) << table << "/" << g;
      EXPECT_FALSE(free_heads.queries[first + g] == free_heads.queries[first]) << table << "/" << g;
    }
    for (int g = 0; g < 3; ++g) {
      EXPECT_EQ(changes(persistent.queries[first + g]), 0) << table << "/" << g;
      EXPECT_GT(changes(free_heads.queries[first + g]), 100) << table << "/" << g;  // 300 steps, ~16-22 centres
    }
  }
  persist.query_persistence = 1.5;
  EXPECT_THROW(generate_drifting_session(persist), ConfigError);
}

TEST(KvSession, Hdf5RoundTripIsExact) {
  kernel::testing::TempFile f(".h5");
  const auto a = generate_drifting_session(small_spec());
  write_kv_session(a, f.path);
  const auto b = read_kv_session(f.path);
  EXPECT_EQ(b.source, a.source);
  EXPECT_EQ(b.prefill, 64);
  EXPECT_EQ(b.decode, 300);
  EXPECT_EQ(b.n_heads, 4);
  for (int i = 0; i < a.tables(); ++i) {
    EXPECT_TRUE(a.keys[i] == b.keys[i]);
    EXPECT_TRUE(a.values[i] == b.values[i]);
  }
  for (std::size_t i = 0; i < a.queries.size(); ++i) EXPECT_TRUE(a.queries[i] == b.queries[i]);
}

TEST(KvSession, WrongShapesAndFormatsAreInputErrors) {
  kernel::testing::TempFile f(".h5");
  EXPECT_THROW(read_kv_session(f.path + ".missing"), InputError);
  {
    // A session whose first key table is one row short.
    h5::Writer w(f.path);
    auto root = w.root();
    h5::write_attr(root, "format", "mobisim-kv-session");
    h5::write_attr(root, "schema_version", std::int64_t{1});
    h5::write_attr(root, "source", "hand");
    for (const char* a : {"n_layers", "n_kv_heads", "n_heads"}) h5::write_attr(root, a, std::int64_t{1});
    h5::write_attr(root, "head_dim", std::int64_t{2});
    h5::write_attr(root, "prefill", std::int64_t{3});
    h5::write_attr(root, "decode", std::int64_t{1});
    h5::write_matrix(w.group("keys"), "t00000", std::vector<float>(6, 0.f), 3, 2);
    h5::write_matrix(w.group("values"), "t00000", std::vector<float>(8, 0.f), 4, 2);
    h5::write_matrix(w.group("queries"), "q00000", std::vector<float>(2, 0.f), 1, 2);
    w.commit();
  }
  try {
    read_kv_session(f.path);
    FAIL() << "a short key table was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("keys/t00000 has shape [3, 2], expected [4, 2]"), std::string::npos)
        << e.what();
  }
  {
    h5::Writer w(f.path);
    h5::write_attr(w.root(), "format", "mobisim-chat-trace");
    w.commit();
  }
  EXPECT_THROW(read_kv_session(f.path), InputError);
}

TEST(KvSession, CaptureMatchesStepByStepDecoding) {
  const auto m = kernel::testing::tiny_llama();
  const auto tokens = kernel::sample_sequence(m, 60, 4);
  const auto s = capture_kv_session(m, tokens, 40);
  EXPECT_EQ(s.decode, 20);
  // The keys a step-by-step decode leaves in its cache.
  kernel::KVCache cache(m.config);
  kernel::RunState st;
  for (int t : tokens) kernel::forward_token(m, cache, st, t);
  const int hd = m.config.head_dim;
  for (int l = 0; l < m.config.n_layers; ++l)
    for (int h = 0; h < m.config.n_kv_heads; ++h) {
      const kernel::Mat ref = cache.k[l].block(0, h * hd, 60, hd);
      EXPECT_LT((s.keys[l * m.config.n_kv_heads + h] - ref).cwiseAbs().maxCoeff(), 1e-5);
    }
  EXPECT_THROW(capture_kv_session(m, tokens, 0), InputError);
}

// Replays a policy over one session, returning the size-weighted mean cluster variance (Table 5).
double replay_variance(const KvSession& s, const std::string& policy_yaml) {
  auto p = make(policy_yaml);
  double sum = 0;
  for (int tab = 0; tab < s.tables(); ++tab) {
    ClusterTable t(s.head_dim, tab);
    p->prefill(t, s.keys[tab].topRows(s.prefill));
    const int layer = tab / s.n_kv_heads, kvh = tab % s.n_kv_heads;
    const auto& q = s.queries[layer * s.n_heads + kvh * (s.n_heads / s.n_kv_heads)];
    for (int step = 0; step < s.decode; ++step)
      p->decode_step(t, q.row(step).data(), s.keys[tab].row(s.prefill + step).data());
    t.check_invariants();
    sum += t.mean_variance();
  }
  return sum / s.tables();
}

TEST(KvSession, DynaKvVarianceBelowStaticUpdateOnTheDriftingGenerator) {
  const auto s = generate_drifting_session(small_spec());
  const double pq = replay_variance(s, "{impl: pqcache, tokens_per_cluster: 8}");
  const double dk = replay_variance(s, "{impl: dynakv, tokens_per_cluster: 8}");
  EXPECT_LT(dk, pq);
}

TEST(KvSession, DynaKvVarianceBelowStaticUpdateOnStories260k) {
  MOBISIM_REQUIRE_FILE(kernel::testing::stories_path());
  const auto m = kernel::load_model(kernel::testing::stories_path());
  const auto tokens = kernel::sample_sequence(m, m.config.seq_len, 11);
  const auto s = capture_kv_session(m, tokens, 64);  // long decode after a short prefill
  const double pq = replay_variance(s, "{impl: pqcache, tokens_per_cluster: 8}");
  const double dk = replay_variance(s, "{impl: dynakv, tokens_per_cluster: 8}");
  RecordProperty("pqcache_variance", std::to_string(pq));
  RecordProperty("dynakv_variance", std::to_string(dk));
  EXPECT_LT(dk, pq);
}

// ---------------------------------------------------------------------------
// Calibration statistics (policies/kvcluster/session_stats.h).
// ---------------------------------------------------------------------------
TEST(KvSessionStats, ZeroQueriesAttendUniformlySoTheTopTenthHoldsItsShare) {
  auto s = generate_drifting_session(small_spec());
  for (auto& q : s.queries) q.setZero();
  const auto st = policies::kvcluster::session_stats(s, 8, 1, 1);
  // Uniform attention over n = prefill + t + 1 keys: the top ceil(n / 10) hold ceil(n / 10) / n.
  double expect = 0;
  for (int t = 0; t < s.decode; ++t) {
    const int n = s.prefill + t + 1;
    expect += std::ceil(0.1 * n) / n;
  }
  EXPECT_NEAR(st.top10_attention_mass, expect / s.decode, 1e-6);
  EXPECT_GT(st.within_over_total_variance, 0.0);
  EXPECT_LT(st.within_over_total_variance, 1.0);
}

TEST(KvSessionStats, DecodeKeysRepeatingThePrefillAreNeverMostlyNovel) {
  auto s = generate_drifting_session(small_spec());
  const auto shifted = policies::kvcluster::session_stats(s, 8, 10, 1);
  for (auto& k : s.keys)
    for (int t = 0; t < s.decode; ++t) k.row(s.prefill + t) = k.row(t % s.prefill);
  const auto still = policies::kvcluster::session_stats(s, 8, 10, 1);
  // A repeated key is no farther from its nearest centroid than from its own: at most the 5%
  // beyond the 95th-percentile radius can count as novel.
  EXPECT_LE(still.novel_key_share, 0.05 + 1e-12);
  EXPECT_GT(shifted.novel_key_share, still.novel_key_share);  // the generator's shift is seen
}

// Positional statistics: keys scored only by their first coordinate against queries e0.
void score_keys_by(traces::KvSession& s, const std::function<float(int)>& score) {
  for (auto& k : s.keys) {
    k.setZero();
    for (int p = 0; p < s.positions(); ++p) k(p, 0) = score(p);
  }
  for (auto& q : s.queries) {
    q.setZero();
    q.col(0).setOnes();
  }
}

TEST(KvSessionStats, TopTenthOfTheNewestKeysIsOneRunItsWholeLength) {
  auto s = generate_drifting_session(small_spec());
  score_keys_by(s, [](int p) { return static_cast<float>(p); });
  const auto st = policies::kvcluster::session_stats(s, 8, 1, 1);
  // Scores grow with position: the top ceil(n / 10) of n = prefill + t + 1 keys are the newest,
  // one run of ceil(n / 10) consecutive positions.
  double expect = 0;
  for (int t = 0; t < s.decode; ++t) expect += std::ceil(0.1 * (s.prefill + t + 1));
  EXPECT_NEAR(st.top10_position_run, expect / s.decode, 1e-9);
}

TEST(KvSessionStats, TopTenthOnEveryOtherPositionHasRunsOfOne) {
  auto s = generate_drifting_session(small_spec());
  // Even positions score p, odd ones -p: the top tenth are even positions, never neighbours.
  score_keys_by(s, [](int p) { return static_cast<float>(p % 2 == 0 ? p : -p); });
  const auto st = policies::kvcluster::session_stats(s, 8, 1, 1);
  EXPECT_DOUBLE_EQ(st.top10_position_run, 1.0);
}

TEST(KvSessionStats, NeighbourLiftIsZeroForAlternatingPointsAndHighForTwoBlocks) {
  auto s = generate_drifting_session(small_spec());
  // Keys alternate between two points: neighbours never share a cluster.
  score_keys_by(s, [](int p) { return p % 2 == 0 ? 1.0f : -1.0f; });
  EXPECT_DOUBLE_EQ(policies::kvcluster::session_stats(s, 8, 10, 1).neighbour_same_cluster_lift, 0.0);
  // Two blocks: the first a = prefill / 2 positions at +1, the other n - a at -1 (labels come from
  // the prefill's centroids, so the boundary lies in the prefill). All but one of the n - 1
  // neighbour pairs share a label; a shuffled order would with probability (a/n)^2 + ((n-a)/n)^2.
  const int n = s.positions(), a = s.prefill / 2;
  score_keys_by(s, [a](int p) { return p < a ? 1.0f : -1.0f; });
  const double fa = static_cast<double>(a) / n, fb = 1.0 - fa;
  const double expect = (static_cast<double>(n - 2) / (n - 1)) / (fa * fa + fb * fb);
  EXPECT_NEAR(policies::kvcluster::session_stats(s, 8, 10, 1).neighbour_same_cluster_lift, expect, 1e-12);
}

TEST(KvSession, DynaKvCapturesAtLeastPqCacheMassAtEqualTopKOnStories260k) {
  MOBISIM_REQUIRE_FILE(kernel::testing::stories_path());
  const auto m = kernel::load_model(kernel::testing::stories_path());
  const auto s = capture_kv_session(m, kernel::sample_sequence(m, m.config.seq_len, 11), 64);
  policies::kvcluster::ReplayOptions opt;
  opt.accuracy_every = 1;
  double mass[2] = {0, 0}, wanted[2] = {0, 0};
  const char* yaml[2] = {"{impl: pqcache, tokens_per_cluster: 8, top_k_percent: 10}",
                         "{impl: dynakv, tokens_per_cluster: 8, top_k_percent: 10}"};
  for (int i = 0; i < 2; ++i) {
    const auto r = policies::kvcluster::replay_session(s, *make(yaml[i]), opt);
    for (const auto& st : r.steps) {
      mass[i] += st.mass / static_cast<double>(r.steps.size());
      wanted[i] += static_cast<double>(st.attended) / static_cast<double>(r.steps.size());
    }
  }
  RecordProperty("pqcache_mass", std::to_string(mass[0]));
  RecordProperty("dynakv_mass", std::to_string(mass[1]));
  // Equal I/O: both retrieve clusters until 10% of the cache is covered (within a cluster's overshoot).
  EXPECT_NEAR(wanted[1] / wanted[0], 1.0, 0.15);
  EXPECT_GE(mass[1], mass[0]);
}

}  // namespace
}  // namespace mobisim::traces
