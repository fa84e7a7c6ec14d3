// The pipeline's decode slot: `vanilla` is the decode path the pipeline had before the slot
// existed, step for step; `speculative` takes, on an otherwise idle phone, exactly what the
// CoordGen-document policy it wraps charges the request after its prefill, and holds its drafter
// memory in DRAM; `prefill: coordgen` with it runs the policy end to end, taking what the coordgen
// driver's pipeline takes for the same plan; bad stage YAML names the key.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "devices/device.h"
#include "experiments/simulation.h"
#include "models/cost_model.h"
#include "policies/apps/app.h"
#include "policies/apps/pipeline_app.h"
#include "policies/pipeline/pipeline.h"
#include "policies/pipeline/policy_phases.h"
#include "policies/pipeline/speculative_decode.h"
#include "policies/specdec/specdec_policy.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "test_pipeline_util.h"

namespace mobisim {
namespace {

using policies::App;
using policies::PipelineApp;

constexpr const char* kModel = "{base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}";

std::unique_ptr<App> app_with(const std::string& stages, int queries = 3, std::int32_t answer = 40) {
  const YAML::Node node = YAML::Load(fmt::format(
      "{{impl: pipeline, model: {}, unit: cpu, workload: {{generate: default}}, system_prompt_tokens: 64, top_k: 3{}{}}}",
      kModel, stages.empty() ? "" : ", ", stages));
  auto app = Registry<App>::instance().create(node, ConfigSource{});
  policies::AppEnvironment env;
  env.rag_workload = [queries, answer](const YAML::Node&, const ConfigSource&) { return testing::three_chunk_workload(queries, 20, answer); };
  app->prepare(env);
  return app;
}

using Ran = testing::PipelineRun;

Ran run_alone(App& app, const devices::DeviceProfile& profile) { return testing::run_pipeline_alone(app, profile); }

// The decode loop the pipeline ran before it had a decode slot (Pipeline::serve at 7e786fc).
sim::Task<void> old_decode_path(devices::Device& device, const models::CostModel& cost, std::int64_t n,
                                std::int64_t output_tokens, double& energy) {
  for (std::int64_t i = 1; i < output_tokens; ++i) {
    const devices::UnitCost step = device.unit_cost("cpu", cost.decode(n + i - 1), cost.spec().weight_dtype, "decode");
    co_await device.compute_for("cpu", step, "decode", 0);
    energy += device.profile().marginal_energy_j("cpu", step.seconds, "decode");
  }
}

TEST(PipelineDecode, VanillaIsTheOldDecodePathStepForStep) {
  const devices::DeviceProfile phone = devices::load_device_profile("pixel7");
  auto by_default = app_with("");
  auto named = app_with("decode: {impl: vanilla}, kv_residency: {impl: dram}");
  const auto a = run_alone(*by_default, phone).served;
  const auto b = run_alone(*named, phone).served;
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  const models::CostModel cost(models::load_model_spec(YAML::Load(kModel), ConfigSource{}));
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].times.end_s, b[i].times.end_s) << i;
    EXPECT_EQ(a[i].times.active_energy_j, b[i].times.active_energy_j) << i;
    EXPECT_EQ(a[i].decode_steps, 39);
    EXPECT_EQ(a[i].decode_estimate_s, -1.0);
    // The old loop on a fresh, idle phone: the same time to the nanosecond, the same energy.
    sim::StatGroup stats("phone");
    experiments::SimulatedRun run(phone, stats.child("device"));
    double energy = 0;
    run.start(old_decode_path(run.device(), cost, a[i].prompt_tokens, 40, energy), "old");
    run.run();
    EXPECT_EQ(a[i].decode_s, a[i].times.end_s - a[i].times.first_token_s);
    EXPECT_NEAR(a[i].decode_s, sim::to_seconds(run.sim().now()), 1e-9) << i;
  }
}

