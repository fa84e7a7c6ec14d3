// PerCache configured as pipeline stages (answer_cache: semantic, kv_reuse: chunk_tree,
// prefill: qkv_reuse or unit, decode: vanilla) against the `rag` policies' own request loop
// (CachingPolicy on RagPipeline, as the rag app runs it) on a small hand-made trace: the same queries
// hit the QA bank and the QKV tree, and every query's latency is the same to the nanosecond.
//
// Where the two are the same by construction (and so where this checks them): PerCache's
// prediction, scheduler, conversions and refresh off (its idle work is not a stage), and idle gaps
// long enough for its deferred writes to fit (the pipeline writes right after the answer).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>

#include "policies/kvsplit/kv_split.h"
#include "policies/pipeline/chunk_tree_reuse.h"
#include "policies/pipeline/pipeline.h"
#include "test_percache_util.h"
#include "test_pipeline_util.h"

namespace mobisim {
namespace {

using namespace policies::pipeline;
namespace kvsplit = policies::kvsplit;

// One user, four chunks; query i arrives at 1000 i s with a one-hot embedding (query 2 repeats
// query 0: a QA hit) and one retrieved chunk (queries 3 and 5 retrieve chunks seen before: tree hits).
traces::RagTrace one_chunk_trace() {
  traces::RagTrace t;
  traces::UserTrace u;
  u.user_id = "u0";
  for (std::int64_t tokens : {100, 120, 80, 150}) {
    traces::Chunk c;
    c.tokens = tokens;
    c.text = "chunk";
    u.chunks.push_back(c);
  }
  const int embedding_of[] = {0, 1, 0, 2, 3, 4};
  const std::int32_t chunk_of[] = {0, 1, 0, 1, 2, 0};
  for (int i = 0; i < 6; ++i) {
    traces::Query q;
    q.arrival_s = 1000.0 * i;
    q.tokens = 20 + i;
    q.answer_tokens = 8 + i;
    q.text = fmt::format("query {}", i);
    q.embedding.assign(8, 0.0f);
    q.embedding[static_cast<std::size_t>(embedding_of[i])] = 1.0f;
    q.retrieved = {chunk_of[i]};
    u.queries.push_back(q);
  }
  t.users.push_back(u);
  return t;
}

// The rag_qa driver's requests as the pipeline app builds them: the chunk, then the query.
std::vector<Request> requests_of(const traces::UserTrace& u, std::int64_t system_prompt_tokens) {
  std::vector<Request> out;
  for (std::size_t i = 0; i < u.queries.size(); ++i) {
    const traces::Query& q = u.queries[i];
    Request r;
    r.id = static_cast<std::int64_t>(i);
    r.arrival_s = q.arrival_s;
    if (system_prompt_tokens > 0) r.prompt.push_back({"system", 0x5157E1ULL, system_prompt_tokens});
    for (auto c : q.retrieved)
      r.prompt.push_back({"chunk", 0xC4000000ULL + static_cast<std::uint64_t>(c), u.chunks[static_cast<std::size_t>(c)].tokens});
    r.prompt.push_back({"query", 0x9E000000000ULL + i, q.tokens});
    r.output_tokens = q.answer_tokens;
    r.embedding = q.embedding;
    out.push_back(std::move(r));
  }
  return out;
}

template <class T>
std::unique_ptr<T> stage(const std::string& yaml) {
  return Registry<T>::instance().create(YAML::Load(yaml), ConfigSource{nullptr, "stage"});
}

struct Mode {
  const char* reuse_mode;  // CachingPolicy's reuse_mode
  const char* payload;     // chunk_tree's
  const char* prefill;     // the pipeline's prefill stage
};

// What the old loop and the pipeline did with the same queries.
struct BothPaths {
  std::vector<policies::QueryRecord> old;
  std::vector<Served> served;
};

BothPaths run_both(const traces::RagTrace& trace, const policies::PipelineConfig& cfg, const Mode& mode,
                   bool boundary_rules) {
  BothPaths out;
  out.old = policies::testing::run_user(
                fmt::format("{{impl: percache, prediction: false, scheduler: false, conversions: false, "
                            "answer_hits_later: false, refresh: false, boundary_rules: {}, reuse_mode: {}}}",
                            boundary_rules, mode.reuse_mode),
                trace, 0, cfg)
                .records;
  const models::CostModel cost(policies::testing::llama_fp32_act());
  PipelineOptions options = options_on("cpu");
  options.retrieval_ms = cfg.retrieval_ms;
  options.kv_match_ms = cfg.kv_match_ms;
  options.payload = std::string(mode.payload) == "qkv" ? kvsplit::Payload::kQkv : kvsplit::Payload::kKv;
  Pipeline pipeline(cost, options,
                    stage<KvReuse>(fmt::format("{{impl: chunk_tree, boundary_rules: {}, payload: {}}}", boundary_rules,
                                               mode.payload)),
                    stage<kvsplit::KvSplitStrategy>("{impl: always_load}"), stage<PrefillStage>(mode.prefill),
                    stage<AnswerCache>(fmt::format("{{impl: semantic, tau_query: 0.85, embed_ms: {}, match_ms: {}}}",
                                                   cfg.embed_query_ms, cfg.qa_match_ms)),
                    stage<DecodeStage>("{impl: vanilla, unit: cpu}"));
  sim::Simulator sim;
  sim::StatGroup stats("test");
  devices::Device device(sim, devices::load_device_profile("pixel7"), stats.child("device"));
  const std::vector<Request> requests = requests_of(trace.users[0], cfg.system_prompt_tokens);  // outlives the process
  sim.start(testing::serve_at_arrivals(sim, device, pipeline, requests, out.served), "pipeline");
  sim.run();
  return out;
}

policies::PipelineConfig rag_config(std::int64_t system_prompt_tokens, std::int64_t top_k) {
  policies::PipelineConfig cfg;
  cfg.compute_unit = cfg.prefill_unit = cfg.decode_unit = "cpu";
  cfg.system_prompt_tokens = system_prompt_tokens;
  cfg.top_k = top_k;
  cfg.embed_query_ms = 100;
  cfg.qa_match_ms = 10;
  cfg.retrieval_ms = 3940;  // PerCache Table 1
  cfg.kv_match_ms = 15;
  return cfg;
}

class PerCacheOnThePipeline : public ::testing::TestWithParam<Mode> {};

TEST_P(PerCacheOnThePipeline, GivesEveryQueryTheOldLoopsLatency) {
  const auto [old, served] = run_both(one_chunk_trace(), rag_config(0, 1), GetParam(), false);
  ASSERT_EQ(served.size(), old.size());
  const bool hits[] = {false, false, true, false, false, false};
  const std::int64_t reused[] = {0, 0, 0, 120, 0, 100};
  for (std::size_t i = 0; i < served.size(); ++i) {
    const auto& rec = old[i];
    SCOPED_TRACE(fmt::format("query {}", i));
    EXPECT_EQ(rec.qa_hit, hits[i]);
    EXPECT_EQ(served[i].answer_hit, hits[i]);
    EXPECT_EQ(served[i].reused_tokens, reused[i]);
    EXPECT_EQ(rec.kv_hit_chunks, reused[i] > 0 ? 1 : 0);
    EXPECT_EQ(sim::from_seconds(served[i].times.end_s - served[i].times.arrival_s),
              sim::from_seconds(rec.end_s - rec.arrival_s));
    if (!hits[i]) {
      EXPECT_NEAR(served[i].prefill_s + served[i].split_s, rec.prefill_s + rec.load_s, 1e-9);
      EXPECT_NEAR(served[i].decode_s, rec.decode_s, 1e-9);
    }
  }
}

// With a system prompt, two chunks per query and both boundary rules: the same tokens reused, and
// every slice read as its own file, whole (the last one's rule-2 tokens are read, then
// recomputed), so every query's latency is still the same to the nanosecond.
TEST_P(PerCacheOnThePipeline, WithSeveralSlicesAndTheBoundaryRulesToo) {
  traces::RagTrace trace = one_chunk_trace();
  const std::vector<std::vector<std::int32_t>> retrieved = {{0, 1}, {1, 2}, {0, 1}, {1, 2}, {2, 3}, {0, 3}};
  for (std::size_t i = 0; i < retrieved.size(); ++i) trace.users[0].queries[i].retrieved = retrieved[i];
  const auto [old, served] = run_both(trace, rag_config(64, 2), GetParam(), true);
  ASSERT_EQ(served.size(), old.size());
  int hits = 0;
  for (std::size_t i = 0; i < served.size(); ++i) {
    const auto& rec = old[i];
    SCOPED_TRACE(fmt::format("query {}", i));
    EXPECT_EQ(served[i].answer_hit, rec.qa_hit);
    EXPECT_EQ(sim::from_seconds(served[i].times.end_s - served[i].times.arrival_s),
              sim::from_seconds(rec.end_s - rec.arrival_s));
    if (rec.qa_hit) continue;
    EXPECT_EQ(served[i].reused_tokens, rec.reused_tokens);
    EXPECT_NEAR(served[i].split_s, rec.load_s, 1e-9);
    EXPECT_NEAR(served[i].prefill_s, rec.prefill_s, 1e-9);
    EXPECT_NEAR(served[i].decode_s, rec.decode_s, 1e-9);
    if (served[i].reused_tokens > 0) ++hits;
  }
  EXPECT_EQ(hits, 4);  // queries 1 and 4 (the root), 3 (the root, chunks 1 and 2), 5 (the root and chunk 0)
}

INSTANTIATE_TEST_SUITE_P(ReuseModes, PerCacheOnThePipeline,
                         ::testing::Values(Mode{"qkv_projection", "qkv", "{impl: qkv_reuse, unit: cpu}"},
                                           Mode{"kv_projection", "kv", "{impl: qkv_reuse, unit: cpu, mode: kv_projection}"},
                                           Mode{"prefix_skip", "kv", "{impl: unit, unit: cpu}"}),
                         [](const auto& info) { return std::string(info.param.reuse_mode); });

TEST(ChunkTreeReuse, MatchesTheRootAndTheRetrievedChunksUntilTheFirstMissLessRuleTwo) {
  auto reuse = stage<KvReuse>("{impl: chunk_tree, boundary_tokens: 4}");
  reuse->begin_model(policies::testing::llama_fp32_act());
  Request a;
  a.prompt = {{"system", 1, 64}, {"chunk", 10, 100}, {"chunk", 11, 50}, {"query", 99, 20}};
  EXPECT_EQ(reuse->match(a, 0).tokens, 0);
  const KvStored stored = reuse->store(a, 0);
  EXPECT_GT(stored.bytes, 0.0);
  EXPECT_EQ(stored.inserted, 2);  // the two chunks' slices (the root has its own slot)
  EXPECT_EQ(reuse->store(a, 0).inserted, 0);  // stored already
  Request b = a;
  b.prompt[2] = {"chunk", 12, 70};  // the second chunk differs: root + first chunk match
  EXPECT_EQ(reuse->match(b, 0).tokens, 64 + 100 - 4);
  EXPECT_EQ(reuse->match(a, 0).tokens, 64 + 100 + 50 - 4);
}

}  // namespace
}  // namespace mobisim
