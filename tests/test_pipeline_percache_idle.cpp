// PerCache's and Sleep-time Compute's idle work as the pipeline's `idle` stage
// (policies/pipeline/percache_idle.h, sleeptime_idle.h) against their own request loop
// (CachingPolicy on RagPipeline, as the rag app runs it) on a generated trace: with the same caches as
// stages (answer_cache: semantic over the same QA bank, kv_reuse: chunk_tree over the same tree),
// every query has the same QA-bank outcome, the same reused tokens, the same latency to the
// nanosecond and the same background work before it (jobs, FLOPs, busy time, energy; the busy
// time and energy within 1e-9 relative: the stage issues a background decode token by token, so
// it can stop between tokens, which sums the same per-token times in another order).
// Also: idle work overtaken by the next request (it stops at its next step), the ConfigErrors of a
// stage an idle stage needs but the pipeline lacks, and the same equality through the apps of a
// composed run (the pipeline app against the rag app).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "experiments/simulation.h"
#include "policies/apps/app.h"
#include "policies/kvsplit/kv_split.h"
#include "policies/pipeline/caching_idle.h"
#include "policies/pipeline/pipeline.h"
#include "policies/rag/query_predictor.h"
#include "test_percache_util.h"
#include "test_pipeline_util.h"
#include "traces/workload.h"

