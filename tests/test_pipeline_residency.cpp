// The pipeline's KV-residency slot: `dynakv` with a cache that holds the whole K/V is the `dram`
// residency; with a smaller cache it holds that share in DRAM and its decode steps read the
// clusters that miss it from the phone's one flash, where they queue behind another app's reads
// and, on a slow enough flash, hold the decode up. The conversation workload and bad YAML too.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>

#include "devices/device.h"
#include "experiments/simulation.h"
#include "models/cost_model.h"
#include "policies/apps/app.h"
#include "policies/apps/pipeline_app.h"
#include "policies/pipeline/dynakv_residency.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "test_pipeline_util.h"
#include "test_util.h"

namespace mobisim {
namespace pipeline_residency_test {  // named: unity builds put several test files in one TU

using policies::App;
using policies::PipelineApp;

constexpr const char* kModel = "{base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}";

std::unique_ptr<App> chat_with(const std::string& stages) {
  const YAML::Node node = YAML::Load(fmt::format(
      "{{impl: pipeline, model: {}, unit: cpu, system_prompt_tokens: 64, interarrival_s: 600, "
      "conversation: {{turns: 3, prompt_tokens: 96, answer_tokens: 48}}{}{}}}",
      kModel, stages.empty() ? "" : ", ", stages));
  auto app = Registry<App>::instance().create(node, ConfigSource{});
  app->prepare(policies::AppEnvironment{});
  return app;
}

using Ran = testing::PipelineRun;

Ran run_alone(App& app, const devices::DeviceProfile& profile) { return testing::run_pipeline_alone(app, profile); }

double kv_per_token() {
  return models::load_model_spec(YAML::Load(kModel), ConfigSource{}).kv_bytes_per_token();
}

TEST(PipelineResidency, AConversationsPromptsGrowByEveryEarlierTurn) {
  auto app = chat_with("");
  const Ran r = run_alone(*app, devices::load_device_profile("pixel7"));
  ASSERT_EQ(r.served.size(), 3u);
  EXPECT_EQ(r.served[0].prompt_tokens, 64 + 96);
  EXPECT_EQ(r.served[1].prompt_tokens, 64 + 96 + 48 + 96);
  EXPECT_EQ(r.served[2].prompt_tokens, 64 + 2 * (96 + 48) + 96);
  EXPECT_DOUBLE_EQ(r.served[2].times.arrival_s, 1200.0);
}

TEST(PipelineResidency, DynaKvWithACacheHoldingEverythingIsTheDramResidency) {
  const devices::DeviceProfile phone = devices::load_device_profile("pixel7");
  auto dram = chat_with("kv_reuse: {impl: prefix_store, granularities: [64, 128, 256]}");
  auto dynakv = chat_with(
      "kv_reuse: {impl: prefix_store, granularities: [64, 128, 256]}, kv_residency: {impl: dynakv, cache_ratio: 1}");
  const Ran a = run_alone(*dram, phone), b = run_alone(*dynakv, phone);
  ASSERT_EQ(a.served.size(), b.served.size());
  for (std::size_t i = 0; i < a.served.size(); ++i) {
    EXPECT_EQ(a.served[i].times.end_s, b.served[i].times.end_s) << i;
    EXPECT_EQ(a.served[i].times.active_energy_j, b.served[i].times.active_energy_j) << i;
    EXPECT_EQ(b.served[i].kv_read_bytes, 0.0);
  }
  EXPECT_EQ(a.peaks.at("app/kv"), b.peaks.at("app/kv"));
  EXPECT_DOUBLE_EQ(a.peaks.at("app/kv"), (64 + 2 * (96 + 48) + 96 + 48) * kv_per_token());  // the last turn's
}

TEST(PipelineResidency, DynaKvHoldsItsCacheShareInDramAndReadsTheMissesFromFlash) {
  const devices::DeviceProfile phone = devices::load_device_profile("pixel7");
  auto dynakv = chat_with("kv_residency: {impl: dynakv, cache_ratio: 0.25}");
  const Ran r = run_alone(*dynakv, phone);
  EXPECT_DOUBLE_EQ(r.peaks.at("app/kv"), 0.25 * (64 + 2 * (96 + 48) + 96 + 48) * kv_per_token());
  for (const auto& s : r.served) EXPECT_GT(s.kv_read_bytes, 0.0);
  // A longer context retrieves more (top-k is a share of the cache).
  EXPECT_GT(r.served[2].kv_read_bytes, r.served[0].kv_read_bytes);
}

TEST(PipelineResidency, OnASlowFlashTheReadsHoldTheDecodeUp) {
  const devices::DeviceProfile slow = devices::load_device_profile(
      YAML::Load("{base: pixel7, storage: {seq_read_gbps: 0.005}}"), ConfigSource{});
  auto dram = chat_with("");
  auto dynakv = chat_with("kv_residency: {impl: dynakv, cache_ratio: 0.1}");
  const Ran a = run_alone(*dram, slow), b = run_alone(*dynakv, slow);
  for (std::size_t i = 0; i < a.served.size(); ++i) {
    EXPECT_GT(b.served[i].decode_s, a.served[i].decode_s) << i;
    // At least the bytes over the flash's bandwidth (reads overlap the compute, not each other's bus).
    EXPECT_GE(b.served[i].decode_s, b.served[i].kv_read_bytes / 0.005e9) << i;
  }
}

sim::Task<void> timed_step(devices::Device& d, policies::pipeline::KvResidency& r, std::int64_t context, double& took) {
  co_await d.sim().timeout(sim::from_seconds(100.0));  // the prompt's offload write is long done
  const sim::Time t0 = d.sim().now();
  co_await r.step(d, context);
  took = sim::to_seconds(d.sim().now() - t0);
}

sim::Task<void> other_app_reads(devices::Device& d, double bytes) {
  co_await d.sim().timeout(sim::from_seconds(100.0));
  co_await d.storage().read(bytes, "other app");
}

double step_seconds(bool with_other_reader) {
  const devices::DeviceProfile phone = devices::load_device_profile("pixel7");
  const models::CostModel cost(models::load_model_spec(YAML::Load(kModel), ConfigSource{}));
  auto r = Registry<policies::pipeline::KvResidency>::instance().create(
      YAML::Load("{impl: dynakv, cache_ratio: 0.1}"), ConfigSource{});
  r->begin(cost);
  sim::StatGroup stats("phone");
  experiments::SimulatedRun run(phone, stats.child("device"));
  r->hold(run.device(), "app/kv", 2000, 64);
  const auto& steps = dynamic_cast<policies::pipeline::DynaKvResidency&>(*r).steps();
  EXPECT_EQ(steps.size(), 63u);
  EXPECT_GT(steps.at(10).runs, 0);
  double took = 0;
  run.start(timed_step(run.device(), *r, 2010, took), "step");
  if (with_other_reader) run.start(other_app_reads(run.device(), 200e6), "other");
  run.run();
  return took;
}

TEST(PipelineResidency, ADecodeStepsFlashReadsQueueBehindAnotherAppsReads) {
  const double alone = step_seconds(false), shared = step_seconds(true);
  EXPECT_GT(alone, 0.0);
  EXPECT_GT(shared, alone * 1.5) << alone << " vs " << shared;
}

// Turns of one KV session on one phone, straight through the residency stage.
struct SessionTurns {
  devices::DeviceProfile phone = devices::load_device_profile("pixel7");
  models::CostModel cost{models::load_model_spec(YAML::Load(kModel), ConfigSource{})};
  std::unique_ptr<policies::pipeline::KvResidency> r;
  sim::StatGroup stats{"phone"};
  experiments::SimulatedRun run{phone, stats.child("device")};
  explicit SessionTurns(const std::string& policy) {
    r = Registry<policies::pipeline::KvResidency>::instance().create(
        YAML::Load(fmt::format("{{impl: dynakv, cache_ratio: 0.1, policy: {{impl: {}}}}}", policy)), ConfigSource{});
    r->begin(cost);
  }
  policies::pipeline::DynaKvResidency& dynakv() { return dynamic_cast<policies::pipeline::DynaKvResidency&>(*r); }
  devices::Dram& dram() { return run.device().dram(); }
};

TEST(PipelineResidency, ALaterTurnPlacesOnlyItsNewTokensAmongTheClustersKeptFromTheTurnsBefore) {
  using policies::pipeline::KvTurn;
  for (const char* policy : {"dynakv", "pqcache", "clusterkv", "no_cluster"}) {
    SessionTurns t(policy);
    const double start = t.dram().used_bytes();
    // Turn 0: a 200-token prompt, 64 answer tokens (63 decode steps): the prompt is clustered whole.
    t.r->hold(t.run.device(), "app/kv", KvTurn{200, 64, 7, false});
    EXPECT_EQ(t.dynakv().prefilled_positions(), 200) << policy;
    EXPECT_EQ(t.dynakv().appended_positions(), 0) << policy;
    EXPECT_EQ(t.dynakv().steps().size(), 63u) << policy;
    t.r->release(t.run.device(), "app/kv");
    // Between turns the session is kept: its representatives stay in DRAM, the turn's cache does not.
    EXPECT_EQ(t.dynakv().sessions(), 1u) << policy;
    EXPECT_EQ(t.dram().held_by("app/kv"), 0.0) << policy;
    const double index = t.dram().held_by("app/kv/index");
    EXPECT_GT(index, 0.0) << policy;
    EXPECT_DOUBLE_EQ(t.dram().used_bytes(), start + index) << policy;
    // Turn 1: its prompt is turn 0's 200 + 64 and 50 new tokens. Only what the session does not hold
    // yet (the new 50 and the last answer token, whose K/V this prefill computes) is placed, without
    // any K-means over the 263 positions kept.
    t.r->hold(t.run.device(), "app/kv", KvTurn{314, 64, 7, true});
    EXPECT_EQ(t.dynakv().prefilled_positions(), 0) << policy;
    EXPECT_EQ(t.dynakv().appended_positions(), 51) << policy;
    EXPECT_EQ(t.dynakv().steps().size(), 63u) << policy;
    EXPECT_GE(t.dram().held_by("app/kv/index"), index) << policy;  // clusters are kept, never merged
    t.r->release(t.run.device(), "app/kv");
    // The last turn frees the session: the ledger is back where it started.
    EXPECT_EQ(t.dynakv().sessions(), 0u) << policy;
    EXPECT_EQ(t.dram().held_by("app/kv/index"), 0.0) << policy;
    EXPECT_DOUBLE_EQ(t.dram().used_bytes(), start) << policy;
    // The same prompt outside any session is clustered whole, and nothing is kept.
    t.r->hold(t.run.device(), "app/kv", 314, 64);
    EXPECT_EQ(t.dynakv().prefilled_positions(), 314) << policy;
    EXPECT_EQ(t.dynakv().appended_positions(), 0) << policy;
    t.r->release(t.run.device(), "app/kv");
    EXPECT_EQ(t.dynakv().sessions(), 0u) << policy;
    EXPECT_DOUBLE_EQ(t.dram().used_bytes(), start) << policy;
  }
}

TEST(PipelineResidency, AKeptSessionsFirstTurnIsTheRequestAloneAndAPromptThatDoesNotContinueItStartsAfresh) {
  using policies::pipeline::KvTurn;
  SessionTurns kept("dynakv"), alone("dynakv");
  kept.r->hold(kept.run.device(), "app/kv", KvTurn{200, 64, 0, false});
  alone.r->hold(alone.run.device(), "app/kv", 200, 64);
  const auto& a = kept.dynakv().steps();
  const auto& b = alone.dynakv().steps();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].runs, b[i].runs) << i;
    EXPECT_EQ(a[i].read_bytes, b[i].read_bytes) << i;
    EXPECT_EQ(a[i].write_bytes, b[i].write_bytes) << i;
  }
  kept.r->release(kept.run.device(), "app/kv");
  // 100 < the 263 positions held: not a continuation of the session.
  kept.r->hold(kept.run.device(), "app/kv", KvTurn{100, 64, 0, true});
  EXPECT_EQ(kept.dynakv().prefilled_positions(), 100);
  EXPECT_EQ(kept.dynakv().appended_positions(), 0);
  kept.r->release(kept.run.device(), "app/kv");
  EXPECT_EQ(kept.dynakv().sessions(), 0u);
  EXPECT_EQ(kept.dram().held_by("app/kv/index"), 0.0);
}

