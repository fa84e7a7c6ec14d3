// The pipeline app's stage slots: a stored prefix found by the KV-reuse stage, brought back by a
// load-or-recompute strategy whose plan the device then executes (the event path must take
// exactly the time the strategy's closed form plans), and the request's K/V held in DRAM.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>

#include "devices/device.h"
#include "devices/npu_prefill.h"
#include "experiments/simulation.h"
#include "policies/apps/app.h"
#include "models/cost_model.h"
#include "policies/apps/pipeline_app.h"
#include "policies/specdec/specdec_policy.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "test_pipeline_util.h"

namespace mobisim {
namespace {

using policies::App;
using policies::PipelineApp;

using testing::three_chunk_workload;

std::unique_ptr<App> pipeline_app(const std::string& stages, int queries, std::int32_t query_tokens = 20) {
  const YAML::Node node = YAML::Load(fmt::format(
      "{{impl: pipeline, model: {{base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}}, "
      "unit: cpu, workload: {{generate: default}}, system_prompt_tokens: 64, top_k: 3, {}}}",
      stages));
  auto app = Registry<App>::instance().create(node, ConfigSource{});
  policies::AppEnvironment env;
  env.rag_workload = [queries, query_tokens](const YAML::Node&, const ConfigSource&) {
    return three_chunk_workload(queries, query_tokens);
  };
  app->prepare(env);
  return app;
}

std::vector<policies::pipeline::Served> served_alone(App& app, const devices::DeviceProfile& profile) {
  return testing::run_pipeline_alone(app, profile).served;
}

TEST(PipelineStages, PrefixStoreReusesTheLongestStoredPrefixOfTheNextPrompt) {
  // Prompts: 64 system + 3 x 100 chunk + 20 query = 384 tokens; the next prompt shares 364.
  auto app = pipeline_app("kv_reuse: {impl: prefix_store, granularities: [64, 128, 256, 512]}", 2);
  const auto served = served_alone(*app, devices::load_device_profile("pixel7"));
  ASSERT_EQ(served.size(), 2u);
  EXPECT_EQ(served[0].prompt_tokens, 384);
  EXPECT_EQ(served[0].reused_tokens, 0);
  EXPECT_EQ(served[1].reused_tokens, 256);  // the longest stored granularity within the shared 364
  EXPECT_EQ(served[1].loaded_tokens, 256);  // always_load (the default): all of it from flash
  EXPECT_GT(served[0].stored.bytes, 0.0);
}

class SplitOnTheDevice : public ::testing::TestWithParam<const char*> {};

TEST_P(SplitOnTheDevice, TakesExactlyWhatTheStrategyPlans) {
  auto app = pipeline_app(fmt::format("kv_reuse: {{impl: prefix_store, granularities: [64, 128, 256]}}, "
                                      "load_or_recompute: {{impl: {}}}",
                                      GetParam()),
                          3);
  const auto served = served_alone(*app, devices::load_device_profile("pixel7"));
  ASSERT_EQ(served.size(), 3u);
  for (std::size_t i = 1; i < served.size(); ++i) {
    EXPECT_EQ(served[i].reused_tokens, 256);
    EXPECT_EQ(served[i].recomputed_tokens + served[i].loaded_tokens, 256);
    // Nothing else runs on the phone: the recompute and the flash read overlap exactly as planned
    // (the plan's time and the events' agree to the nanosecond the simulator rounds to).
    EXPECT_NEAR(served[i].split_s, served[i].split_estimate_s, 1e-9) << GetParam();
    EXPECT_GT(served[i].split_s, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, SplitOnTheDevice,
                         ::testing::Values("always_load", "always_recompute", "cake", "kvpr_ilp"));

TEST(PipelineStages, ReusedTokensAreNotPrefilledAgain) {
  auto with = pipeline_app("kv_reuse: {impl: prefix_store, granularities: [64, 128, 256]}", 2);
  auto without = pipeline_app("kv_reuse: {impl: none}", 2);
  const auto a = served_alone(*with, devices::load_device_profile("pixel7"));
  const auto b = served_alone(*without, devices::load_device_profile("pixel7"));
  EXPECT_DOUBLE_EQ(a[0].prefill_s, b[0].prefill_s);  // nothing stored yet: the same prefill
  EXPECT_LT(a[1].prefill_s, b[1].prefill_s);         // 128 of 384 tokens computed instead of 384
}

TEST(PipelineStages, ARequestWhoseKvDoesNotFitInDramStopsTheRun) {
  // 50 MB usable; Qwen2.5-0.5B's fp16 K/V is 12 KB a token: a 6,000-token prompt cannot be held.
  auto app = pipeline_app("kv_reuse: {impl: none}", 1, 5636);
  const devices::DeviceProfile tight =
      devices::load_device_profile(YAML::Load("{base: pixel7, dram: {capacity_gb: 3.05}}"), ConfigSource{});
  try {
    served_alone(*app, tight);
    FAIL() << "expected the run to stop";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'app/kv' needs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mobisim

namespace mobisim {
namespace {

TEST(PipelineStages, NpuGraphPrefillLoadsItsGraphOnceHoldsItsWeightsAndRunsPaddedChunks) {
  // Prompts of 384 tokens on a 128-token graph: 3 executions each; decode stays on the CPU.
  auto app = pipeline_app("prefill: {impl: npu_graphs, chunk: 128}", 2);
  const devices::DeviceProfile profile = devices::load_device_profile("oneplus-12");
  const models::CostModel cost(models::load_model_spec(
      YAML::Load("{base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}"), ConfigSource{}));
  sim::StatGroup stats("phone");
  double graph_bytes = 0;
  {
    experiments::SimulatedRun run(profile, stats.child("device"));
    run.start(app->run(run.device(), "app", stats.child("app")), "app");
    run.run();
    graph_bytes = run.device().dram().held_by("app/npu_graph");
  }
  const auto& served = dynamic_cast<PipelineApp&>(*app).served();
  ASSERT_EQ(served.size(), 2u);
  const devices::NpuSpec& npu = *profile.npu;
  // The first request waits for the graph load (the app's start); the second does not load again.
  EXPECT_DOUBLE_EQ(served[0].times.start_s,
                   sim::to_seconds(sim::from_seconds(npu.graph_load_seconds(cost.spec().n_layers))));
  EXPECT_DOUBLE_EQ(served[1].times.start_s, 1000.0);
  // The graphs without the final norm and LM head, then those on the CPU (lm_head_unit: cpu, mllm): the
  // norm of the last chunk's 128 rows and the fp32 head of one row.
  const double head_s = profile.unit("cpu", "test").seconds(
      policies::specdec::cpu_lm_head_work(cost.spec(), 128, 1, models::DType::kF32), models::DType::kF32);
  EXPECT_GT(head_s, 0.0);
  EXPECT_DOUBLE_EQ(served[1].prefill_s,
                   sim::to_seconds(sim::from_seconds(devices::chunked_prefill_seconds(npu, cost, 384, 0, 128, 0)) +
                                   sim::from_seconds(head_s)));
  EXPECT_DOUBLE_EQ(graph_bytes, cost.spec().weight_bytes());
  // lm_head_unit: npu: the head of the last row inside the last chunk's graph, as before.
  auto inside = pipeline_app("prefill: {impl: npu_graphs, chunk: 128, lm_head_unit: npu}", 2);
  const auto on_npu = served_alone(*inside, profile);
  ASSERT_EQ(on_npu.size(), 2u);
  EXPECT_DOUBLE_EQ(on_npu[1].prefill_s, sim::to_seconds(sim::from_seconds(npu.chunked_prefill_seconds(cost, 384, 0, 128))));
}

}  // namespace
}  // namespace mobisim

namespace mobisim {
namespace {

TEST(PipelineStages, AnAnswerCacheHitEndsTheRequestAfterItsLookUp) {
  // Query 1 repeats query 0 (same embedding); query 2 is orthogonal to both.
  traces::RagTrace t = three_chunk_workload(3, 20);
  t.users[0].queries[0].embedding = {1.0f, 0.0f};
  t.users[0].queries[1].embedding = {1.0f, 0.0f};
  t.users[0].queries[2].embedding = {0.0f, 1.0f};
  const YAML::Node node = YAML::Load(
      "{impl: pipeline, model: {base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}, "
      "unit: cpu, workload: {generate: default}, "
      "answer_cache: {impl: semantic, tau_query: 0.9, embed_ms: 100, match_ms: 10}}");
  auto app = Registry<App>::instance().create(node, ConfigSource{});
  policies::AppEnvironment env;
  env.rag_workload = [&](const YAML::Node&, const ConfigSource&) { return t; };
  app->prepare(env);
  const auto served = served_alone(*app, devices::load_device_profile("pixel7"));
  ASSERT_EQ(served.size(), 3u);
  EXPECT_FALSE(served[0].answer_hit);
  EXPECT_TRUE(served[1].answer_hit);
  EXPECT_FALSE(served[2].answer_hit);
  // A hit costs its look-up alone: 110 ms from arrival to the answer, no prefill.
  EXPECT_NEAR(served[1].times.end_s - served[1].times.arrival_s, 0.11, 1e-9);
  EXPECT_EQ(served[1].prefill_s, 0.0);
  // A miss pays the look-up too, before its prefill.
  EXPECT_GT(served[2].times.first_token_s - served[2].times.start_s, served[2].prefill_s + 0.109);
}

TEST(PipelineStages, AnAnswerCacheWithoutMeasuredCostsIsAConfigError) {
  const YAML::Node node = YAML::Load(
      "{impl: pipeline, model: {base: qwen2.5-0.5b}, workload: {generate: default}, "
      "answer_cache: {impl: semantic, tau_query: 0.9}}");
  try {
    Registry<App>::instance().create(node, ConfigSource{});
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("embed_ms"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mobisim

namespace mobisim {
namespace {

TEST(PipelineStages, WithNoStagesThePipelineServesAsTheRagDocumentsNaiveBaseline) {
  // The same queries through the pipeline app (no answer cache, no K/V reuse) and through the rag
  // app under PerCache's naive baseline (no embedding or retrieval cost charged): every answer
  // ends at the same nanosecond, so the one pipeline's prefill and decode are the RAG pipeline's.
  const traces::RagTrace t = three_chunk_workload(3, 20);
  const std::string model = "model: {base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}";
  policies::AppEnvironment env;
  env.rag_workload = [&](const YAML::Node&, const ConfigSource&) { return t; };
  auto through_pipeline = Registry<App>::instance().create(
      YAML::Load("{impl: pipeline, " + model + ", unit: cpu, workload: {generate: default}}"), ConfigSource{});
  auto naive = Registry<App>::instance().create(
      YAML::Load("{impl: rag, " + model +
                 ", pipeline: {compute_unit: cpu, system_prompt_tokens: 64, top_k: 3}, policy: {impl: naive}, "
                 "workload: {generate: default}}"),
      ConfigSource{});
  through_pipeline->prepare(env);
  naive->prepare(env);
  const devices::DeviceProfile phone = devices::load_device_profile("pixel7");
  const auto served = served_alone(*through_pipeline, phone);
  h5::Table rag;
  {
    sim::StatGroup stats("phone");
    experiments::SimulatedRun run(phone, stats.child("device"));
    run.start(naive->run(run.device(), "rag", stats.child("rag")), "rag");
    run.run();
    naive->records(rag);
  }
  const auto& rag_end = std::get<std::vector<double>>(rag.column("end_s"));
  ASSERT_EQ(rag_end.size(), served.size());
  for (std::size_t i = 0; i < served.size(); ++i) EXPECT_EQ(served[i].times.end_s, rag_end[i]) << "request " << i;
}

}  // namespace
}  // namespace mobisim
