// PerCache's and Sleep-time Compute's idle work as the pipeline's `idle` stage
// (policies/pipeline/percache_idle.h, sleeptime_idle.h) against their own request loop
// (CachingPolicy on RagPipeline, as rag_qa runs it) on a generated trace: with the same caches as
// stages (answer_cache: semantic over the same QA bank, kv_reuse: chunk_tree over the same tree),
// every query has the same QA-bank outcome, the same reused tokens, the same latency to the
// nanosecond and the same background work before it (jobs, FLOPs, busy time, energy; the busy
// time and energy within 1e-9 relative: the stage issues a background decode token by token, so
// it can stop between tokens, which sums the same per-token times in another order).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>
#include <memory>

#include "policies/kvsplit/kv_split.h"
#include "policies/pipeline/caching_idle.h"
#include "policies/pipeline/pipeline.h"
#include "test_percache_util.h"

namespace mobisim {
namespace {

using namespace policies::pipeline;
namespace kvsplit = policies::kvsplit;
using policies::testing::generated;

template <class T>
std::unique_ptr<T> stage(const std::string& yaml) {
  return Registry<T>::instance().create(YAML::Load(yaml), ConfigSource{nullptr, "stage"});
}

constexpr double kUnknown = -1;  // Request::next_arrival_s: the next request's time is not known

// The queries as the pipeline app lays them out (system prompt, top-k retrieved chunks, query),
// each told when the next one is due (`next_known`) or not.
std::vector<Request> requests_of(const traces::UserTrace& u, const policies::PipelineConfig& cfg, bool next_known) {
  std::vector<Request> out;
  for (std::size_t i = 0; i < u.queries.size(); ++i) {
    const traces::Query& q = u.queries[i];
    Request r;
    r.id = static_cast<std::int64_t>(i);
    r.arrival_s = q.arrival_s;
    if (cfg.system_prompt_tokens > 0) r.prompt.push_back({"system", 0x5157E1ULL, cfg.system_prompt_tokens});
    for (std::size_t k = 0; k < q.retrieved.size() && k < static_cast<std::size_t>(cfg.top_k); ++k)
      r.prompt.push_back({"chunk", chunk_key(static_cast<std::size_t>(q.retrieved[k])),
                          u.chunks[static_cast<std::size_t>(q.retrieved[k])].tokens});
    r.prompt.push_back({"query", 0x9E000000000ULL + i, q.tokens});
    r.output_tokens = q.answer_tokens;
    r.embedding = q.embedding;
    r.next_arrival_s = !next_known                   ? kUnknown
                       : i + 1 < u.queries.size() ? u.queries[i + 1].arrival_s
                                                  : std::numeric_limits<double>::infinity();
    out.push_back(std::move(r));
  }
  return out;
}

sim::Task<void> replay(sim::Simulator& sim, devices::Device& device, Pipeline& pipeline,
                       const std::vector<Request>& requests, std::vector<Served>& out) {
  const std::string owner = "app", kv_owner = "app/kv";  // named: see g++ 12's co_await quirk
  co_await pipeline.start(device, owner);
  for (const Request& r : requests) {
    const sim::Time at = sim::from_seconds(r.arrival_s);
    if (sim.now() < at) co_await sim.timeout(at - sim.now());
    Served s;
    co_await pipeline.serve(device, kv_owner, r, s);
    out.push_back(s);
  }
}

// The pipeline's stages as YAML, and what the same app's old loop is.
struct StageSetup {
  std::string policy;       // the rag policy (old loop)
  std::string kv_reuse;     // the pipeline's stages
  std::string prefill;
  std::string idle;
  kvsplit::Payload payload = kvsplit::Payload::kKv;
  bool kv_match = true;     // the old loop matches against a tree (charges kv_match_ms)
};

struct PipelineRun {
  std::vector<Served> served;
  std::unique_ptr<Pipeline> pipeline;
  const IdleStage* idle = nullptr;
  const policies::CachingPolicy& engine() const { return dynamic_cast<const CachingIdle&>(*idle).engine(); }
};

PipelineRun run_pipeline(const traces::RagTrace& trace, const policies::PipelineConfig& cfg, const StageSetup& setup,
                         bool next_known, const models::CostModel& cost) {
  PipelineOptions options = options_on("cpu");
  options.retrieval_ms = cfg.retrieval_ms;
  options.kv_match_ms = setup.kv_match ? cfg.kv_match_ms : 0;
  options.payload = setup.payload;
  auto idle = stage<IdleStage>(setup.idle);
  PipelineRun run;
  run.idle = idle.get();
  run.pipeline = std::make_unique<Pipeline>(
      cost, options, stage<KvReuse>(setup.kv_reuse), stage<kvsplit::KvSplitStrategy>("{impl: always_load}"),
      stage<PrefillStage>(setup.prefill),
      stage<AnswerCache>(fmt::format("{{impl: semantic, tau_query: 0.85, embed_ms: {}, match_ms: {}}}",
                                     cfg.embed_query_ms, cfg.qa_match_ms)),
      stage<DecodeStage>("{impl: vanilla, unit: cpu}"), nullptr, std::move(idle));
  auto workload = std::make_shared<IdleWorkload>();
  workload->trace.meta = trace.meta;
  workload->trace.users = {trace.users[0]};
  workload->unit = "cpu";
  workload->system_prompt_tokens = cfg.system_prompt_tokens;
  workload->top_k = cfg.top_k;
  workload->retrieval_ms = cfg.retrieval_ms;
  workload->kv_match_ms = cfg.kv_match_ms;
  run.pipeline->use_workload(workload);
  sim::Simulator sim;
  sim::StatGroup stats("test");
  devices::Device device(sim, devices::load_device_profile("pixel7"), stats.child("device"));
  const std::vector<Request> requests = requests_of(trace.users[0], cfg, next_known);
  sim.start(replay(sim, device, *run.pipeline, requests, run.served), "pipeline");
  sim.run();
  return run;
}

const StageSetup kPerCache{"{impl: percache}", "{impl: chunk_tree, payload: qkv}", "{impl: qkv_reuse, unit: cpu}",
                      "{impl: percache_scheduler}", kvsplit::Payload::kQkv, true};
// The oracle predictor (an upper bound: it predicts the user's next real queries) makes the QA bank
// answer queries, so the QA-hit path (a hit's real answer generated later) runs too.
const StageSetup kPerCacheOracle{"{impl: percache, predictor: {impl: oracle}}", "{impl: chunk_tree, payload: qkv}",
                                 "{impl: qkv_reuse, unit: cpu}", "{impl: percache_scheduler, predictor: {impl: oracle}}",
                                 kvsplit::Payload::kQkv, true};
const StageSetup kSleepTime{"{impl: sleeptime}", "{impl: none}", "{impl: unit, unit: cpu}", "{impl: sleeptime}",
                       kvsplit::Payload::kKv, false};
const StageSetup kRagCacheSleepTime{"{impl: ragcache_sleeptime}", "{impl: chunk_tree, payload: kv, eviction: pgdsf}",
                               "{impl: qkv_reuse, unit: cpu, mode: kv_projection}", "{impl: sleeptime}",
                               kvsplit::Payload::kKv, true};

double relative(double a, double b) { return std::abs(a - b) / std::max({1.0, std::abs(a), std::abs(b)}); }

std::string setup_name(std::size_t i) {
  const char* names[] = {"percache", "percache_oracle", "sleeptime", "ragcache_sleeptime"};
  return names[i];
}

class IdleStageOnThePipeline : public ::testing::TestWithParam<StageSetup> {};

TEST_P(IdleStageOnThePipeline, GivesEveryQueryTheOldLoopsOutcomeLatencyAndBackgroundWork) {
  const StageSetup& setup = GetParam();
  const traces::RagTrace trace = generated("users: 1\nqueries: {per_user: 12}");
  const policies::PipelineConfig cfg = policies::testing::table1_pipeline();
  const auto old = policies::testing::run_user(setup.policy, trace, 0, cfg);
  const models::CostModel cost(policies::testing::llama_fp32_act());
  const PipelineRun run = run_pipeline(trace, cfg, setup, true, cost);
  ASSERT_EQ(run.served.size(), old.records.size());
  int hits = 0, reused = 0;
  std::int64_t jobs = 0;
  for (std::size_t i = 0; i < run.served.size(); ++i) {
    const policies::QueryRecord& rec = old.records[i];
    const Served& s = run.served[i];
    SCOPED_TRACE(fmt::format("query {}", i));
    EXPECT_EQ(s.answer_hit, rec.qa_hit);
    EXPECT_EQ(sim::from_seconds(s.times.end_s - s.times.arrival_s), sim::from_seconds(rec.end_s - rec.arrival_s));
    EXPECT_EQ(s.idle_work.jobs, rec.bg_jobs);
    EXPECT_LE(relative(s.idle_work.flops, rec.bg_flops), 1e-12);
    EXPECT_LE(relative(s.idle_work.busy_s, rec.bg_s), 1e-9);
    EXPECT_LE(relative(s.idle_work.energy_j, rec.bg_energy_j), 1e-9);
    if (!rec.qa_hit) {
      EXPECT_EQ(s.prompt_tokens, rec.prompt_tokens);
      EXPECT_EQ(s.reused_tokens, rec.reused_tokens);
    }
    hits += rec.qa_hit;
    reused += s.reused_tokens > 0;
    jobs += rec.bg_jobs;
  }
  // The case is not empty: background jobs ran and predicted queries; the tree served queries.
  const auto& mine = run.engine();
  const auto& theirs = old.caching();
  EXPECT_GT(jobs, 12);
  EXPECT_GT(mine.predicted_queries(), 0);
  if (setup.kv_match) {
    EXPECT_GT(hits + reused, 0);  // the QA bank or the tree answered queries
  }
  if (setup.policy.find("oracle") != std::string::npos) {
    EXPECT_GT(hits, 0);
  }
  std::printf("%s: %d QA hits, %d tree hits, %lld background jobs, %lld predicted\n", setup.idle.c_str(), hits, reused,
              static_cast<long long>(jobs), static_cast<long long>(mine.predicted_queries()));
  EXPECT_EQ(mine.predicted_queries(), theirs.predicted_queries());
  EXPECT_EQ(mine.conversions_qkv_to_qa(), theirs.conversions_qkv_to_qa());
  EXPECT_EQ(mine.conversions_qa_to_qkv(), theirs.conversions_qa_to_qkv());
  EXPECT_EQ(mine.qa_bank()->entries().size(), theirs.qa_bank()->entries().size());
  if (theirs.kv_tree()) {
    EXPECT_EQ(run.pipeline->reuse().stored_bytes(), theirs.kv_tree()->used_bytes());
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, IdleStageOnThePipeline, ::testing::Values(kPerCache, kPerCacheOracle, kSleepTime, kRagCacheSleepTime),
                         [](const auto& info) { return setup_name(info.index); });

}  // namespace
}  // namespace mobisim
