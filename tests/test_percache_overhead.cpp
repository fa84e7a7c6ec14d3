// `percache_overhead` (PerCache Table 1 and figure 20) served on PerCache's request path (issue 34):
// figure 20's battery is the phone's energy over requests served back to back, each population its
// request plus the write of its new slices, checked against the request records and by hand from
// the profile's powers; Table 1's rows are the stage implementations' own times, each run alone on
// a fresh phone; and the path's stages are the `percache` rag policy's, without its idle stage.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/experiment.h"
#include "experiments/simulation.h"
#include "models/cost_model.h"
#include "policies/apps/percache_requests.h"
#include "policies/apps/rag_policy_stages.h"
#include "policies/pipeline/chunk_tree_reuse.h"
#include "policies/pipeline/dram_residency.h"
#include "policies/pipeline/qkv_reuse_prefill.h"
#include "policies/pipeline/semantic_answer_cache.h"
#include "policies/pipeline/vanilla_decode.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "sim/params.h"
#include "test_util.h"

namespace mobisim {
namespace percache_overhead_tests {  // named: unity builds put test files together
namespace {

using policies::pipeline::Request;

// Figure 20's phone, model and fixed costs with `populations` populations of `new_chunks` new slices.
std::string battery_yaml(int populations, int new_chunks) {
  return fmt::format(R"(name: percache_overhead_battery
seed: 1
experiment:
  impl: percache_overhead
  thermal: none
  mode: battery
  device: oneplus-ace6
  model: {{base: llama-3.2-3b, weight_dtype: int4, activation_dtype: fp32, kv_dtype: fp32}}
  pipeline: {{compute_unit: cpu, embed_query_ms: 1600, qa_match_ms: 10, retrieval_ms: 3940, kv_match_ms: 15}}
  input_tokens: 349
  output_tokens: 136
  chunk_tokens: 152
  new_chunks: {}
  populations: {}
)",
                     new_chunks, populations);
}

void run(const YAML::Node& config, const std::string& name, const std::string& out) {
  experiments::RunOptions o;
  o.output_override = out;
  o.quiet = true;
  o.no_plot = true;
  ASSERT_EQ(experiments::run_experiment(config, name, o), 0);
}

// A phone as the experiments run it: its profile under their default engine (mllm).
devices::DeviceProfile phone(const std::string& name) {
  return devices::load_engine_profile("mllm").apply(devices::load_device_profile(name));
}

// Every unit's idle power, the SoC's base power and the flash's idle power: what the phone draws
// with nothing running.
double idle_floor_w(const devices::DeviceProfile& d) {
  double w = d.base_power_w + d.storage->idle_power_w;
  for (const auto& [name, unit] : d.compute) w += unit.idle_power_w;
  if (d.npu) w += d.npu->idle_power_w;
  return w;
}

// Figure 20 without writes: the CPU is busy from the first look-up to the last decode step, so the
// phone draws its idle floor plus the CPU's active-minus-idle power throughout, and the battery's
// energy is the sum of its requests' device energy.
TEST(PerCacheOverheadBattery, WithoutWritesTheEnergyIsTheSumOfItsRequestsWithTheCpuBusyThroughout) {
  testing::TempDir dir("percache-overhead");
  const std::string out = dir.file("battery.h5");
  run(load_yaml_string(battery_yaml(3, 0), "battery.yaml"), "battery.yaml", out);
  const h5::Reader r(out);
  const auto energy = r.doubles("/tables/battery/energy_j", 3), elapsed = r.doubles("/tables/battery/elapsed_s", 3);
  const auto request_j = r.doubles("/runs/battery/records/request_energy_j", 3);
  const auto request_s = r.doubles("/runs/battery/records/request_s", 3);
  EXPECT_EQ(r.ints("/runs/battery/records/stored_slices", 3), (std::vector<std::int64_t>{0, 0, 0}));
  double sum_j = 0;
  sim::Time sum_t = 0;
  for (std::size_t k = 0; k < 3; ++k) {
    sum_j += request_j[k];
    sum_t += sim::from_seconds(request_s[k]);
    EXPECT_NEAR(energy[k], sum_j, 1e-12 * sum_j) << k;
    EXPECT_EQ(sim::from_seconds(elapsed[k]), sum_t) << k;
  }
  // By hand: each request runs 1,600 + 10 ms of look-up, 3,940 ms of retrieval and 15 ms of tree
  // matching, then its prefill and decode, all on the CPU.
  EXPECT_GT(request_s[0], 5.565);
  EXPECT_EQ(sim::from_seconds(request_s[1]), sim::from_seconds(request_s[0]));
  const devices::DeviceProfile ace6 = phone("oneplus-ace6");
  const devices::ComputeUnitSpec& cpu = ace6.compute.at("cpu");
  const double watts = idle_floor_w(ace6) + cpu.active_power_w - cpu.idle_power_w;
  EXPECT_NEAR(energy[2], watts * elapsed[2], 1e-9 * energy[2]);
  const auto pct = r.doubles("/tables/battery/battery_used_percent", 3);
  EXPECT_NEAR(pct[2], 100.0 * energy[2] / ace6.battery->joules(), 1e-12);
}

// With one new slice per population: the slice (152 tokens of fp32 Q, K and V over 28 layers of
// 3,072 + 1,024 + 1,024 values: 87,162,880 bytes) is written after the answer, and the next
// population starts once it is on flash; the write adds its own time and energy to the request's.
TEST(PerCacheOverheadBattery, APopulationIsItsRequestThenTheWriteOfItsNewSlice) {
  testing::TempDir dir("percache-overhead");
  const std::string out = dir.file("battery.h5");
  run(load_yaml_string(battery_yaml(2, 1), "battery.yaml"), "battery.yaml", out);
  const h5::Reader r(out);
  const auto energy = r.doubles("/tables/battery/energy_j", 2), elapsed = r.doubles("/tables/battery/elapsed_s", 2);
  const auto request_j = r.doubles("/runs/battery/records/request_energy_j", 2);
  const auto request_s = r.doubles("/runs/battery/records/request_s", 2);
  const double slice = 152.0 * 28 * (3072 + 1024 + 1024) * 4;
  EXPECT_EQ(slice, 87162880.0);
  EXPECT_EQ(r.doubles("/runs/battery/records/stored_bytes", 2), (std::vector<double>{slice, slice}));
  EXPECT_EQ(r.ints("/runs/battery/records/stored_slices", 2), (std::vector<std::int64_t>{1, 1}));
  const devices::DeviceProfile ace6 = phone("oneplus-ace6");
  const devices::StorageSpec& flash = *ace6.storage;
  double before_j = 0;
  sim::Time before_t = 0;
  for (std::size_t k = 0; k < 2; ++k) {
    // The write's time: the analytic time of one request of the slice, within the rounding of its
    // flash commands to the nanosecond (at most 1 us over its ~170 commands).
    const sim::Time write = sim::from_seconds(elapsed[k]) - before_t - sim::from_seconds(request_s[k]);
    EXPECT_NEAR(static_cast<double>(write), 1e9 * flash.write_seconds(slice), 1000.0) << k;
    // While the slice is written only the flash works: the idle floor, the flash's active power
    // instead of its idle power while its bus moves the commands' bytes, and the energy of the bytes
    // programmed. The bus moves ceil(programmed / max transfer) commands of equal size.
    const double programmed = flash.written_bytes(slice);
    const double commands = std::ceil(programmed / (flash.max_transfer_kb * 1024.0));
    const double bus_s =
        commands * sim::to_seconds(sim::from_seconds(programmed / commands / (flash.seq_write_gbps * 1e9)));
    const double write_j = sim::to_seconds(write) * idle_floor_w(ace6) +
                           bus_s * (flash.active_power_w - flash.idle_power_w) +
                           1e-9 * flash.write_energy_nj_per_byte * programmed;
    EXPECT_NEAR(energy[k] - before_j, request_j[k] + write_j, 1e-9 * energy[k]) << k;
    before_j = energy[k];
    before_t = sim::from_seconds(elapsed[k]);
  }
}

// The time one stage implementation's work takes alone on a fresh `profile`.
template <class Work>
sim::Time alone(const devices::DeviceProfile& profile, Work work) {
  sim::StatGroup stats("phone");
  experiments::SimulatedRun run(profile, stats.child("device"));
  sim::Time took = -1;
  auto task = [&]() -> sim::Task<void> {
    const sim::Time t0 = run.sim().now();
    co_await work(run.device());
    took = run.sim().now() - t0;
  };
  run.start(task(), "alone");
  run.run();
  return took;
}

// Table 1 (the repository's configuration): each row is what the stage implementation that does the
// operation takes alone on a fresh Pixel 7, to the nanosecond.
TEST(PerCacheOverheadTable1, EveryRowIsItsStageImplementationsTimeAlone) {
  testing::TempDir dir("percache-overhead");
  const std::string out = dir.file("table1.h5");
  const std::string file = std::string(MOBISIM_SOURCE_DIR) + "/experiments/percache/table1.yaml";
  run(load_yaml_file(file), file, out);
  const h5::Reader r(out);
  const auto rows = r.doubles("/tables/latency/simulated_s", 6);
  EXPECT_EQ(r.strings("/tables/latency/operation", 6)[3], "QKV Cache Loading (2 slices, UFS)");

  // The experiment's phone (mllm runs v_proj and ffn_down with its Q6_K kernels).
  const devices::DeviceProfile pixel7 = phone("pixel7");
  const models::CostModel cost(models::load_model_spec(
      YAML::Load("{base: llama-3.2-3b, weight_dtype: int4, activation_dtype: fp32, kv_dtype: fp32, "
                 "linear_dtypes: {v_proj: int6, ffn_down: int6}}"),
      ConfigSource{}));
  // A query of 349 tokens opening with two 152-token chunks, asking for 137 tokens (136 decode steps).
  const Request query = policies::percache_query(0, {349, 137, 2, 152}, 0, {1.0F, 0.0F});

  policies::pipeline::SemanticAnswerCache answers(
      Params(YAML::Load("{embed_ms: 1600, match_ms: 10}"), policies::pipeline::SemanticAnswerCache::schema(), {}, {}));
  const sim::Time lookup = alone(pixel7, [&](devices::Device& d) -> sim::Task<void> {
    policies::pipeline::AnswerLookup hit;
    const std::string unit = "cpu";  // named: g++ 12 destroys a temporary std::string in a co_await expression twice
    co_await answers.lookup(d, unit, 0, query, hit);
    EXPECT_FALSE(hit.hit);
  });
  EXPECT_EQ(sim::from_seconds(rows[0]), lookup);
  EXPECT_EQ(lookup, sim::from_ms(1610));
  // Retrieval and tree matching are no stage: the pipeline's fixed costs, as configured.
  EXPECT_EQ(sim::from_seconds(rows[1]), sim::from_ms(3940));
  EXPECT_EQ(sim::from_seconds(rows[2]), sim::from_ms(15));

  // Loading: the tree's matched slices (the query's two chunks, once stored), each read whole.
  policies::pipeline::ChunkTreeReuse tree(
      Params(YAML::Load("{payload: qkv}"), policies::pipeline::ChunkTreeReuse::schema(), {}, {}));
  tree.begin_model(cost.spec());
  tree.store(query, 0);
  const policies::pipeline::KvMatch m = tree.match(query, 0);
  EXPECT_EQ(m.chunks, 2);
  const sim::Time load = alone(pixel7, [&](devices::Device& d) -> sim::Task<void> {
    const std::string label = "load";  // named, as above
    for (const std::int64_t tokens : tree.matched_files())
      co_await d.storage().read(static_cast<double>(tokens) * tree.bytes_per_token(), label);
  });
  EXPECT_EQ(sim::from_seconds(rows[3]), load);

  policies::pipeline::QkvReusePrefill prefill(
      Params(YAML::Load("{unit: cpu}"), policies::pipeline::QkvReusePrefill::schema(), {}, {}));
  const sim::Time prefill_t = alone(pixel7, [&](devices::Device& d) -> sim::Task<void> {
    double energy = 0;
    co_await prefill.run(d, cost, 349, 0, 0, energy);
  });
  EXPECT_EQ(sim::from_seconds(rows[4]), prefill_t);

  policies::pipeline::VanillaDecode decode(
      Params(YAML::Load("{unit: cpu}"), policies::pipeline::VanillaDecode::schema(), {}, {}));
  policies::pipeline::DramResidency residency;
  residency.begin(cost);
  const sim::Time decode_t = alone(pixel7, [&](devices::Device& d) -> sim::Task<void> {
    decode.begin(d, cost);
    double energy = 0;
    const policies::pipeline::DecodeJob job{d, cost, query, 349, 0, "app", residency, energy};
    policies::pipeline::Decoded decoded;
    co_await decode.run(job, decoded);
    EXPECT_EQ(decoded.steps, 136);
  });
  EXPECT_EQ(sim::from_seconds(rows[5]), decode_t);
}

// The path is the `percache` rag policy's stages (as rag_qa serves it) without the idle stage.
TEST(PerCacheRequestPath, IsThePercachePolicysStagesWithoutItsIdleStage) {
  policies::PipelineConfig config;
  config.embed_query_ms = 1600;
  config.qa_match_ms = 10;
  config.retrieval_ms = 3940;
  config.kv_match_ms = 15;
  YAML::Node policy = YAML::Load("{impl: percache, qa_entry_kb: 4}");
  YAML::Node expected = yaml_clone(policies::pipeline_stages_for(policy, ConfigSource{}, config).app);
  ASSERT_TRUE(expected["idle"].IsDefined());
  expected.remove("idle");
  EXPECT_EQ(YAML::Dump(policies::percache_request_stages(config, 4.0)), YAML::Dump(expected));
  // Other prefill / decode units (which the policy's idle stage refuses) go to those stages.
  config.prefill_unit = "gpu";
  const YAML::Node split = policies::percache_request_stages(config, 4.0);
  EXPECT_EQ(split["prefill"]["unit"].Scalar(), "gpu");
  EXPECT_EQ(split["decode"]["unit"].Scalar(), "cpu");
}

// The loaded (table1) or new (battery) chunks open the query's prompt: more than it holds is refused.
TEST(PerCacheOverheadConfig, ChunksBeyondTheQuerysPromptAreAConfigError) {
  YAML::Node config = load_yaml_string(battery_yaml(1, 3), "battery.yaml");  // 3 x 152 > 349
  experiments::RunOptions o;
  o.quiet = true;
  o.no_plot = true;
  o.output_override = testing::TempDir("percache-overhead").file("x.h5");
  try {
    experiments::run_experiment(config, "battery.yaml", o);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("new_chunks"), std::string::npos) << e.what();
  }
  const Request r = policies::percache_query(5, {349, 136, 2, 152}, 10, {});
  ASSERT_EQ(r.prompt.size(), 3u);
  EXPECT_EQ(r.prompt[0].key, policies::pipeline::chunk_key(10));
  EXPECT_EQ(r.prompt[1].key, policies::pipeline::chunk_key(11));
  EXPECT_EQ(r.prompt_tokens(), 349);
}

}  // namespace
}  // namespace percache_overhead_tests
}  // namespace mobisim