TEST(PipelineResidency, ASessionWhoseLastTurnNeedsNoKvIsFreedAllTheSame) {
  using policies::pipeline::KvTurn;
  SessionTurns t("dynakv");
  const double start = t.dram().used_bytes();
  t.r->hold(t.run.device(), "app/kv", KvTurn{200, 64, 3, false});
  t.r->release(t.run.device(), "app/kv");
  EXPECT_EQ(t.dynakv().sessions(), 1u);
  t.r->end_session(t.run.device(), "app/kv", 3);  // an answer cache served the last turn
  EXPECT_EQ(t.dynakv().sessions(), 0u);
  EXPECT_DOUBLE_EQ(t.dram().used_bytes(), start);
}

TEST(PipelineResidency, AConversationKeepsItsClustersBetweenTurnsAndFreesThemAfterTheLast) {
  const devices::DeviceProfile phone = devices::load_device_profile("pixel7");
  auto dynakv = chat_with("kv_residency: {impl: dynakv, cache_ratio: 0.25}");
  const Ran r = run_alone(*dynakv, phone);
  ASSERT_EQ(r.served.size(), 3u);
  EXPECT_GT(r.peaks.at("app/kv/index"), 0.0);
  // Less than a representative per position: the index is far smaller than the K/V.
  EXPECT_LT(r.peaks.at("app/kv/index"), 0.5 * (64 + 2 * (96 + 48) + 96 + 48) * kv_per_token());
}