TEST(PipelineDecode, SpeculativeTakesExactlyThePolicysOwnCostForTheRequest) {
  const devices::DeviceProfile phone = devices::load_device_profile("oneplus-12");
  const std::string stage = "decode: {impl: speculative, policy: {impl: coordgen}, outputs: {seed: 7}}";
  auto app = app_with("prefill: {impl: npu_graphs}, " + stage);
  const Ran ran = run_alone(*app, phone);
  ASSERT_EQ(ran.served.size(), 3u);
  // The same stage, planned again request by request (same answer stream, same history store):
  // the policy's closed form after the prefill is what the phone spent decoding.
  auto again = Registry<policies::pipeline::DecodeStage>::instance().create(
      YAML::Load("{impl: speculative, policy: {impl: coordgen}, outputs: {seed: 7}}"), ConfigSource{});
  auto& spec = dynamic_cast<policies::pipeline::SpeculativeDecode&>(*again);
  const models::CostModel cost(models::load_model_spec(YAML::Load(kModel), ConfigSource{}));
  sim::StatGroup stats("phone");
  experiments::SimulatedRun run(phone, stats.child("device"));
  spec.begin(run.device(), cost);
  EXPECT_EQ(spec.unit(), "npu");
  const auto& requests = dynamic_cast<PipelineApp&>(*app).served();
  double accepted = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    policies::pipeline::Request r;
    r.prompt = {{"system", 0x5157E1ULL, 64}};
    for (std::uint64_t c = 0; c < 3; ++c) r.prompt.push_back({"chunk", 0xC4000000ULL + c, 100});
    r.prompt.push_back({"query", 0x9E000000000ULL + i, 20});
    const auto plan = spec.plan(r.token_ids(), 40);
    const double policy_s = plan.breakdown.total_s() - plan.breakdown.prefill_s;
    EXPECT_NEAR(ran.served[i].decode_s, policy_s, 1e-6) << i;
    EXPECT_NEAR(ran.served[i].decode_estimate_s, policy_s, 1e-12) << i;
    EXPECT_EQ(ran.served[i].decode_steps, plan.breakdown.steps) << i;
    accepted += ran.served[i].accepted_per_step;
  }
  EXPECT_GT(accepted, 0.0);  // retrieval drafting accepts something on answers copied from the prompt
  // The calibrated tree and the decode graph under switching are held while a request decodes.
  ASSERT_TRUE(ran.peaks.count("app/decoder"));
  EXPECT_GT(ran.peaks.at("app/decoder"), 0.0);
}

// The speculative stage charges the NPU's RPC polling as the coordgen driver does (specdec_policy.h,
// Energy): with the policy's npu_rpc_polling (its default, as the driver's) a request costs exactly
// its polled NPU time x (the CPU's single_thread_power_w - its idle_power_w) more than without, and
// takes the same time. After the pipeline's own (CPU) prefill that is the verifications' NPU time;
// paired with `prefill: coordgen`, every NPU execution of the plan, which is what the driver
// charges the request (RequestBreakdown::npu_polled_s x rpc_polling_power_w).
TEST(PipelineDecode, SpeculativeChargesTheNpuRpcPollingAsTheCoordGenDriver) {
  const devices::DeviceProfile phone = devices::load_device_profile("oneplus-12");
  const devices::ComputeUnitSpec& cpu = phone.unit("cpu", "test");
  const double polling_w = cpu.single_thread_power() - cpu.idle_power_w;
  ASSERT_GT(polling_w, 0.0);
  const models::CostModel cost(models::load_model_spec(YAML::Load(kModel), ConfigSource{}));
  const std::string decode = "{impl: speculative, policy: {impl: coordgen}, outputs: {seed: 7}}";
  for (const bool paired : {false, true}) {
    const std::string prefill = paired ? "prefill: {impl: coordgen}, " : "";
    auto polled = app_with(prefill + "decode: " + decode);
    auto quiet = app_with(prefill + "decode: {impl: speculative, policy: {impl: coordgen, npu_rpc_polling: false}, " +
                          "outputs: {seed: 7}}");
    const auto p = run_alone(*polled, phone).served;
    const auto q = run_alone(*quiet, phone).served;
    ASSERT_EQ(p.size(), 3u);
    ASSERT_EQ(q.size(), 3u);
    // The same requests planned again (same answer stream and history store).
    auto again = Registry<policies::pipeline::DecodeStage>::instance().create(YAML::Load(decode), ConfigSource{});
    auto& spec = dynamic_cast<policies::pipeline::SpeculativeDecode&>(*again);
    sim::StatGroup stats("phone");
    experiments::SimulatedRun run(phone, stats.child("device"));
    spec.begin(run.device(), cost);
    for (std::size_t i = 0; i < p.size(); ++i) {
      policies::pipeline::Request r;
      r.prompt = {{"system", 0x5157E1ULL, 64}};
      for (std::uint64_t c = 0; c < 3; ++c) r.prompt.push_back({"chunk", 0xC4000000ULL + c, 100});
      r.prompt.push_back({"query", 0x9E000000000ULL + i, 20});
      const policies::specdec::RequestBreakdown b = spec.plan(r.token_ids(), 40).breakdown;
      double polled_s = 0;  // NPU executions the stages issue, each polled by the calling thread
      for (const policies::specdec::Phase& ph : b.phases)
        if (ph.unit == "npu" && ph.power_w && (paired || ph.label == "verify")) polled_s += ph.seconds;
      ASSERT_GT(polled_s, 0.0) << i;
      if (paired) {
        EXPECT_NEAR(polled_s, b.npu_polled_s, 1e-12) << i;
      }
      const double expected_j = polled_s * polling_w;
      EXPECT_NEAR(p[i].times.active_energy_j - q[i].times.active_energy_j, expected_j, 1e-9 * expected_j)
          << (paired ? "paired " : "unpaired ") << i;
      EXPECT_EQ(p[i].times.end_s, q[i].times.end_s) << i;  // polling costs energy, not time
    }
  }
}