namespace mobisim {
namespace idle_stage_tests {  // named: unity builds put test files together (their helpers' names recur)
namespace {

using namespace policies::pipeline;
namespace kvsplit = policies::kvsplit;
using policies::testing::generated;

using policies::testing::stages::kPerCache;
using policies::testing::stages::kPerCacheOracle;
using policies::testing::stages::kRagCacheSleepTime;
using policies::testing::stages::kSleepTime;
using policies::testing::stages::relative_difference;
using policies::testing::stages::run_pipeline;
using policies::testing::stages::stage;
using policies::testing::stages::StageRun;
using policies::testing::stages::StageSetup;

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
  const StageRun run = run_pipeline(trace, cfg, setup, true, cost);
  ASSERT_EQ(run.served.size(), old.records.size());
  const auto [hits, stale, reused, jobs] = policies::testing::stages::expect_each_query_as_the_loop(run.served, old.records);

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

// A history-based prediction (quiet_period_s 0: due right after query 0's deferred write) that does
// not fit before query 1, which comes 2 s after query 0's answer. Told when query 1 comes, the
// stage does not start it (query 1 is served as on an idle phone); not told, it starts it and query
// 1 interrupts it: query 1 queues behind the background step in flight (a prefill, or a decode
// token), less than the prediction's whole prefill later, the prediction is not counted, and it
// runs again from its start after query 1, so its FLOPs are spent twice.
TEST(IdleStageInterrupted, WorkOvertakenByTheNextRequestStopsAtItsNextStep) {
  traces::RagTrace trace = generated("users: 1\nqueries: {per_user: 3}");
  const policies::PipelineConfig cfg = policies::testing::table1_pipeline();
  const models::CostModel cost(policies::testing::llama_fp32_act());
  const StageSetup setup{"", "{impl: chunk_tree, payload: qkv}", "{impl: qkv_reuse, unit: cpu}",
                         "{impl: percache_scheduler, knowledge_prediction: false, quiet_period_s: 0}",
                         kvsplit::Payload::kQkv, true};
  auto& queries = trace.users[0].queries;
  queries[1].arrival_s = queries[0].arrival_s + 1e5;  // first, to learn when query 0 is answered
  queries[2].arrival_s = queries[1].arrival_s + 1e5;
  const double answered = run_pipeline(trace, cfg, setup, true, cost).served[0].times.end_s;
  queries[1].arrival_s = answered + 2.0;
  queries[2].arrival_s = queries[1].arrival_s + 1e5;
  const StageRun told = run_pipeline(trace, cfg, setup, true, cost);
  const StageRun not_told = run_pipeline(trace, cfg, setup, false, cost);
  ASSERT_EQ(told.served.size(), 3u);
  ASSERT_EQ(not_told.served.size(), 3u);
  const Served &a = told.served[1], &b = not_told.served[1];
  EXPECT_EQ(a.answer_hit, b.answer_hit);
  EXPECT_EQ(a.idle_work.jobs, 1);  // query 0's deferred write; the prediction did not fit
  EXPECT_EQ(b.idle_work.jobs, 1);  // the interrupted prediction is not counted
  // The prediction's prefill: PerCache's B.3 history prompt over query 0, counted as the engine counts it.
  const auto tokenizer = traces::make_tokenizer("");
  const auto prompt_tokens = static_cast<std::int64_t>(
      tokenizer->count(policies::history_prediction_prompt("meeting record", {queries[0].text}, 5)));
  const models::Work prefill = cost.prefill(models::PrefillShape{prompt_tokens, 0, 0, 1});
  const double prefill_s =
      devices::load_device_profile("pixel7").compute_seconds("cpu", prefill, cost.spec().weight_dtype, "test");
  const double delay = (b.times.end_s - b.times.arrival_s) - (a.times.end_s - a.times.arrival_s);
  EXPECT_GT(delay, 0.0);
  EXPECT_LT(delay, prefill_s);
  // By query 2 (1e5 s later) both ran every job; the interrupted one's work was spent twice.
  EXPECT_EQ(told.served[2].idle_work.jobs, not_told.served[2].idle_work.jobs);
  const double spent_told = told.served[1].idle_work.flops + told.served[2].idle_work.flops;
  const double spent_not_told = not_told.served[1].idle_work.flops + not_told.served[2].idle_work.flops;
  EXPECT_GE(spent_not_told - spent_told, prefill.flops() * (1 - 1e-12));
  // The predictions were populated after query 1 (not told: also after query 2, when idle work goes on).
  EXPECT_GT(told.engine().predicted_queries(), 0);
  EXPECT_GE(not_told.engine().predicted_queries(), told.engine().predicted_queries());
}

// The idle stage meets the answer cache and the KV-reuse stage it needs when the pipeline is built.
TEST(IdleStageLink, AStageItNeedsButThePipelineLacksIsAConfigError) {
  const models::CostModel cost(policies::testing::llama_fp32_act());
  auto build = [&](const char* answers, const char* reuse, const char* idle) {
    return Pipeline(cost, options_on("cpu"), stage<KvReuse>(reuse), stage<kvsplit::KvSplitStrategy>("{impl: always_load}"),
                    nullptr, answers ? stage<AnswerCache>(answers) : nullptr, nullptr, nullptr, stage<IdleStage>(idle));
  };
  const char* semantic = "{impl: semantic, embed_ms: 0, match_ms: 0}";
  for (const char* idle : {"{impl: percache_scheduler}", "{impl: sleeptime}"}) {
    SCOPED_TRACE(idle);
    try {
      build(nullptr, "{impl: chunk_tree, payload: qkv}", idle);
      ADD_FAILURE() << "no ConfigError without an answer cache";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("answer_cache: {impl: semantic"), std::string::npos) << e.what();
    }
  }
  // What the background prefills save must be what the tree stores.
  EXPECT_THROW(build(semantic, "{impl: chunk_tree, payload: kv}", "{impl: percache_scheduler}"), ConfigError);
  EXPECT_THROW(build(semantic, "{impl: chunk_tree, payload: qkv}", "{impl: sleeptime}"), ConfigError);
  EXPECT_NO_THROW(build(semantic, "{impl: chunk_tree, payload: qkv}", "{impl: percache_scheduler}"));
  EXPECT_NO_THROW(build(semantic, "{impl: prefix_store}", "{impl: sleeptime}"));  // a QA bank alone
}

// PerCache without its QA bank (figure 16's ablation): the stage says so (qa_bank: false, with the
// embedding cost no answer cache then charges), links to the tree alone, and a pipeline that does
// not match is refused, naming the key.
TEST(IdleStageLink, PerCacheWithoutItsQaBankWorksOnTheTreeAlone) {
  const models::CostModel cost(policies::testing::llama_fp32_act());
  auto build = [&](const char* answers, const char* reuse, const char* idle) {
    return Pipeline(cost, options_on("cpu"), stage<KvReuse>(reuse), stage<kvsplit::KvSplitStrategy>("{impl: always_load}"),
                    nullptr, answers ? stage<AnswerCache>(answers) : nullptr, nullptr, nullptr, stage<IdleStage>(idle));
  };
  const char* no_bank = "{impl: percache_scheduler, qa_bank: false, embed_ms: 1600}";
  const char* tree = "{impl: chunk_tree, payload: qkv}";
  EXPECT_NO_THROW(build(nullptr, tree, no_bank));
  testing::expect_config_error_naming([&] { build("{impl: semantic, embed_ms: 0, match_ms: 0}", tree, no_bank); },
                                      {"qa_bank: false", "answer cache"});
  testing::expect_config_error_naming([&] { build(nullptr, "{impl: none}", no_bank); }, {"qa_bank: false", "chunk_tree"});
  // embed_ms goes with qa_bank: false, and only with it.
  testing::expect_config_error_naming([&] { (void)stage<IdleStage>("{impl: percache_scheduler, qa_bank: false}"); },
                                      {"embed_ms", "qa_bank: false"});
  testing::expect_config_error_naming([&] { (void)stage<IdleStage>("{impl: percache_scheduler, embed_ms: 5}"); },
                                      {"embed_ms"});
  // The answer-cache error says how to run without one.
  testing::expect_config_error_naming([&] { build(nullptr, tree, "{impl: percache_scheduler}"); },
                                      {"answer_cache: {impl: semantic", "qa_bank: false"});
}

// RAGCache / MeanCache's reactive update works on whichever caches the app has (and says it stores
// what they keep, so the pipeline does not store it after the answer); an app with neither is
// refused, naming the stage and what it needs.
TEST(IdleStageLink, ReactiveStoreWorksOnTheAppsAnswerCacheOrTreeOrBoth) {
  const models::CostModel cost(policies::testing::llama_fp32_act());
  const char* semantic = "{impl: semantic, embed_ms: 0, match_ms: 0}";
  const char* tree = "{impl: chunk_tree, payload: kv}";
  struct Case {
    const char* answers;
    const char* reuse;
    bool stores_answers, stores_kv;
  };
  for (const Case& c : {Case{semantic, "{impl: none}", true, false}, Case{nullptr, tree, false, true},
                        Case{semantic, tree, true, true}}) {
    SCOPED_TRACE(fmt::format("{} / {}", c.answers ? c.answers : "no answer cache", c.reuse));
    auto idle = stage<IdleStage>("{impl: reactive_store}");
    IdleStage& linked = *idle;
    const Pipeline p(cost, options_on("cpu"), stage<KvReuse>(c.reuse), stage<kvsplit::KvSplitStrategy>("{impl: always_load}"),
                     nullptr, c.answers ? stage<AnswerCache>(c.answers) : nullptr, nullptr, nullptr, std::move(idle));
    EXPECT_EQ(linked.stores_answers(), c.stores_answers);
    EXPECT_EQ(linked.stores_kv(), c.stores_kv);
  }
  auto build = [&](const char* answers, const char* reuse, const char* idle) {
    return Pipeline(cost, options_on("cpu"), stage<KvReuse>(reuse), stage<kvsplit::KvSplitStrategy>("{impl: always_load}"),
                    nullptr, answers ? stage<AnswerCache>(answers) : nullptr, nullptr, nullptr, stage<IdleStage>(idle));
  };
  testing::expect_config_error_naming([&] { build(nullptr, "{impl: none}", "{impl: reactive_store}"); },
                                      {"reactive_store", "answer_cache: {impl: semantic", "chunk_tree"});
  // What a slice holds must be what the tree stores (kv_projection by default: payload kv).
  EXPECT_THROW(build(nullptr, "{impl: chunk_tree, payload: qkv}", "{impl: reactive_store}"), ConfigError);
  EXPECT_NO_THROW(build(nullptr, "{impl: chunk_tree, payload: qkv}", "{impl: reactive_store, reuse_mode: qkv_projection}"));
  testing::expect_config_error_naming([&] { (void)stage<IdleStage>("{impl: reactive_store, reuse_mode: all}"); },
                                      {"reuse_mode", "all"});
}

// Query prediction reads a RAG workload's texts: a chat conversation is refused before the run.
TEST(IdleStageLink, AnEngineStageOnAConversationIsAConfigErrorBeforeTheRun) {
  auto app = Registry<policies::App>::instance().create(
      YAML::Load("{impl: pipeline, model: {base: qwen2.5-0.5b}, unit: cpu, conversation: {turns: 2}, interarrival_s: "
                 "60, answer_cache: {impl: semantic, embed_ms: 0, match_ms: 0}, idle: {impl: sleeptime}}"),
      ConfigSource{});
  try {
    app->prepare(policies::AppEnvironment{});
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not a `conversation:`"), std::string::npos) << e.what();
  }
}

// The same through the apps of a composed run: the `pipeline` app with PerCache's stages and its
// idle stage (compose (a)'s percache_stages) and the `rag` app under the `percache` policy, on a
// generated user re-timed to a question every 300 s: every answer ends at the same nanosecond,
// and the pipeline app's records carry the idle work before each request.
TEST(IdleStageInTheApp, PipelineAppWithPerCachesStagesEndsEveryAnswerWhenTheRagAppDoes) {
  const traces::RagTrace trace = generated("users: 1\nqueries: {per_user: 8}");
  const std::string common =
      "model: {base: llama-3.2-3b, weight_dtype: int4, activation_dtype: fp32, kv_dtype: fp32, linear_dtypes: "
      "{v_proj: int6, ffn_down: int6}}, workload: {generate: default}, interarrival_s: 300";
  policies::AppEnvironment env;
  env.rag_workload = [&](const YAML::Node&, const ConfigSource&) { return trace; };
  auto stages = Registry<policies::App>::instance().create(
      YAML::Load("{impl: pipeline, " + common +
                 ", unit: cpu, system_prompt_tokens: 64, top_k: 3, answer_cache: {impl: semantic, embed_ms: 0, "
                 "match_ms: 0}, kv_reuse: {impl: chunk_tree, payload: qkv}, prefill: {impl: qkv_reuse}, idle: {impl: "
                 "percache_scheduler}}"),
      ConfigSource{});
  auto loop = Registry<policies::App>::instance().create(
      YAML::Load("{impl: rag, " + common +
                 ", pipeline: {compute_unit: cpu, system_prompt_tokens: 64, top_k: 3}, policy: {impl: percache}}"),
      ConfigSource{});
  stages->prepare(env);
  loop->prepare(env);
  const devices::DeviceProfile phone = devices::load_device_profile("pixel7");
  const auto served = testing::run_pipeline_alone(*stages, phone).served;
  h5::Table rag, mine;
  {
    sim::StatGroup stats("phone");
    experiments::SimulatedRun run(phone, stats.child("device"));
    run.start(loop->run(run.device(), "rag", stats.child("rag")), "rag");
    run.run();
    loop->records(rag);
  }
  stages->records(mine);
  const auto& rag_end = std::get<std::vector<double>>(rag.column("end_s"));
  const auto& rag_hit = std::get<std::vector<std::int64_t>>(rag.column("qa_hit"));
  ASSERT_EQ(rag_end.size(), served.size());
  for (std::size_t i = 0; i < served.size(); ++i) {
    EXPECT_EQ(sim::from_seconds(served[i].times.end_s), sim::from_seconds(rag_end[i])) << "request " << i;
    EXPECT_EQ(served[i].answer_hit, rag_hit[i] != 0) << "request " << i;
  }
  const auto& jobs = std::get<std::vector<std::int64_t>>(mine.column("bg_jobs"));
  std::int64_t total = 0;
  for (auto j : jobs) total += j;
  EXPECT_EQ(jobs.front(), 0);  // the first question comes at 0 s: no idle time before it
  // After every answer but the last: its deferred write, and the abstract and predictions.
  EXPECT_GT(total, static_cast<std::int64_t>(served.size()));
}

}  // namespace
}  // namespace idle_stage_tests
}  // namespace mobisim