TEST(PipelineResidency, ASpeculativeDecoderReadsOncePerVerification) {
  const devices::DeviceProfile phone = devices::load_device_profile("oneplus-12");
  auto vanilla = chat_with("kv_residency: {impl: dynakv, cache_ratio: 0.1}");
  auto sam = chat_with("decode: {impl: speculative, policy: {impl: npu_sam}}, kv_residency: {impl: dynakv, cache_ratio: 0.1}");
  const Ran a = run_alone(*vanilla, phone), b = run_alone(*sam, phone);
  for (std::size_t i = 0; i < a.served.size(); ++i) {
    EXPECT_GT(b.served[i].kv_read_bytes, 0.0) << i;
    // SAM drafts from the conversation (answers copy it): fewer verifications, fewer steps' reads.
    EXPECT_LT(b.served[i].decode_steps, a.served[i].decode_steps) << i;
    EXPECT_LT(b.served[i].kv_read_bytes, a.served[i].kv_read_bytes) << i;
  }
}

TEST(PipelineIdle, PrefetchPromotesTheLastPromptsStoredPrefixToDramForTheNextTurn) {
  const devices::DeviceProfile phone = devices::load_device_profile("pixel7");
  const std::string store = "kv_reuse: {impl: prefix_store, granularities: [64, 128, 256]}";
  auto without = chat_with(store);
  auto with = chat_with(store + ", idle: {impl: prefetch, quiet_s: 5}");
  auto too_late = chat_with(store + ", idle: {impl: prefetch, quiet_s: 1000}");  // after the next turn's arrival
  const Ran a = run_alone(*without, phone), b = run_alone(*with, phone), c = run_alone(*too_late, phone);
  // Turn 1's prompt opens with turn 0's 160 tokens; of those the store holds 128 (its granularity),
  // which the idle stage read into DRAM: all of turn 1's reuse comes from DRAM.
  ASSERT_EQ(b.served.size(), 3u);
  EXPECT_EQ(b.served[0].prefetched_tokens, 0);
  EXPECT_EQ(b.served[1].prefetched_tokens, 128);
  EXPECT_EQ(b.served[1].reused_tokens, 128);
  EXPECT_DOUBLE_EQ(b.peaks.at("app/prefetch"), 256 * kv_per_token());  // turn 1's 256-token prefix, for turn 2
  const double copy_s = 128 * kv_per_token() / (phone.dram.bandwidth_gbps * 1e9);
  EXPECT_NEAR(b.served[1].split_s, sim::to_seconds(sim::from_seconds(copy_s)), 1e-12);
  EXPECT_LT(b.served[1].split_s, a.served[1].split_s);  // instead of a flash read
  for (std::size_t i = 0; i < a.served.size(); ++i) {
    EXPECT_EQ(c.served[i].prefetched_tokens, 0);
    EXPECT_EQ(c.served[i].times.end_s, a.served[i].times.end_s) << i;
  }
}