// The coordgen driver's pipeline for one planned request (experiments/coordgen_experiment.cpp):
// the plan's own prefill and decode stages, on a fresh idle phone. Returns {latency, prefill} in ns.
struct DriverTimes {
  sim::Time latency = 0, prefill = 0;
};
sim::Task<void> driver_serve(devices::Device& device, policies::pipeline::Pipeline& pipeline,
                             const policies::pipeline::Request& r, DriverTimes& out) {
  const std::string owner = "user", kv_owner = "user/kv";  // named: see decode_stage.h on g++ 12
  co_await pipeline.start(device, owner);
  const sim::Time t0 = device.sim().now();
  policies::pipeline::Served served;
  co_await pipeline.serve(device, kv_owner, r, served);
  out.latency = device.sim().now() - t0;
  out.prefill = served.first_token - served.split_done;
}
DriverTimes coordgen_driver_times(const devices::DeviceProfile& phone, const models::CostModel& cost,
                                  const policies::pipeline::Request& r, const policies::specdec::RequestBreakdown& b) {
  namespace pl = policies::pipeline;
  auto plan = std::make_shared<pl::PolicyPlan>();
  pl::Pipeline pipeline(cost, pl::options_on("npu"),
                        Registry<pl::KvReuse>::instance().create(YAML::Load("{impl: none}"), ConfigSource{}),
                        Registry<policies::kvsplit::KvSplitStrategy>::instance().create(
                            YAML::Load("{impl: always_load}"), ConfigSource{}),
                        std::make_unique<pl::PolicyPrefill>(plan), nullptr, std::make_unique<pl::PolicyDecode>(plan));
  const double kv = cost.spec().kv_bytes_per_token() * static_cast<double>(r.prompt_tokens() + b.output_tokens);
  plan->set(b.phases, b.peak_memory_bytes - kv);
  sim::StatGroup stats("phone");
  experiments::SimulatedRun run(phone, stats.child("device"));
  DriverTimes t;
  run.start(driver_serve(run.device(), pipeline, r, t), "request");
  run.run();
  return t;
}

TEST(PipelineDecode, CoordGenPrefillRunsThePolicyEndToEndAsTheCoordGenDriverDoes) {
  const devices::DeviceProfile phone = devices::load_device_profile("oneplus-12");
  const std::string decode = "{impl: speculative, policy: {impl: coordgen}, outputs: {seed: 7}}";
  auto app = app_with("prefill: {impl: coordgen}, decode: " + decode);
  const Ran ran = run_alone(*app, phone);
  ASSERT_EQ(ran.served.size(), 3u);
  // The same requests planned again (same answer stream and history store), each served by the
  // coordgen driver's pipeline and by the policy's phase replay on a fresh phone.
  auto again = Registry<policies::pipeline::DecodeStage>::instance().create(YAML::Load(decode), ConfigSource{});
  auto& spec = dynamic_cast<policies::pipeline::SpeculativeDecode&>(*again);
  const models::CostModel cost(models::load_model_spec(YAML::Load(kModel), ConfigSource{}));
  {
    sim::StatGroup stats("phone");
    experiments::SimulatedRun run(phone, stats.child("device"));
    spec.begin(run.device(), cost);
  }
  for (std::size_t i = 0; i < ran.served.size(); ++i) {
    policies::pipeline::Request r;
    r.prompt = {{"system", 0x5157E1ULL, 64}};
    for (std::uint64_t c = 0; c < 3; ++c) r.prompt.push_back({"chunk", 0xC4000000ULL + c, 100});
    r.prompt.push_back({"query", 0x9E000000000ULL + i, 20});
    r.output_tokens = 40;
    const auto plan = spec.plan(r.token_ids(), 40);
    const policies::specdec::RequestBreakdown& b = plan.breakdown;
    // CoordGen's calibration is pipelined: a background stream beside the prefill.
    ASSERT_TRUE(std::any_of(b.phases.begin(), b.phases.end(),
                            [](const policies::specdec::Phase& ph) { return ph.background; }));
    const DriverTimes driver = coordgen_driver_times(phone, cost, r, b);
    const policies::pipeline::Served& s = ran.served[i];
    const sim::Time latency = sim::from_seconds(s.times.end_s) - s.started;
    EXPECT_LE(std::abs(latency - driver.latency), 1) << i;  // ns (end_s is a double)
    EXPECT_EQ(s.first_token - s.split_done, driver.prefill) << i;
    // ... which is the policy's own phase replay (specdec::replay_phases), prefill charged.
    sim::StatGroup stats("phone");
    experiments::SimulatedRun run(phone, stats.child("device"));
    policies::specdec::ReplayResult old;
    run.start(policies::specdec::replay_phases(run.device(), b.phases, old), "request");
    run.run();
    EXPECT_LE(std::abs(latency - sim::from_seconds(old.latency_s)), 1) << i;
    EXPECT_GE(s.prefill_s, b.prefill_s - 1e-9) << i;  // the policy's prefill (and CPU contention) is charged
    EXPECT_EQ(s.decode_steps, b.steps) << i;
    EXPECT_GT(s.times.active_energy_j, 0.0) << i;
  }
  ASSERT_TRUE(ran.peaks.count("app/decoder"));
  EXPECT_GT(ran.peaks.at("app/decoder"), 0.0);
}

