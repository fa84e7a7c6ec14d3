// Late chunks (traces::Chunk::added_s > 0) and what the RAG drivers score, on the request pipeline
// (issue 34): the pipeline retrieves a request's chunks when its loop does (after the answer
// cache's look-up and retrieval_ms), keeping the first top_k of the query's ranking already in the
// knowledge bank; a served request's record says whether its answer came from a stale QA entry,
// which answer it was (what ROUGE-L / BLEU score) and how long embedding, QA matching, retrieval
// and tree matching took.
//
// Against the old loop (CachingPolicy on RagPipeline, as the rag app runs it), on a generated trace with
// late chunks whose queries come earlier than the trace's retrieval was made for (so that their
// rankings hold chunks not there yet): every query has the loop's QA-hit outcome, stale flag,
// served answer, prompt, reused tokens, phase times and latency, to the nanosecond.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>

#include "experiments/simulation.h"
#include "policies/apps/pipeline_app.h"
#include "policies/pipeline/pipeline.h"
#include "sim/h5.h"
#include "test_percache_util.h"
#include "test_pipeline_util.h"
#include "traces/metrics.h"

namespace mobisim {
namespace late_chunk_tests {  // named: unity builds put test files together (their helpers' names recur)
namespace {

using namespace policies::pipeline;
using policies::testing::stages::StageSetup;

// The first user's queries as the pipeline app lays them out (rag_request: ranked, retrieved when
// served), each told when the next one is due.
std::vector<Request> app_requests(const traces::UserTrace& u, const policies::PipelineConfig& cfg) {
  std::vector<Request> out;
  for (std::size_t i = 0; i < u.queries.size(); ++i) {
    Request r = rag_request(u, i, u.queries[i].arrival_s, RagLayout{cfg.system_prompt_tokens, cfg.top_k, 0}, "test");
    r.next_arrival_s = i + 1 < u.queries.size() ? u.queries[i + 1].arrival_s : std::numeric_limits<double>::infinity();
    out.push_back(std::move(r));
  }
  return out;
}

// A generated user with 30% of the chunks arriving during the trace, six chunks ranked per query;
// its queries then come at half their times: a ranking made for a later time holds chunks that are
// not in the knowledge bank yet when the query is served.
traces::RagTrace late_trace() {
  traces::RagTrace t = policies::testing::generated(
      "users: 1\nqueries: {per_user: 12}\nknowledge: {late_fraction: 0.3}\nretrieval: {k: 6}");
  for (traces::Query& q : t.users[0].queries) q.arrival_s *= 0.5;
  return t;
}

// Queries whose first top_k ranked chunks are not all there at their arrival.
int queries_ranking_absent_chunks(const traces::UserTrace& u, std::int64_t top_k) {
  int n = 0;
  for (const traces::Query& q : u.queries) {
    bool absent = false;
    for (std::size_t k = 0; k < q.retrieved.size() && k < static_cast<std::size_t>(top_k); ++k)
      absent = absent || u.chunks[static_cast<std::size_t>(q.retrieved[k])].added_s > q.arrival_s;
    n += absent;
  }
  return n;
}

sim::Time ns(double s) { return sim::from_seconds(s); }

// The oracle predictor without PerCache's dynamic refresh: QA entries made before a chunk their
// query now ranks arrived are still served (stale hits).
const StageSetup kPerCacheOracleNoRefresh{"{impl: percache, refresh: false, predictor: {impl: oracle}}",
                                          "{impl: chunk_tree, payload: qkv}", "{impl: qkv_reuse, unit: cpu}",
                                          "{impl: percache_scheduler, refresh: false, predictor: {impl: oracle}}",
                                          policies::kvsplit::Payload::kQkv, true};

std::string setup_name(std::size_t i) {
  const char* names[] = {"percache", "percache_oracle", "percache_oracle_no_refresh", "ragcache_sleeptime",
                         "sleeptime"};
  return names[i];
}

class LateChunksOnThePipeline : public ::testing::TestWithParam<StageSetup> {};

TEST_P(LateChunksOnThePipeline, EveryQueryHasTheOldLoopsRetrievalOutcomeScoresPhasesAndLatency) {
  const StageSetup& setup = GetParam();
  const traces::RagTrace trace = late_trace();
  const traces::UserTrace& u = trace.users[0];
  const policies::PipelineConfig cfg = policies::testing::table1_pipeline();
  ASSERT_GT(queries_ranking_absent_chunks(u, cfg.top_k), 0);  // the case is about late chunks
  const auto old = policies::testing::run_user(setup.policy, trace, 0, cfg);
  const models::CostModel cost(policies::testing::llama_fp32_act());
  const policies::testing::stages::StageRun run = policies::testing::stages::run_stages(trace, cfg, setup, app_requests(u, cfg), cost);
  ASSERT_EQ(run.served.size(), old.records.size());
  const auto [hits, stale, reused, jobs] = policies::testing::stages::expect_each_query_as_the_loop(run.served, old.records);
  int short_prompts = 0;
  for (const policies::QueryRecord& rec : old.records) short_prompts += !rec.qa_hit && rec.retrieved_chunks < cfg.top_k;
  std::printf("%s: %d QA hits (%d stale), %d prompts with fewer than top_k chunks\n", setup.idle.c_str(), hits, stale,
              short_prompts);
  // The engine's own counters agree too (its refresh and conversions see the same chunks).
  EXPECT_EQ(run.engine().predicted_queries(), old.caching().predicted_queries());
  EXPECT_EQ(run.engine().refreshes(), old.caching().refreshes());
  EXPECT_EQ(run.engine().qa_bank()->entries().size(), old.caching().qa_bank()->entries().size());
  if (setup.policy.find("oracle") != std::string::npos) {
    EXPECT_GT(hits, 0);  // the QA-hit path runs
  }
  if (setup.policy.find("refresh: false") != std::string::npos) {
    EXPECT_GT(stale, 0);  // and meets entries made before a chunk they now rank arrived
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, LateChunksOnThePipeline,
                         ::testing::Values(policies::testing::stages::kPerCache, policies::testing::stages::kPerCacheOracle,
                                           kPerCacheOracleNoRefresh, policies::testing::stages::kRagCacheSleepTime,
                                           policies::testing::stages::kSleepTime),
                         [](const auto& info) { return setup_name(info.index); });

// One user, chunks 0-2 (100 tokens) there from the start, chunk 3 (40 tokens) arriving at 1001 s and
// chunk 4 (20 tokens) at 1500 s; every query ranks 4, 3, 0, 1, 2 and has 8 tokens. Query i comes at
// 1000 i s. Query 1's chunk 3 arrives after the query but before its retrieval (1000 s + embedding,
// matching and retrieval_ms).
traces::RagTrace arriving_chunks_trace() {
  traces::RagTrace t = testing::three_chunk_workload(3, 8);
  traces::UserTrace& u = t.users[0];
  for (const auto& [tokens, added_s] : {std::pair<std::int64_t, double>{40, 1001.0}, {20, 1500.0}}) {
    traces::Chunk c;
    c.tokens = tokens;
    c.added_s = added_s;
    u.chunks.push_back(c);
  }
  for (traces::Query& q : u.queries) q.retrieved = {4, 3, 0, 1, 2};
  return t;
}

constexpr const char* kApp =
    "{impl: pipeline, model: {base: llama-3.2-3b, weight_dtype: int4, activation_dtype: fp32, kv_dtype: fp32}, "
    "workload: {generate: default}, unit: cpu, system_prompt_tokens: 64, top_k: 3, retrieval_ms: 3940, "
    "kv_match_ms: 15, answer_cache: {impl: semantic, embed_ms: 1600, match_ms: 10}}";

TEST(LateChunks, AChunkArrivingAfterItsQueryIsRetrievedOnlyOnceThere) {
  const traces::RagTrace trace = arriving_chunks_trace();
  const traces::UserTrace& u = trace.users[0];
  // At its arrival, query 1's prompt holds the chunks there then (0, 1, 2): 64 + 300 + 8 tokens.
  const Request at_arrival = rag_request(u, 1, 1000.0, RagLayout{64, 3, 0}, "test");
  EXPECT_EQ(at_arrival.prompt_tokens(), 372);
  EXPECT_EQ(chunk_ids(at_arrival), (std::vector<std::int32_t>{0, 1, 2}));
  policies::AppEnvironment env;
  env.rag_workload = [&](const YAML::Node&, const ConfigSource&) { return trace; };
  auto app = Registry<policies::App>::instance().create(YAML::Load(kApp), ConfigSource{});
  app->prepare(env);
  const auto served = testing::run_pipeline_alone(*app, devices::load_device_profile("pixel7")).served;
  ASSERT_EQ(served.size(), 3u);
  // Query 0 (0 s): neither late chunk is there: 0, 1, 2. Query 1 (1000 s): chunk 3 came at 1001 s,
  // before its retrieval at 1005.55 s; chunk 4 not yet: 3, 0, 1 = 64 + 40 + 200 + 8. Query 2: 4, 3, 0.
  EXPECT_EQ(served[0].prompt_tokens, 64 + 300 + 8);
  EXPECT_EQ(served[1].prompt_tokens, 64 + 40 + 200 + 8);
  EXPECT_EQ(served[2].prompt_tokens, 64 + 20 + 40 + 100 + 8);
  for (const Served& s : served) EXPECT_EQ(s.retrieved_chunks, 3);
  // The old loop (embedding and QA matching as one 1,610 ms step, then retrieval) retrieves the same.
  policies::PipelineConfig cfg = policies::testing::table1_pipeline();
  cfg.embed_query_ms = 1610;
  cfg.qa_match_ms = 0;
  const auto old = policies::testing::run_user("{impl: naive}", trace, 0, cfg);
  ASSERT_EQ(old.records.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(served[i].prompt_tokens, old.records[i].prompt_tokens) << "query " << i;
    EXPECT_EQ(ns(served[i].times.start_s) + ns(served[i].embed_s) + ns(served[i].qa_match_s) + ns(served[i].retrieval_s),
              ns(old.records[i].start_s) + ns(old.records[i].embed_s) + ns(old.records[i].retrieval_s))
        << "query " << i;  // retrieved at the same instant
  }
  // A nanosecond after query 1's retrieval, chunk 3 misses it (and is there for query 2).
  traces::RagTrace later = trace;
  later.users[0].chunks[3].added_s = 1000.0 + 1.610 + 3.940 + 1e-9;
  env.rag_workload = [&](const YAML::Node&, const ConfigSource&) { return later; };
  auto app2 = Registry<policies::App>::instance().create(YAML::Load(kApp), ConfigSource{});
  app2->prepare(env);
  const auto served2 = testing::run_pipeline_alone(*app2, devices::load_device_profile("pixel7")).served;
  EXPECT_EQ(served2[1].prompt_tokens, 372);
  EXPECT_EQ(served2[2].prompt_tokens, 64 + 20 + 40 + 100 + 8);
}

// What the app's records and summary score: a repeated question (the same embedding) is answered
// from the answer cache with the first one's answer, scored against its own reference.
TEST(LateChunks, TheAppsRecordsScoreTheServedAnswersAsTheRagDriver) {
  traces::RagTrace trace = testing::three_chunk_workload(3, 8);
  auto& queries = trace.users[0].queries;
  for (auto& q : queries) q.embedding = {1.0f, 0.0f};
  queries[2].embedding = {0.0f, 1.0f};  // a new question: the LLM answers it
  queries[0].answer_text = "the meeting moved to friday";
  queries[1].answer_text = "the meeting is on friday";
  queries[2].answer_text = "";  // no reference: not scored
  policies::AppEnvironment env;
  env.rag_workload = [&](const YAML::Node&, const ConfigSource&) { return trace; };
  auto app = Registry<policies::App>::instance().create(YAML::Load(kApp), ConfigSource{});
  app->prepare(env);
  const auto served = testing::run_pipeline_alone(*app, devices::load_device_profile("pixel7")).served;
  ASSERT_EQ(served.size(), 3u);
  ASSERT_TRUE(served[1].answer_hit);
  EXPECT_EQ(served[1].served_answer, "the meeting moved to friday");
  EXPECT_FALSE(served[1].answer_stale);  // no engine to judge it: never stale (as the loop without a retriever)
  h5::Table t;
  app->records(t);
  const auto& rouge = std::get<std::vector<double>>(t.column("rouge_l"));
  const auto& bleu = std::get<std::vector<double>>(t.column("bleu"));
  // Query 0: the LLM's own answer (1, 1). Query 1: LCS "the meeting friday" = 3 of 5 words both ways
  // (F = 0.6); n-gram precisions 3/5, 1/4, 0 -> 0.1/3, 0 -> 0.1/2 (method-1 smoothing), no brevity
  // penalty. Query 2: no reference (0, 0).
  EXPECT_DOUBLE_EQ(rouge[0], 1.0);
  EXPECT_DOUBLE_EQ(bleu[0], 1.0);
  EXPECT_NEAR(rouge[1], 0.6, 1e-12);
  EXPECT_NEAR(bleu[1], std::pow(0.6 * 0.25 * (0.1 / 3) * (0.1 / 2), 0.25), 1e-12);
  EXPECT_EQ(rouge[2], 0.0);
  EXPECT_EQ(bleu[2], 0.0);
  const auto quality = dynamic_cast<const policies::PipelineApp&>(*app).answer_quality();
  EXPECT_EQ(quality.answer_hits, 1);
  EXPECT_EQ(quality.stale_hits, 0);
  EXPECT_DOUBLE_EQ(quality.mean_rouge_l, (rouge[0] + rouge[1] + rouge[2]) / 3);
  EXPECT_DOUBLE_EQ(quality.mean_bleu, (bleu[0] + bleu[1] + bleu[2]) / 3);
  // The phases before the split: the look-up on every request, retrieval and tree matching after a miss.
  const auto& embed = std::get<std::vector<double>>(t.column("embed_s"));
  const auto& match = std::get<std::vector<double>>(t.column("qa_match_s"));
  const auto& retrieval = std::get<std::vector<double>>(t.column("retrieval_s"));
  const auto& kv_match = std::get<std::vector<double>>(t.column("kv_match_s"));
  for (std::size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(ns(embed[i]), sim::from_ms(1600));
    EXPECT_EQ(ns(match[i]), sim::from_ms(10));
    EXPECT_EQ(ns(retrieval[i]), i == 1 ? 0 : sim::from_ms(3940));
    EXPECT_EQ(ns(kv_match[i]), i == 1 ? 0 : sim::from_ms(15));
  }
}

}  // namespace
}  // namespace late_chunk_tests
}  // namespace mobisim