void expect_config_error(const std::string& yaml, const std::string& needle) {
  try {
    auto app = Registry<App>::instance().create(YAML::Load(yaml), ConfigSource{});
    FAIL() << "expected a ConfigError for " << yaml;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PipelineResidency, BadResidencyAndConversationYamlNamesTheKey) {
  const std::string head = fmt::format("{{impl: pipeline, model: {}, interarrival_s: 60, ", kModel);
  const std::string chat = "conversation: {turns: 2}";
  expect_config_error(head + chat + ", kv_residency: {impl: ssd}}", "ssd");
  expect_config_error(head + chat + ", kv_residency: {impl: dynakv, cache_ratio: -0.5}}", "cache_ratio");
  expect_config_error(head + chat + ", kv_residency: {impl: dynakv, policy: {impl: kmeans}}}", "kmeans");
  expect_config_error(head + chat + ", kv_residency: {impl: dynakv, placement: diagonal}}", "placement");
  expect_config_error(head + chat + ", idle: {impl: prefetch, quiet_s: -1}}", "quiet_s");
  expect_config_error(head + chat + ", idle: {impl: nap}}", "nap");
  expect_config_error(head + "conversation: {prompt_tokens: 10}}", "turns");
  expect_config_error(head + "conversation: {turns: 2, answer_tokens: 0}}", "answer_tokens");
  expect_config_error(head + chat + ", workload: {generate: default}}", "conversation");
  expect_config_error(fmt::format("{{impl: pipeline, model: {}, conversation: {{turns: 2}}}}", kModel), "interarrival_s");
  expect_config_error(fmt::format("{{impl: pipeline, model: {}}}", kModel), "workload");
}

TEST(PipelineResidency, TheNewCompositionsAreIdenticalAtAnyThreadCount) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  testing::TempDir dir("compose-threads");
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"b_npu_prefill_coordgen", "-p experiment.apps.0.max_queries=3 -p experiment.apps.5.max_queries=3"},
      {"c_long_chat", "-p experiment.apps.0.conversation.turns=2 -p experiment.apps.1.conversation.turns=2"}};
  for (const auto& [name, overrides] : runs) {
    std::string first;
    for (int threads : {1, 2, 3}) {
      const std::string out = dir.file(fmt::format("{}_t{}.h5", name, threads));
      const auto r = testing::run_mobisim(fmt::format("run {}/experiments/compose/{}.yaml --no-plot --quiet --threads {} --output {} {}",
                                                      testing::source_dir(), name, threads, out, overrides));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const std::string bytes = testing::read_bytes(out);
      if (first.empty())
        first = bytes;
      else
        EXPECT_TRUE(bytes == first) << name << ": threads " << threads << " differs from threads 1";
    }
  }
}

}  // namespace pipeline_residency_test
}  // namespace mobisim