// Paired with a KV-residency stage that reads per step (DynaKV's clusters on flash behind a 10%
// DRAM cache), the policy's plan runs with each verification's reads beside it: the same
// verifications, and the same reads as the unpaired stage makes for the same plan (each
// verification attends the same context); no request is faster than with the K/V in DRAM, and a
// cache holding the whole K/V reads nothing and takes exactly the DRAM run's time.
TEST(PipelineDecode, CoordGenPrefillPutsEachVerificationsKvReadsBesideIt) {
  const devices::DeviceProfile phone = devices::load_device_profile("oneplus-12");
  const std::string decode = "decode: {impl: speculative, policy: {impl: coordgen}, outputs: {seed: 7}}";
  const std::string paired = "prefill: {impl: coordgen}, " + decode;
  const std::string flash = ", kv_residency: {impl: dynakv, cache_ratio: 0.1}";
  auto in_dram = app_with(paired);
  auto on_flash = app_with(paired + flash);
  auto whole_cache = app_with(paired + ", kv_residency: {impl: dynakv, cache_ratio: 1}");
  auto unpaired = app_with(decode + flash);
  const auto d = run_alone(*in_dram, phone).served;
  const auto f = run_alone(*on_flash, phone).served;
  const auto w = run_alone(*whole_cache, phone).served;
  const auto u = run_alone(*unpaired, phone).served;
  ASSERT_EQ(f.size(), 3u);
  const auto latency = [](const policies::pipeline::Served& s) { return sim::from_seconds(s.times.end_s) - s.started; };
  for (std::size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(f[i].decode_steps, d[i].decode_steps) << i;
    EXPECT_GT(f[i].kv_read_bytes, 0.0) << i;
    EXPECT_EQ(f[i].kv_read_bytes, u[i].kv_read_bytes) << i;
    EXPECT_GE(latency(f[i]), latency(d[i])) << i;
    EXPECT_EQ(w[i].kv_read_bytes, 0.0) << i;
    EXPECT_LE(std::abs(latency(w[i]) - latency(d[i])), 1) << i;  // ns (end_s is a double)
  }
}

TEST(PipelineDecode, PlainNpuDecodingVerifiesEveryTokenAndCoordGenFewerTimes) {
  const devices::DeviceProfile phone = devices::load_device_profile("oneplus-12");
  auto plain = app_with("decode: {impl: speculative, policy: {impl: npu_vanilla}}", 2, 60);
  auto coordgen = app_with("decode: {impl: speculative, policy: {impl: coordgen}}", 2, 60);
  const auto p = run_alone(*plain, phone).served;
  const auto c = run_alone(*coordgen, phone).served;
  for (std::size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].decode_steps, 60);  // the policy feeds every answer token, the first included
    EXPECT_EQ(p[i].accepted_per_step, 0.0);
    EXPECT_LT(c[i].decode_steps, p[i].decode_steps);
  }
}

void expect_config_error(const std::string& stages, const std::string& needle) {
  try {
    app_with(stages);
    FAIL() << "expected a ConfigError for " << stages;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PipelineDecode, BadDecodeYamlNamesTheKey) {
  expect_config_error("decode: {impl: medusa}", "medusa");
  expect_config_error("decode: {impl: speculative}", "policy");
  expect_config_error("decode: {impl: speculative, policy: {impl: coordgen, draft_budget: -3}}", "draft_budget");
  expect_config_error("decode: {impl: speculative, policy: {impl: coordgen}, outputs: {variant_prob: 2}}",
                      "variant_prob");
  expect_config_error("decode: {impl: vanilla, units: gpu}", "units");
  expect_config_error("prefill: {impl: coordgen}", "decode: {impl: speculative");
  expect_config_error("prefill: {impl: coordgen, chunk: 64}, decode: {impl: speculative, policy: {impl: coordgen}}",
                      "chunk");
}

}  // namespace
}  // namespace mobisim
