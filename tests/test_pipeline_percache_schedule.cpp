// Figure 15's mid-run `schedule` on the request pipeline (issue 34): the `percache_scheduler` idle
// stage takes the `percache` rag policy's schedule and, through the engine that applies it, changes
// the answer cache's tau_query, the chunk_tree's storage limit and its own scheduler / conversions
// switches at the moment the rag loop does (once N queries are served, at the start of the idle
// time that follows). Checked here:
// - fig15a/b/c's policy settings (experiments/percache/fig15{a,b,c}.yaml) on a generated user of
//   12 queries: every query has the old loop's QA-hit outcome, reused tokens, latency to the
//   nanosecond and background work before it;
// - on hand-made embeddings, a query before the change sees the old threshold and the first query
//   after it the new one (also when the change waits for a later idle time); a lowered storage limit
//   evicts before the next query's match;
// - a schedule whose key no linked stage owns, or that is malformed, is a ConfigError naming it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "experiments/simulation.h"
#include "policies/apps/app.h"
#include "test_percache_util.h"
#include "test_util.h"

namespace mobisim {
namespace schedule_stage_tests {  // named: unity builds put test files together (their helpers' names recur)
namespace {

using namespace policies::pipeline;
namespace kvsplit = policies::kvsplit;
using policies::testing::generated;
using policies::testing::stages::relative_difference;
using policies::testing::stages::run_pipeline;
using policies::testing::stages::stage;
using policies::testing::stages::StageRun;
using policies::testing::stages::StageSetup;

// One policy of figure 15's YAMLs: the keys the loop's policy and the idle stage share, the
// threshold (the answer cache's on the pipeline), the storage limit (the chunk_tree's) and the schedule.
struct Fig15Policy {
  std::string name;
  double tau_query;
  double storage_limit_gb;
  std::string shared;  // idle-work keys, the same in both
  std::string schedule;
};

StageSetup setup_of(const Fig15Policy& f) {
  StageSetup s;
  s.policy = fmt::format("{{impl: percache, tau_query: {}, storage_limit_gb: {}, {}, schedule: {}}}", f.tau_query,
                         f.storage_limit_gb, f.shared, f.schedule);
  s.kv_reuse = fmt::format("{{impl: chunk_tree, payload: qkv, storage_limit_gb: {}}}", f.storage_limit_gb);
  s.prefill = "{impl: qkv_reuse, unit: cpu}";
  s.idle = fmt::format("{{impl: percache_scheduler, {}, schedule: {}}}", f.shared, f.schedule);
  s.payload = kvsplit::Payload::kQkv;
  s.kv_match = true;
  return s;
}

const char* kFig15aSchedule = "[{after_query: 2, set: {tau_query: 0.90}}]";
const char* kFig15bSchedule = "[{after_query: 5, set: {tau_query: 0.85}}]";
const char* kFig15cSchedule = "[{after_query: 6, set: {storage_limit_gb: 8}}]";

const std::vector<Fig15Policy> kFig15 = {
    {"fig15a_scheduler", 0.85, 8, "scheduler: true", kFig15aSchedule},
    {"fig15a_no_scheduler", 0.85, 8, "scheduler: false", kFig15aSchedule},
    {"fig15b_scheduler", 0.90, 8, "abstract_source: topics, scheduler: true", kFig15bSchedule},
    {"fig15b_no_scheduler", 0.90, 8, "abstract_source: topics, scheduler: false", kFig15bSchedule},
    {"fig15b_scheduler_no_conversion", 0.90, 8, "abstract_source: topics, scheduler: true, conversions: false",
     kFig15bSchedule},
    {"fig15b_oracle_scheduler", 0.90, 8, "abstract_source: topics, predictor: {impl: oracle}, scheduler: true",
     kFig15bSchedule},
    {"fig15b_oracle_no_scheduler", 0.90, 8, "abstract_source: topics, predictor: {impl: oracle}, scheduler: false",
     kFig15bSchedule},
    {"fig15b_oracle_scheduler_no_conversion", 0.90, 8,
     "abstract_source: topics, predictor: {impl: oracle}, scheduler: true, conversions: false", kFig15bSchedule},
    {"fig15c_scheduler", 0.85, 6, "knowledge_type: personal notes, scheduler: true", kFig15cSchedule},
    {"fig15c_no_scheduler", 0.85, 6, "knowledge_type: personal notes, scheduler: false", kFig15cSchedule},
    {"fig15c_scheduler_no_conversion", 0.85, 6, "knowledge_type: personal notes, scheduler: true, conversions: false",
     kFig15cSchedule},
    // Figure 15c's step on a tree this user fills (2 GB) before it, and a limit lowered mid-run
    // (evictions at the change): the storage-limit path does something on a 12-query user.
    {"limit_2_to_4_gb_after_6", 0.85, 2, "knowledge_type: personal notes, scheduler: true",
     "[{after_query: 6, set: {storage_limit_gb: 4}}]"},
    {"limit_8_to_1_gb_after_4_scheduler_off", 0.85, 8, "scheduler: true",
     "[{after_query: 4, set: {storage_limit_gb: 1, scheduler: false}}, {after_query: 8, set: {tau_query: 0.80, "
     "scheduler: true}}]"},
};

class ScheduleOnThePipeline : public ::testing::TestWithParam<Fig15Policy> {};

TEST_P(ScheduleOnThePipeline, GivesEveryQueryTheOldLoopsOutcomeLatencyAndBackgroundWork) {
  const Fig15Policy& f = GetParam();
  const StageSetup setup = setup_of(f);
  const traces::RagTrace trace = generated("users: 1\nqueries: {per_user: 12}");
  const policies::PipelineConfig cfg = policies::testing::table1_pipeline();
  const auto& old = policies::testing::loop_values::loop_run(std::string("schedule/") + f.name);
  const models::CostModel cost(policies::testing::llama_fp32_act());
  const StageRun run = run_pipeline(trace, cfg, setup, true, cost, f.tau_query);
  ASSERT_EQ(run.served.size(), old.records.size());
  const auto [hits, stale, reused, jobs] = policies::testing::stages::expect_each_query_as_the_loop(run.served, old.records);

  const auto& mine = run.engine();
  const auto& theirs = old.engine;
  ASSERT_TRUE(theirs.caching && theirs.has_tree);
  EXPECT_GT(jobs, 12);
  EXPECT_GT(hits + reused, 0);
  // Both applied the whole schedule: the engines' values, and the tree's limit, are the last ones.
  EXPECT_EQ(mine.options().tau_query, theirs.tau_query);
  EXPECT_EQ(mine.options().storage_limit_gb, theirs.storage_limit_gb);
  EXPECT_EQ(mine.options().scheduler, theirs.scheduler);
  EXPECT_EQ(mine.options().conversions, theirs.conversions);
  EXPECT_EQ(mine.kv_tree()->limit_bytes(), theirs.tree_limit_bytes);
  EXPECT_EQ(mine.kv_tree()->evictions(), theirs.tree_evictions);
  EXPECT_EQ(mine.predicted_queries(), theirs.predicted_queries);
  EXPECT_EQ(mine.conversions_qkv_to_qa(), theirs.conversions_qkv_to_qa);
  EXPECT_EQ(mine.conversions_qa_to_qkv(), theirs.conversions_qa_to_qkv);
  EXPECT_EQ(mine.qa_bank()->entries().size(), theirs.qa_entries);
  EXPECT_EQ(run.pipeline->reuse().stored_bytes(), theirs.tree_used_bytes);
  std::printf("%s: %d QA hits, %d tree hits, %lld background jobs, %lld predicted, %llu evictions, conversions "
              "%lld/%lld\n",
              f.name.c_str(), hits, reused, static_cast<long long>(jobs),
              static_cast<long long>(mine.predicted_queries()),
              static_cast<unsigned long long>(mine.kv_tree()->evictions()),
              static_cast<long long>(mine.conversions_qkv_to_qa()), static_cast<long long>(mine.conversions_qa_to_qkv()));
}

INSTANTIATE_TEST_SUITE_P(Fig15, ScheduleOnThePipeline, ::testing::ValuesIn(kFig15),
                         [](const auto& info) { return info.param.name; });

// A user of 4 queries, 10,000 s apart (every deferred write done before the next query), whose
// query i > 0 has cosine similarity 0.87 with query 0 (between the thresholds 0.85 and 0.90) and
// 0.87^2 = 0.757 with every other query: query i hits the QA bank (on query 0's entry) exactly when
// the threshold is 0.85 at its look-up. No prediction: the bank holds the served queries only.
constexpr double kCloseToFirst = 0.87;

traces::RagTrace between_thresholds_workload() {
  traces::RagTrace trace = generated("users: 1\nqueries: {per_user: 4}");
  auto& queries = trace.users[0].queries;
  const std::size_t dim = queries[0].embedding.size();
  const float off = static_cast<float>(std::sqrt(1 - kCloseToFirst * kCloseToFirst));
  for (std::size_t i = 0; i < queries.size(); ++i) {
    std::vector<float> e(dim, 0.0f);
    e[0] = i == 0 ? 1.0f : static_cast<float>(kCloseToFirst);
    if (i > 0) e[i] = off;  // a direction of its own
    queries[i].embedding = e;
    queries[i].arrival_s = 10000.0 * static_cast<double>(i);
  }
  return trace;
}

// The hit pattern of the pipeline (checked against the old loop's, query by query, with the same
// latency to the nanosecond; pinned as "hits/<schedule>", or "hits_no_idle/<schedule>" when
// `no_idle`: query 2 arrives during query 1's answer) under `schedule` starting at tau_query 0.90.
std::vector<bool> hits_under(const traces::RagTrace& trace, const std::string& schedule, bool no_idle = false) {
  const std::string shared = "prediction: false";
  StageSetup setup;
  setup.policy = fmt::format("{{impl: percache, tau_query: 0.90, {}, schedule: {}}}", shared, schedule);
  setup.kv_reuse = "{impl: chunk_tree, payload: qkv}";
  setup.prefill = "{impl: qkv_reuse, unit: cpu}";
  setup.idle = fmt::format("{{impl: percache_scheduler, {}, schedule: {}}}", shared, schedule);
  setup.payload = kvsplit::Payload::kQkv;
  const policies::PipelineConfig cfg = policies::testing::table1_pipeline();
  const auto& old = policies::testing::loop_values::loop_run(std::string(no_idle ? "hits_no_idle/" : "hits/") + schedule);
  const models::CostModel cost(policies::testing::llama_fp32_act());
  const StageRun run = run_pipeline(trace, cfg, setup, true, cost, 0.90);
  EXPECT_EQ(run.served.size(), old.records.size());
  std::vector<bool> hits;
  for (std::size_t i = 0; i < run.served.size() && i < old.records.size(); ++i) {
    SCOPED_TRACE(fmt::format("schedule {}, query {}", schedule, i));
    const Served& s = run.served[i];
    EXPECT_EQ(s.answer_hit, old.records[i].qa_hit);
    EXPECT_EQ(sim::from_seconds(s.times.end_s - s.times.arrival_s),
              sim::from_seconds(old.records[i].end_s - old.records[i].arrival_s));
    // Query 0 finds an empty bank; every later one finds query 0's entry at 0.87.
    if (i > 0) {
      EXPECT_NEAR(s.answer_similarity, kCloseToFirst, 1e-6);
    }
    hits.push_back(s.answer_hit);
  }
  return hits;
}

TEST(ScheduleTakesEffect, TheFirstQueryAfterTheChangeSeesTheNewThresholdAndOneBeforeItTheOld) {
  const traces::RagTrace trace = between_thresholds_workload();
  using Hits = std::vector<bool>;
  EXPECT_EQ(hits_under(trace, "[]"), (Hits{false, false, false, false}));  // 0.87 < 0.90 throughout
  // Served 2 queries: query 1 looked up at 0.90, query 2 at 0.85.
  EXPECT_EQ(hits_under(trace, "[{after_query: 2, set: {tau_query: 0.85}}]"), (Hits{false, false, true, true}));
  EXPECT_EQ(hits_under(trace, "[{after_query: 3, set: {tau_query: 0.85}}]"), (Hits{false, false, false, true}));
  EXPECT_EQ(hits_under(trace, "[{after_query: 1, set: {tau_query: 0.85}}, {after_query: 2, set: {tau_query: 0.90}}, "
                              "{after_query: 3, set: {tau_query: 0.85}}]"),
            (Hits{false, true, false, true}));
}

// When query N-1's answer ends after query N arrived there is no idle time between them: the
// change waits for the next idle time (the rag loop's idle() does not run either), so query N
// still sees the old threshold and query N+1 the new one.
TEST(ScheduleTakesEffect, WithoutIdleTimeBeforeQueryNTheChangeWaitsForTheNextIdleTime) {
  traces::RagTrace trace = between_thresholds_workload();
  trace.users[0].queries[2].arrival_s = trace.users[0].queries[1].arrival_s + 1.0;  // during query 1's answer
  EXPECT_EQ(hits_under(trace, "[{after_query: 2, set: {tau_query: 0.85}}]", true),
            (std::vector<bool>{false, false, false, true}));
}

// A lowered storage limit evicts at the change, before the next query's tree match: every query
// retrieves the same three chunks, the largest of the user's first; after query 1 the limit
// drops to what holds the root and that chunk with half of the second, so query 2 reuses the root
// and the first chunk (less the boundary rule's 4 tokens), where query 1 reused all three.
TEST(ScheduleTakesEffect, ALoweredStorageLimitEvictsBeforeTheNextQuerysMatch) {
  traces::RagTrace trace = between_thresholds_workload();
  traces::UserTrace& u = trace.users[0];
  std::vector<std::int32_t> by_size(u.chunks.size());
  for (std::size_t c = 0; c < by_size.size(); ++c) by_size[c] = static_cast<std::int32_t>(c);
  std::stable_sort(by_size.begin(), by_size.end(), [&](std::int32_t a, std::int32_t b) {
    return u.chunks[static_cast<std::size_t>(a)].tokens > u.chunks[static_cast<std::size_t>(b)].tokens;
  });
  const std::vector<std::int32_t> retrieved(by_size.begin(), by_size.begin() + 3);
  for (auto& q : u.queries) q.retrieved = retrieved;  // (the QA bank answers none: 0.87 < 0.90)
  const auto tokens = [&](std::size_t k) { return u.chunks[static_cast<std::size_t>(retrieved[k])].tokens; };
  const policies::PipelineConfig cfg = policies::testing::table1_pipeline();
  const models::CostModel cost(policies::testing::llama_fp32_act());
  const double bytes_per_token = cost.spec().qkv_bytes_per_token(cost.spec().activation_dtype);
  const double limit_gb =
      static_cast<double>(cfg.system_prompt_tokens + tokens(0) + tokens(1) / 2) * bytes_per_token / 1e9;
  const std::string schedule = fmt::format("[{{after_query: 2, set: {{storage_limit_gb: {:.17g}}}}}]", limit_gb);
  StageSetup setup;
  setup.policy = fmt::format("{{impl: percache, tau_query: 0.90, prediction: false, schedule: {}}}", schedule);
  setup.kv_reuse = "{impl: chunk_tree, payload: qkv}";
  setup.prefill = "{impl: qkv_reuse, unit: cpu}";
  setup.idle = fmt::format("{{impl: percache_scheduler, prediction: false, schedule: {}}}", schedule);
  setup.payload = kvsplit::Payload::kQkv;
  const auto& old = policies::testing::loop_values::loop_run("schedule/lowered_limit");
  const StageRun run = run_pipeline(trace, cfg, setup, true, cost, 0.90);
  ASSERT_EQ(run.served.size(), 4u);
  const std::int64_t boundary = 4;
  EXPECT_EQ(run.served[1].reused_tokens, cfg.system_prompt_tokens + tokens(0) + tokens(1) + tokens(2) - boundary);
  EXPECT_EQ(run.served[2].reused_tokens, cfg.system_prompt_tokens + tokens(0) - boundary);
  for (std::size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(fmt::format("query {}", i));
    EXPECT_FALSE(run.served[i].answer_hit);
    EXPECT_EQ(run.served[i].reused_tokens, old.records[i].reused_tokens);
    EXPECT_EQ(sim::from_seconds(run.served[i].times.end_s - run.served[i].times.arrival_s),
              sim::from_seconds(old.records[i].end_s - old.records[i].arrival_s));
  }
  EXPECT_EQ(run.engine().kv_tree()->limit_bytes(), limit_gb * 1e9);
  EXPECT_LE(run.pipeline->reuse().stored_bytes(), limit_gb * 1e9);
}

// The same through the apps of a composed run: a `pipeline` app configured like figure 15b's
// oracle_scheduler policy (answer cache at 0.90, the idle stage's schedule dropping it to 0.85 after
// query 5) and the `rag` app under that policy (now served by its translated stages), on a
// generated user re-timed to a question every 3000 s: every answer of both ends at the same
// nanosecond, with the same QA-bank outcome, as the rag app's under the loop (pinned), and the
// rag app's records are the loop's.
TEST(ScheduleInTheApp, PipelineAppLikeFig15bAndTheRagAppEndEveryAnswerWhenTheRagAppsLoopDid) {
  const traces::RagTrace trace = generated("users: 1\nqueries: {per_user: 10}");
  const std::string common =
      "model: {base: llama-3.2-3b, weight_dtype: int4, activation_dtype: fp32, kv_dtype: fp32, linear_dtypes: "
      "{v_proj: int6, ffn_down: int6}}, workload: {generate: default}, interarrival_s: 3000";
  const std::string shared = "abstract_source: topics, predictor: {impl: oracle}, scheduler: true, schedule: "
                             "[{after_query: 5, set: {tau_query: 0.85}}]";
  policies::AppEnvironment env;
  env.rag_workload = [&](const YAML::Node&, const ConfigSource&) { return trace; };
  auto stages = Registry<policies::App>::instance().create(
      YAML::Load("{impl: pipeline, " + common +
                 ", unit: cpu, system_prompt_tokens: 64, top_k: 3, answer_cache: {impl: semantic, tau_query: 0.90, "
                 "embed_ms: 0, match_ms: 0}, kv_reuse: {impl: chunk_tree, payload: qkv}, prefill: {impl: qkv_reuse}, "
                 "idle: {impl: percache_scheduler, " + shared + "}}"),
      ConfigSource{});
  auto rag_app = Registry<policies::App>::instance().create(
      YAML::Load("{impl: rag, " + common +
                 ", pipeline: {compute_unit: cpu, system_prompt_tokens: 64, top_k: 3}, policy: {impl: percache, "
                 "tau_query: 0.90, " + shared + "}}"),
      ConfigSource{});
  stages->prepare(env);
  rag_app->prepare(env);
  const devices::DeviceProfile phone = devices::load_device_profile("pixel7");
  const auto served = mobisim::testing::run_pipeline_alone(*stages, phone).served;
  const h5::Table rag = policies::testing::stages::rag_app_records_alone(*rag_app, phone);
  const auto& pinned =
      policies::testing::stages::expect_rag_app_records_as_the_loop(rag, "rag_app/fig15b_oracle_scheduler_3000s");
  const std::vector<double>& loop_end = policies::testing::loop_values::column(pinned, "end_s");
  const std::vector<double>& loop_hit = policies::testing::loop_values::column(pinned, "qa_hit");
  ASSERT_EQ(loop_end.size(), served.size());
  int hits = 0;
  for (std::size_t i = 0; i < served.size(); ++i) {
    EXPECT_EQ(sim::from_seconds(served[i].times.end_s), sim::from_seconds(loop_end[i])) << "request " << i;
    EXPECT_EQ(served[i].answer_hit, loop_hit[i] != 0) << "request " << i;
    hits += served[i].answer_hit;
  }
  EXPECT_GT(hits, 0);
}

// --- Bad schedules: ConfigErrors naming the key, before the run. ---

Pipeline build_pipeline(const char* reuse, const std::string& idle) {
  const models::CostModel cost(policies::testing::llama_fp32_act());
  return Pipeline(cost, options_on("cpu"), stage<KvReuse>(reuse), stage<kvsplit::KvSplitStrategy>("{impl: always_load}"),
                  nullptr, stage<AnswerCache>("{impl: semantic, embed_ms: 0, match_ms: 0}"), nullptr, nullptr,
                  stage<IdleStage>(idle));
}

TEST(ScheduleConfig, AStorageLimitChangeWithoutAChunkTreeIsAConfigErrorNamingTheKey) {
  const std::string idle = "{impl: percache_scheduler, reuse_mode: prefix_skip, schedule: [{after_query: 1, set: "
                           "{tau_query: 0.9}}, {after_query: 3, set: {storage_limit_gb: 4}}]}";
  mobisim::testing::expect_config_error_naming([&] { build_pipeline("{impl: prefix_store}", idle); },
                                               {"schedule[1].set.storage_limit_gb", "chunk_tree"});
  // The same with a chunk_tree is fine, and so is a threshold change without one.
  EXPECT_NO_THROW(build_pipeline("{impl: chunk_tree, payload: kv}", idle));
  EXPECT_NO_THROW(build_pipeline("{impl: prefix_store}", "{impl: percache_scheduler, reuse_mode: prefix_skip, "
                                                         "schedule: [{after_query: 1, set: {tau_query: 0.9}}]}"));
}

TEST(ScheduleConfig, AMalformedScheduleIsAConfigErrorNamingIt) {
  const auto expect_error = [](const std::string& schedule, const std::vector<std::string>& words) {
    SCOPED_TRACE(schedule);
    mobisim::testing::expect_config_error_naming(
        [&] { stage<IdleStage>("{impl: percache_scheduler, schedule: " + schedule + "}"); }, words);
  };
  // A key no stage owns (the answer cache's capacity is not schedulable; the loop's policy refuses it too).
  expect_error("[{after_query: 1, set: {capacity_mb: 50}}]", {"capacity_mb", "schedule[0].set"});
  expect_error("[{after_query: 1, set: {tau_scheduler: 0.8}}]", {"tau_scheduler"});
  expect_error("{after_query: 1, set: {tau_query: 0.9}}", {"schedule", "list"});
  expect_error("[{after_query: 0, set: {tau_query: 0.9}}]", {"after_query"});
  expect_error("[{set: {tau_query: 0.9}}]", {"after_query"});
  expect_error("[{after_query: 1, set: {tau_query: 1.5}}]", {"tau_query"});
  expect_error("[{after_query: 3, set: {tau_query: 0.9}}, {after_query: 2, set: {tau_query: 0.85}}]",
               {"schedule[1]", "after_query order"});
}

// The schedule is the idle stage's: an idle stage that takes none, or a pipeline app without an
// idle stage, names the key it does not know.
TEST(ScheduleConfig, AScheduleOutsideThePerCacheIdleStageIsAConfigErrorNamingIt) {
  mobisim::testing::expect_config_error_naming(
      [] { stage<IdleStage>("{impl: sleeptime, schedule: [{after_query: 1, set: {tau_query: 0.9}}]}"); },
      {"schedule"});
  mobisim::testing::expect_config_error_naming(
      [] {
        Registry<policies::App>::instance().create(
            YAML::Load("{impl: pipeline, model: {base: qwen2.5-0.5b}, unit: cpu, workload: {generate: default}, "
                       "answer_cache: {impl: semantic, embed_ms: 0, match_ms: 0}, schedule: [{after_query: 1, set: "
                       "{tau_query: 0.9}}]}"),
            ConfigSource{});
      },
      {"unknown key 'schedule'"});
}

}  // namespace
}  // namespace schedule_stage_tests
}  // namespace mobisim
