// The synthetic generator: determinism, config validation and the calibrated
// statistics (PerCache figures 3, 5 and 6).
#include <gtest/gtest.h>

#include <numeric>

#include "sim/atomic_file.h"
#include "sim/error.h"
#include "sim/params.h"
#include "test_traces_util.h"
#include "traces/generator.h"
#include "traces/rag_trace_io.h"
#include "traces/stats.h"

using namespace mobisim;
using namespace mobisim::traces;

namespace {
const std::string kDefaultConfig = std::string(MOBISIM_SOURCE_DIR) + "/configs/workloads/rag_default.yaml";

RagTrace generate(std::vector<std::string> overrides, std::optional<std::uint64_t> seed = std::nullopt) {
  YAML::Node root = load_yaml_file(kDefaultConfig);
  for (const auto& o : overrides) apply_override(root, o);
  return generate_rag_trace_from_yaml(root, kDefaultConfig, seed);
}

double frac_at_least(const std::vector<double>& v, double x) {
  return static_cast<double>(std::count_if(v.begin(), v.end(), [&](double y) { return y >= x - 1e-12; })) /
         static_cast<double>(v.size());
}
}  // namespace

TEST(Generator, SameConfigAndSeedGiveIdenticalBytes) {
  const std::string dir = trace_testing::temp_dir("gen");
  write_rag_trace(dir + "/a.h5", generate({"users=2", "queries.per_user=6"}));
  write_rag_trace(dir + "/b.h5", generate({"users=2", "queries.per_user=6"}));
  write_rag_trace(dir + "/c.h5", generate({"users=2", "queries.per_user=6"}, 2));
  EXPECT_EQ(read_file(dir + "/a.h5"), read_file(dir + "/b.h5"));
  EXPECT_NE(read_file(dir + "/a.h5"), read_file(dir + "/c.h5"));
  // Adding users leaves earlier users unchanged (per-user random streams).
  const RagTrace two = generate({"users=2", "queries.per_user=6"});
  const RagTrace three = generate({"users=3", "queries.per_user=6"});
  EXPECT_EQ(two.users[1].queries[3].text, three.users[1].queries[3].text);
  EXPECT_EQ(two.users[1].chunks[7].text, three.users[1].chunks[7].text);
}

TEST(Generator, UnknownOrInvalidKeysAreConfigErrors) {
  EXPECT_THROW(generate({"queries.paraphrase_probability=0.2"}), ConfigError);
  EXPECT_THROW(generate({"knowledge.chunks_per_user=0"}), ConfigError);
  EXPECT_THROW(generate({"retrieval.mode=fuzzy"}), ConfigError);
  EXPECT_THROW(generate({"knowledge.key_fraction=0.8", "knowledge.topic_fraction=0.5"}), ConfigError);
  EXPECT_THROW(generate({"arrival.charge_start_h=20"}), ConfigError);  // before active_end_h
}

TEST(Generator, OutputHasTheTraceSchema) {
  const RagTrace t = generate({"users=2"});
  ASSERT_EQ(t.users.size(), 2u);
  EXPECT_EQ(t.meta.source, "generator");
  EXPECT_EQ(t.meta.embedding_dim, 512);
  EXPECT_EQ(t.meta.retrieved_k, 3);
  EXPECT_NE(t.meta.params_yaml.find("paraphrase_prob"), std::string::npos);
  for (const auto& u : t.users) {
    EXPECT_EQ(u.chunks.size(), 100u);
    EXPECT_EQ(u.queries.size(), 20u);
    for (const auto& q : u.queries) {
      EXPECT_EQ(q.retrieved.size(), 3u);
      EXPECT_FALSE(q.relevant.empty());
      EXPECT_GT(q.answer_tokens, 0);
    }
    EXPECT_FALSE(u.idle_windows.empty());
  }
  validate_rag_trace(t, "generated");
}

TEST(Generator, DefaultStatisticsMatchPerCacheObservations) {
  // 20 users for stable fractions; the properties must also hold for other seeds.
  for (std::uint64_t seed : {1, 7}) {
    const TraceStats s = compute_stats(generate({"users=20"}, seed));
    SCOPED_TRACE("seed " + std::to_string(seed));
    // Fig. 3: repeated chunk retrieval (top-2): a large share of retrieved chunks is retrieved again.
    std::vector<double> freq(s.chunk_retrieval_freq.begin(), s.chunk_retrieval_freq.end());
    EXPECT_GE(frac_at_least(freq, 2), 0.40);
    EXPECT_GE(std::accumulate(freq.begin(), freq.end(), 0.0) / static_cast<double>(freq.size()), 1.8);
    // Fig. 5: low prefix overlap under reactive caching: mean well below 0.5, full hits rare, many zeros.
    const double mean_overlap =
        std::accumulate(s.prefix_overlap.begin(), s.prefix_overlap.end(), 0.0) / static_cast<double>(s.prefix_overlap.size());
    EXPECT_LT(mean_overlap, 0.4);
    EXPECT_LT(frac_at_least(s.prefix_overlap, 1.0), 0.2);
    EXPECT_GT(1.0 - frac_at_least(s.prefix_overlap, 0.5), 0.3);
    // Fig. 6: most queries' top-1 similarity to earlier ones is below 0.8; a few pairs are 0.8+.
    EXPECT_LT(quantile(s.top1_similarity, 0.5), 0.75);
    EXPECT_GE(frac_at_least(s.top1_similarity, 0.8), 0.03);
    EXPECT_LE(frac_at_least(s.top1_similarity, 0.8), 0.25);
    // Sparse arrivals: hours apart.
    EXPECT_GT(quantile(s.gap_s, 0.5), 3600.0);
    // Retrieval finds the chunks queries are about.
    EXPECT_GT(static_cast<double>(s.recall_hits) / static_cast<double>(s.recall_queries), 0.9);
  }
}

TEST(Generator, ParaphraseProbabilityControlsHighSimilarityPairs) {
  const TraceStats none = compute_stats(generate({"users=10", "queries.paraphrase_prob=0"}));
  const TraceStats many = compute_stats(generate({"users=10", "queries.paraphrase_prob=0.5"}));
  EXPECT_GT(frac_at_least(many.top1_similarity, 0.8), frac_at_least(none.top1_similarity, 0.8) + 0.1);
}
