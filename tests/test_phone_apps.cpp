// Apps on one phone (the `phone` experiment): contention timed by hand, DRAM felt by a cache,
// and a phone that cannot hold the weights stopping the run.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>

#include "devices/device.h"
#include "experiments/simulation.h"
#include "models/cost_model.h"
#include "policies/apps/app.h"
#include "sim/registry.h"
#include "test_util.h"

namespace mobisim {
namespace {

using policies::App;

// A phone with a CPU, an NPU and flash (the rag app serves on pipeline stages, which price a split
// of stored K/V with the phone's storage even when nothing is stored).
devices::DeviceProfile npu_phone(double dram_gb) {
  const std::string yaml = fmt::format(R"(
name: npu-phone
base_power_w: 0
compute:
  cpu: {{peak_tflops: {{fp16: 1.0}}, mem_bandwidth_gbps: 50, compute_efficiency: 0.5, gemv_compute_efficiency: 0.5,
        bandwidth_efficiency: 0.5, call_overhead_us: 0, active_power_w: 4, idle_power_w: 0.1}}
npu: {{peak_tops_int8: 20, peak_tflops_fp16: 10, max_utilization: 0.5, half_utilization_chunk: 64, exec_overhead_ms: 1,
      mem_bandwidth_gbps: 50, graph_load_ms_per_layer: 0, active_power_w: 2, idle_power_w: 0.05}}
dram: {{capacity_gb: {}, bandwidth_gbps: 50, reserved_gb: 2}}
storage: {{kind: ufs3.1, seq_read_gbps: 2, seq_write_gbps: 1, random_read_iops: 50000, random_write_iops: 50000,
          queue_depth: 32, access_latency_us: 90, page_size_kb: 16, read_energy_nj_per_byte: 0,
          write_energy_nj_per_byte: 0, idle_power_w: 0, capacity_gb: 128}}
)", dram_gb);
  return devices::DeviceProfile::from_yaml(YAML::Load(yaml), ConfigSource{});
}

std::unique_ptr<App> chat(const std::string& extra) {
  const YAML::Node node = YAML::Load(
      "{impl: chat, model: {base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}, " + extra +
      "}");
  auto app = Registry<App>::instance().create(node, ConfigSource{});
  app->prepare(policies::AppEnvironment{});
  return app;
}

double column(const h5::Table& t, const std::string& name, std::size_t row) {
  return std::get<std::vector<double>>(t.column(name)).at(row);
}

TEST(PhoneApps, TwoAppsOnOneNpuTheSecondWaitsExactlyTheFirstsBusyTime) {
  // Two chat apps with one request each (prefill only: one output token), both at t = 0 on the NPU.
  auto a = chat("unit: npu, requests: 1, prompt_tokens: 300, output_tokens: 1");
  auto b = chat("unit: npu, requests: 1, prompt_tokens: 500, output_tokens: 1");
  const devices::DeviceProfile profile = npu_phone(8);
  sim::StatGroup stats("phone");
  h5::Table ra, rb;
  {
    experiments::SimulatedRun run(profile, stats.child("device"));
    run.start(a->run(run.device(), "a", stats.child("a")), "a");
    run.start(b->run(run.device(), "b", stats.child("b")), "b");
    run.run();
    a->records(ra);
    b->records(rb);
  }
  // The NPU's time for each prefill, from the profile's graph model alone.
  const models::CostModel cost(models::load_model_spec(
      YAML::Load("{base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}"), ConfigSource{}));
  const double pa = profile.compute_seconds("npu", cost.prefill(300), cost.spec().weight_dtype, "test");
  const double pb = profile.compute_seconds("npu", cost.prefill(500), cost.spec().weight_dtype, "test");
  ASSERT_GT(pa, 0.0);
  EXPECT_DOUBLE_EQ(column(ra, "end_s", 0), sim::to_seconds(sim::from_seconds(pa)));
  // B queued behind A on the one NPU: it starts when A's prefill ends and runs its own.
  EXPECT_DOUBLE_EQ(column(rb, "end_s", 0), sim::to_seconds(sim::from_seconds(pa) + sim::from_seconds(pb)));
  EXPECT_DOUBLE_EQ(column(rb, "ttft_s", 0), column(rb, "end_s", 0));
}

TEST(PhoneApps, ForegroundWorkGoesBeforeBackgroundWorkWaitingForTheSameUnit) {
  // A holds the CPU first; B (background) and C (foreground) both wait: C goes next.
  auto a = chat("unit: cpu, requests: 1, prompt_tokens: 400, output_tokens: 1");
  auto b = chat("unit: cpu, requests: 1, prompt_tokens: 100, output_tokens: 1, priority: background");
  auto c = chat("unit: cpu, requests: 1, prompt_tokens: 100, output_tokens: 1, priority: foreground");
  const devices::DeviceProfile profile = npu_phone(8);
  sim::StatGroup stats("phone");
  h5::Table ra, rb, rc;
  {
    experiments::SimulatedRun run(profile, stats.child("device"));
    run.start(a->run(run.device(), "a", stats.child("a")), "a");
    run.start(b->run(run.device(), "b", stats.child("b")), "b");
    run.start(c->run(run.device(), "c", stats.child("c")), "c");
    run.run();
    a->records(ra);
    b->records(rb);
    c->records(rc);
  }
  EXPECT_LT(column(ra, "end_s", 0), column(rc, "end_s", 0));
  EXPECT_LT(column(rc, "end_s", 0), column(rb, "end_s", 0));
  EXPECT_DOUBLE_EQ(column(rb, "end_s", 0) - column(rc, "end_s", 0), column(rc, "end_s", 0) - column(ra, "end_s", 0));
}

TEST(PhoneApps, AForegroundRequestGetsTheUnitAtTheEndOfTheBackgroundPrefillsLayerInProgress) {
  // A background chat prefills 400 tokens on the CPU from t = 0 (L layers, Device::compute_layers);
  // a foreground chat's 100-token prefill arrives 37% of the way through it: it waits for the end
  // of the layer in progress, not for the whole prefill, and the background prefill ends later by
  // exactly the foreground's time on the CPU.
  const devices::DeviceProfile profile = npu_phone(8);
  const models::CostModel cost(models::load_model_spec(
      YAML::Load("{base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}"), ConfigSource{}));
  const int layers = cost.spec().n_layers;
  const auto prefill_ns = [&](std::int64_t tokens) {
    return sim::from_seconds(profile.compute_seconds("cpu", cost.prefill(tokens), cost.spec().weight_dtype, "test"));
  };
  const sim::Time pb = prefill_ns(400), pc = prefill_ns(100);
  const sim::Time arrival = pb * 37 / 100;
  sim::Time layer_end = pb;  // the first layer end at or after the arrival: round(j x pb / L)
  for (int j = layers; j >= 1; --j) {
    const auto end = static_cast<sim::Time>(std::llround(static_cast<long double>(pb) * j / layers));
    if (end >= arrival) layer_end = end;
  }
  ASSERT_GT(layer_end, arrival);  // mid-layer
  ASSERT_LT(layer_end, pb);
  auto bg = chat("unit: cpu, requests: 1, prompt_tokens: 400, output_tokens: 1, priority: background");
  auto fg = chat(fmt::format("unit: cpu, requests: 1, prompt_tokens: 100, output_tokens: 1, start_s: {}",
                             sim::to_seconds(arrival)));
  ASSERT_EQ(sim::from_seconds(sim::to_seconds(arrival)), arrival);
  sim::StatGroup stats("phone");
  h5::Table rb, rf;
  {
    experiments::SimulatedRun run(profile, stats.child("device"));
    run.start(bg->run(run.device(), "bg", stats.child("bg")), "bg");
    run.start(fg->run(run.device(), "fg", stats.child("fg")), "fg");
    run.run();
    bg->records(rb);
    fg->records(rf);
  }
  EXPECT_EQ(sim::from_seconds(column(rf, "end_s", 0)), layer_end + pc);
  EXPECT_EQ(sim::from_seconds(column(rb, "end_s", 0)), pb + pc);
}

struct ChatOutcome {
  double cached_tokens = 0, dropped = 0, peak_bytes = 0, capacity_bytes = 0;
};

ChatOutcome long_chat_on(double dram_gb) {
  auto app = chat("unit: cpu, requests: 12, prompt_tokens: 2000, output_tokens: 16, think_time_s: 1");
  const devices::DeviceProfile profile = npu_phone(dram_gb);
  sim::StatGroup stats("phone");
  ChatOutcome out;
  h5::Table r;
  {
    experiments::SimulatedRun run(profile, stats.child("device"));
    for (const auto& [owner, bytes] : app->resident_dram()) run.device().dram().reserve("chat/" + owner, bytes);
    run.start(app->run(run.device(), "chat", stats.child("chat")), "chat");
    run.run();
    app->records(r);
    out.peak_bytes = run.device().dram().peak_bytes();
    out.capacity_bytes = run.device().dram().capacity_bytes();
  }
  for (auto x : std::get<std::vector<std::int64_t>>(r.column("cached_tokens"))) out.cached_tokens += static_cast<double>(x);
  for (auto x : std::get<std::vector<std::int64_t>>(r.column("history_dropped"))) out.dropped += static_cast<double>(x);
  return out;
}

TEST(PhoneApps, ASmallerDramShrinksTheChatsKvHistoryAndPeakStaysWithinCapacity) {
  // Qwen2.5-0.5B at fp16 KV: 12 KB per token; 12 turns of 2016 tokens grow the history to 290 MB.
  const ChatOutcome roomy = long_chat_on(8);       // 6 GB usable: the history always fits
  const ChatOutcome tight = long_chat_on(2.7);     // 0.7 GB usable: weights ~0.5 GB, history drops
  EXPECT_EQ(roomy.dropped, 0.0);
  EXPECT_GT(tight.dropped, 0.0);
  EXPECT_LT(tight.cached_tokens, roomy.cached_tokens);
  EXPECT_LE(tight.peak_bytes, tight.capacity_bytes);
  // Every turn after the first reuses the whole conversation when nothing is dropped.
  double expected = 0;
  for (int turn = 1; turn < 12; ++turn) expected += turn * 2016.0;
  EXPECT_DOUBLE_EQ(roomy.cached_tokens, expected);
}

TEST(PhoneApps, WeightsThatDoNotFitStopTheRunWithNoResultFile) {
  testing::TempDir dir("phone-overflow");
  const std::string out = dir.file("out.h5");
  const auto r = testing::run_mobisim(fmt::format(
      "run {}/experiments/compose/d_chat_on_cpu.yaml --no-plot --quiet --output {} "
      "-p experiment.device.dram.capacity_gb=5",
      testing::source_dir(), out));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("DRAM of pixel7 is full: 'chat/weights' needs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("held: assistant/weights 1.805 GB"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace mobisim

namespace mobisim {
namespace {

TEST(PhoneApps, APhoneRunIsIdenticalAtAnyThreadCount) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  testing::TempDir dir("phone-threads");
  std::string first;
  for (int threads : {1, 2, 3, 8, 16}) {
    const std::string out = dir.file(fmt::format("t{}.h5", threads));
    const auto r = testing::run_mobisim(fmt::format("run {}/experiments/compose/a_rag_kv_reuse.yaml --no-plot --quiet "
                                                    "--threads {} --output {} -p experiment.apps.0.max_queries=4",
                                                    testing::source_dir(), threads, out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string bytes = testing::read_bytes(out);
    if (first.empty())
      first = bytes;
    else
      EXPECT_TRUE(bytes == first) << "threads " << threads << " differs from threads 1";
  }
}

TEST(PhoneApps, BadAppsAreConfigErrorsNamingTheKey) {
  const std::string yaml = testing::source_dir() + "/experiments/compose/d_chat_on_cpu.yaml";
  const auto unknown = testing::run_mobisim("validate " + yaml + " -p experiment.apps.1.impl=chatt");
  EXPECT_EQ(unknown.exit_code, 3) << unknown.output;
  EXPECT_NE(unknown.output.find("chatt"), std::string::npos) << unknown.output;
  const auto priority = testing::run_mobisim("validate " + yaml + " -p experiment.apps.1.priority=urgent");
  EXPECT_EQ(priority.exit_code, 3) << priority.output;
  EXPECT_NE(priority.output.find("priority"), std::string::npos) << priority.output;
  const auto scenario = testing::run_mobisim("validate " + yaml + " -p 'experiment.scenarios=[together]'");
  EXPECT_EQ(scenario.exit_code, 3) << scenario.output;
  EXPECT_NE(scenario.output.find("unknown scenario 'together'"), std::string::npos) << scenario.output;
  const auto unit = testing::run_mobisim("validate " + yaml + " -p experiment.apps.1.unit=npu");
  EXPECT_EQ(unit.exit_code, 3) << unit.output;
  EXPECT_NE(unit.output.find("has no npu"), std::string::npos) << unit.output;
}

}  // namespace
}  // namespace mobisim

namespace mobisim {
namespace {

TEST(PhoneApps, ARagPipelineCanPrefillOnTheNpuAndDecodeOnTheCpu) {
  // One query of 100 tokens with no retrieval-dependent work (naive, top_k chunks precomputed).
  traces::RagTrace t;
  traces::UserTrace u;
  u.user_id = "u0";
  traces::Chunk c;
  c.tokens = 100;
  u.chunks = {c, c, c};
  traces::Query q;
  q.tokens = 20;
  q.answer_tokens = 8;
  q.retrieved = {0, 1, 2};
  u.queries = {q};
  t.users = {u};
  const devices::DeviceProfile profile = npu_phone(8);
  const YAML::Node node = YAML::Load(
      "{impl: rag, model: {base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}, "
      "pipeline: {compute_unit: cpu, prefill_unit: npu, system_prompt_tokens: 64, top_k: 3}, policy: {impl: naive}, "
      "workload: {generate: default}}");
  auto app = Registry<App>::instance().create(node, ConfigSource{});
  policies::AppEnvironment env;
  env.device = &profile;
  env.rag_workload = [&](const YAML::Node&, const ConfigSource&) { return t; };
  app->prepare(env);
  sim::StatGroup stats("phone");
  h5::Table r;
  double npu_busy = 0, cpu_busy = 0;
  {
    experiments::SimulatedRun run(profile, stats.child("device"));
    run.start(app->run(run.device(), "rag", stats.child("rag")), "rag");
    run.run();
    app->records(r);
    npu_busy = run.device().busy_seconds("npu");
    cpu_busy = run.device().busy_seconds("cpu");
  }
  // Prompt: 64 system + 300 chunk + 20 query = 384 tokens on the NPU's graphs; 7 decode steps on the CPU.
  const models::CostModel cost(models::load_model_spec(
      YAML::Load("{base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}"), ConfigSource{}));
  const double prefill = profile.compute_seconds("npu", cost.prefill(384), cost.spec().weight_dtype, "test");
  double decode = 0;
  for (int i = 0; i < 7; ++i)
    decode += sim::to_seconds(sim::from_seconds(profile.compute_seconds("cpu", cost.decode(384 + i), cost.spec().weight_dtype, "test")));
  EXPECT_NEAR(npu_busy, prefill, 1e-9);
  EXPECT_NEAR(cpu_busy, decode, 1e-9);
  EXPECT_NEAR(column(r, "prefill_s", 0), sim::to_seconds(sim::from_seconds(prefill)), 1e-12);
}

// The rag app serves its policy as pipeline stages (issue 34), so a request's K/V is in the phone's
// DRAM ledger while it is answered, under the app's label: one query of 64 + 300 + 20 = 384 prompt
// tokens and 8 answer tokens holds (384 + 8) x the model's K/V bytes per token (Qwen2.5-0.5B at
// fp16: 2 x 24 layers x 128 x 2 bytes = 12,288), and gives it back when the answer ends.
TEST(PhoneApps, ARagAppHoldsItsRequestsKvInTheDramLedgerUnderItsLabel) {
  traces::RagTrace t;
  traces::UserTrace u;
  u.user_id = "u0";
  traces::Chunk c;
  c.tokens = 100;
  u.chunks = {c, c, c};
  traces::Query q;
  q.tokens = 20;
  q.answer_tokens = 8;
  q.retrieved = {0, 1, 2};
  u.queries = {q};
  t.users = {u};
  const devices::DeviceProfile profile = devices::load_device_profile("pixel7");
  auto app = Registry<App>::instance().create(
      YAML::Load("{impl: rag, model: {base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}, "
                 "pipeline: {compute_unit: cpu, system_prompt_tokens: 64, top_k: 3}, policy: {impl: naive}, "
                 "workload: {generate: default}}"),
      ConfigSource{});
  policies::AppEnvironment env;
  env.device = &profile;
  env.rag_workload = [&](const YAML::Node&, const ConfigSource&) { return t; };
  app->prepare(env);
  sim::StatGroup stats("phone");
  experiments::SimulatedRun run(profile, stats.child("device"));
  run.start(app->run(run.device(), "assistant", stats.child("assistant")), "assistant");
  run.run();
  h5::Table r;
  app->records(r);
  ASSERT_EQ(r.rows(), 1u);
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(r.column("prompt_tokens")).at(0), 384);
  const std::map<std::string, double> peaks = run.device().dram().owner_peaks();
  ASSERT_EQ(peaks.count("assistant/kv"), 1u);
  EXPECT_EQ(peaks.at("assistant/kv"), (384.0 + 8.0) * 12288.0);
  EXPECT_EQ(run.device().dram().held_by("assistant/kv"), 0.0);
}

}  // namespace
}  // namespace mobisim

namespace mobisim {
namespace {

TEST(PhoneApps, ACoordGenRequestWhosePeakMemoryDoesNotFitStopsTheRun) {
  // CoordGen's per-request peak is held in DRAM while the request runs through the pipeline: its
  // K/V by the KV-residency stage ("user/kv"), the rest (NPU graphs, the CPU's weights, drafter)
  // by the policy's plan ("user/decoder"); 0.5 GB cannot hold Qwen2.5-1.5B's.
  testing::TempDir dir("coordgen-dram");
  const std::string out = dir.file("f10.h5");
  const auto r = testing::run_mobisim(fmt::format(
      "run {}/experiments/coordgen/fig10_calibrated_workload.yaml --no-plot --quiet --output {} "
      "-p experiment.device.dram.capacity_gb=4.5 -p experiment.device.dram.reserved_gb=4",
      testing::source_dir(), out));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("DRAM of oneplus-13 is full: 'user/decoder' needs"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace mobisim
