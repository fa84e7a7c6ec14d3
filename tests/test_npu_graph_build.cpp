// NPU graphs built at run time (engine npu.graph_build: online, NpuSpec::graph_build_seconds; issue 37:
// MNN's online QNN mode and mllm v1's first chunk finalise the QNN graphs inside the timed prefill).
// Expected values are computed by hand.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "devices/device.h"
#include "devices/engine.h"
#include "devices/npu.h"
#include "experiments/fidelity/ondevice_probe.h"
#include "experiments/simulation.h"
#include "models/cost_model.h"
#include "policies/apps/app.h"
#include "policies/apps/pipeline_app.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "test_pipeline_util.h"

namespace mobisim {
namespace {

using models::DType;

// 2 layers, d = 256, 4 query heads and 2 KV heads of 64, FFN 512, vocabulary 1000: 14 linear layers.
models::ModelSpec tiny_model() {
  models::ModelSpec m;
  m.name = "tiny";
  m.family = "llama";
  m.n_layers = 2;
  m.hidden = 256;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 64;
  m.ffn_hidden = 512;
  m.vocab = 1000;
  m.weight_dtype = DType::kInt8;
  m.activation_dtype = DType::kInt8;
  m.kv_dtype = DType::kF16;
  return m;
}

devices::DeviceProfile phone_with(const std::string& engine_yaml, const std::string& device = "oneplus-12") {
  const devices::EngineProfile e = devices::load_engine_profile(YAML::Load(engine_yaml), ConfigSource{});
  return e.apply(devices::load_device_profile(device));
}

fidelity::OnDeviceQuery tiny_prefill(const std::string& device) {
  fidelity::OnDeviceQuery q;
  q.device = device;
  q.unit = "npu";
  q.phase = "prefill";
  q.tokens = 64;
  q.chunk = 64;
  q.metric = "ms";
  return q;
}

TEST(NpuGraphBuild, OnlinePrefillAddsTheFinaliseTimeOfEveryLinearByHand) {
  const models::ModelSpec m = tiny_model();
  const fidelity::OnDeviceQuery q = tiny_prefill("oneplus-12");
  // Measured at the OnePlus 12's own prime clock (3.3 GHz): the host share is not rescaled, 10 ms per linear.
  const devices::DeviceProfile offline = phone_with(
      "{base: mllm, npu: {graph_build: offline, graph_finalize_ms_per_linear: 10, graph_finalize_npu_ms_per_linear: 4, "
      "graph_finalize_host_ghz: 3.3}}");
  const devices::DeviceProfile online = phone_with(
      "{base: mllm, npu: {graph_build: online, graph_finalize_ms_per_linear: 10, graph_finalize_npu_ms_per_linear: 4, "
      "graph_finalize_host_ghz: 3.3}}");
  const double offline_ms = fidelity::ondevice_prediction(q, offline, m);
  const double online_ms = fidelity::ondevice_prediction(q, online, m);
  // Offline is the old path: one padded 64-token chunk, nothing else.
  EXPECT_DOUBLE_EQ(offline_ms, 1e3 * offline.npu->chunked_prefill_seconds(models::CostModel(m), 64, 0, 64));
  // Online: 2 layers x 7 linears x 10 ms = 140 ms more, before the chunk.
  EXPECT_NEAR(online_ms - offline_ms, 140.0, 1e-9);
  EXPECT_DOUBLE_EQ(online.npu->graph_build_seconds(m), 0.140);
  EXPECT_DOUBLE_EQ(offline.npu->graph_build_seconds(m), 0.0);
  // A plain FFN (no gate) holds six linears per block: 2 x 6 x 10 ms = 120 ms.
  models::ModelSpec plain = m;
  plain.ffn = models::FfnKind::kPlain;
  EXPECT_NEAR(online.npu->graph_build_seconds(plain), 0.120, 1e-12);
}

TEST(NpuGraphBuild, TheProbesGraphsKeyOverridesTheEnginesModeForPrefillOnly) {
  // MNN's shipped profile: offline by default, 22.085 ms per linear; Qwen3-1.7B has 28 layers (196 linears).
  fidelity::OnDeviceQuery q;
  q.device = "honor-magic7";
  q.engine = "mnn";
  q.model = "qwen3-1.7b";
  q.unit = "npu";
  q.phase = "prefill";
  q.tokens = 128;
  q.dtype = "int4";
  q.activation_dtype = "fp16";
  const double by_default = fidelity::ondevice_prediction(q);
  q.graphs = "offline";
  const double offline = fidelity::ondevice_prediction(q);
  q.graphs = "online";
  const double online = fidelity::ondevice_prediction(q);
  EXPECT_DOUBLE_EQ(by_default, offline);
  // tokens_per_s: 128 / seconds, so the two times differ by the build: 196 linears x (5.1955 ms on the
  // accelerator + 16.8895 ms of host work measured on a 3.2 GHz Cortex-X3, on the Magic7's 4.32 GHz Oryon:
  // 12.51074 ms) = 196 x 17.70624 ms = 3.470423 s (22.085 ms x 196 = 4.32866 s unscaled).
  EXPECT_NEAR(128.0 / online - 128.0 / offline, 3.470423, 1e-6);
  // A decode point leaves the build out: the key is refused there.
  ParamSchema s = fidelity::OnDeviceProbe::schema();
  try {
    fidelity::OnDeviceProbe(Params(YAML::Load("{impl: ondevice, device: honor-magic7, engine: mnn, model: qwen3-1.7b, "
                                              "unit: npu, phase: decode, tokens: 256, graphs: online}"),
                                   s, ConfigSource{}, {}));
    FAIL() << "graphs on a decode point must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("graphs"), std::string::npos) << e.what();
  }
}

TEST(NpuGraphBuild, TheHostShareScalesWithTheDevicesFastestCoreClockByHand) {
  // 10 ms per linear measured on a 2.2 GHz core, 4 ms of it on the accelerator: on the OnePlus 12 (Cortex-X4 at
  // 3.3 GHz) the host's 6 ms take 6 x 2.2 / 3.3 = 4 ms, so 8 ms per linear x 14 linears = 112 ms.
  const devices::DeviceProfile op12 = phone_with(
      "{base: mllm, npu: {graph_build: online, graph_finalize_ms_per_linear: 10, graph_finalize_npu_ms_per_linear: 4, "
      "graph_finalize_host_ghz: 2.2}}");
  EXPECT_DOUBLE_EQ(op12.npu->host_fastest_core_ghz, 3.3);
  EXPECT_NEAR(op12.npu->graph_build_seconds(tiny_model()), 0.112, 1e-12);
  // The same engine on the Xiaomi 17 (Oryon v3 prime at 4.6 GHz): 4 + 6 x 2.2 / 4.6 = 6.869565 ms per linear,
  // x 14 = 96.1739 ms; the accelerator's 4 ms do not scale.
  const devices::DeviceProfile x17 = phone_with(
      "{base: mllm, npu: {graph_build: online, graph_finalize_ms_per_linear: 10, graph_finalize_npu_ms_per_linear: 4, "
      "graph_finalize_host_ghz: 2.2}}",
      "xiaomi-17");
  EXPECT_DOUBLE_EQ(x17.npu->host_fastest_core_ghz, 4.6);
  EXPECT_NEAR(x17.npu->graph_build_seconds(tiny_model()), 14 * (4.0 + 6.0 * 2.2 / 4.6) * 1e-3, 1e-12);
  EXPECT_NEAR(x17.npu->graph_build_seconds(tiny_model()), 0.0961739, 1e-7);
  // A device whose CPU clusters are not described cannot scale the host share: ConfigError naming the key.
  devices::NpuSpec bare = *op12.npu;
  bare.host_fastest_core_ghz = 0;
  try {
    bare.graph_build_seconds(tiny_model());
    FAIL() << "an online build on a device without CPU clusters must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("compute.cpu.clusters"), std::string::npos) << e.what();
  }
}

TEST(NpuGraphBuild, OnlineWithoutAFinaliseCostIsAConfigErrorNamingTheKey) {
  // An engine profile that selects online mode must state the cost.
  try {
    phone_with("{base: qnn, npu: {graph_build: online}}");
    FAIL() << "online graph build without its cost must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("graph_finalize_ms_per_linear"), std::string::npos) << e.what();
  }
  // ... and which part of it is the host's, measured at which clock.
  const std::vector<std::pair<std::string, std::string>> missing_and_other = {
      {"graph_finalize_npu_ms_per_linear", "graph_finalize_host_ghz: 3.2"},
      {"graph_finalize_host_ghz", "graph_finalize_npu_ms_per_linear: 4"}};
  for (const auto& [missing, other] : missing_and_other) {
    try {
      phone_with(std::string("{base: qnn, npu: {graph_build: online, graph_finalize_ms_per_linear: 10, ") + other + "}}");
      FAIL() << "online graph build without " << missing << " must be refused";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    }
  }
  // An accelerator share above the whole finalise time is refused, naming the key.
  try {
    phone_with("{base: qnn, npu: {graph_build: online, graph_finalize_ms_per_linear: 10, "
               "graph_finalize_npu_ms_per_linear: 11, graph_finalize_host_ghz: 3.2}}");
    FAIL() << "an accelerator share above the finalise time must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("graph_finalize_npu_ms_per_linear"), std::string::npos) << e.what();
  }
  // A probe point that says its run built the graphs online, on a runtime without the cost: the same error.
  fidelity::OnDeviceQuery q;
  q.device = "snapdragon-8-elite-qrd";
  q.engine = "qnn";
  q.model = "llama-3.2-1b";
  q.unit = "npu";
  q.phase = "prefill";
  q.tokens = 128;
  q.chunk = 128;
  q.dtype = "int4";
  q.activation_dtype = "fp16";
  q.graphs = "online";
  try {
    fidelity::ondevice_prediction(q);
    FAIL() << "graphs: online on an engine without graph_finalize_ms_per_linear must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("graph_finalize_ms_per_linear"), std::string::npos) << e.what();
  }
  // And an NpuSpec set online by hand without the cost refuses to time the build.
  devices::NpuSpec n;
  n.online_graph_build = true;
  try {
    n.graph_build_seconds(tiny_model());
    FAIL() << "an online NpuSpec without the cost must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("graph_finalize_ms_per_linear"), std::string::npos) << e.what();
  }
}

std::unique_ptr<policies::App> npu_prefill_app(int queries) {
  const YAML::Node node = YAML::Load(
      "{impl: pipeline, model: {base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}, "
      "unit: cpu, workload: {generate: default}, system_prompt_tokens: 64, top_k: 3, "
      "prefill: {impl: npu_graphs, chunk: 128, lm_head_unit: npu}}");  // (the head in the graph: the build alone)
  auto app = Registry<policies::App>::instance().create(node, ConfigSource{});
  policies::AppEnvironment env;
  env.rag_workload = [queries](const YAML::Node&, const ConfigSource&) {
    return testing::three_chunk_workload(queries, 20);
  };
  app->prepare(env);
  return app;
}

TEST(NpuGraphBuild, ASimulatedRunBuildsTheGraphsOnTheCpuInItsFirstPrefillOnly) {
  // Prompts of 384 tokens on a 128-token graph; the runtime builds its graphs online at 10 ms per linear
  // (measured at the OnePlus 12's own 3.3 GHz prime clock: not rescaled).
  const devices::DeviceProfile profile = phone_with(
      "{base: mllm, npu: {graph_build: online, graph_finalize_ms_per_linear: 10, graph_finalize_npu_ms_per_linear: 4, "
      "graph_finalize_host_ghz: 3.3}}");
  const models::CostModel cost(models::load_model_spec(
      YAML::Load("{base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}"), ConfigSource{}));
  auto app = npu_prefill_app(2);
  const auto served = testing::run_pipeline_alone(*app, profile).served;
  ASSERT_EQ(served.size(), 2u);
  const double chunks_s = sim::to_seconds(sim::from_seconds(profile.npu->chunked_prefill_seconds(cost, 384, 0, 128)));
  // Qwen2.5-0.5B: 24 layers x 7 linears x 10 ms = 1.68 s of CPU before the first request's chunks.
  const double build_s = sim::to_seconds(sim::from_seconds(24 * 7 * 0.010));
  EXPECT_NEAR(served[0].prefill_s, build_s + chunks_s, 1e-9);
  EXPECT_NEAR(served[1].prefill_s, chunks_s, 1e-9);  // the graphs are reused
  // Offline (the shipped mllm profile): no build in either request.
  auto offline_app = npu_prefill_app(2);
  const auto offline = testing::run_pipeline_alone(*offline_app, phone_with("{base: mllm}")).served;
  EXPECT_NEAR(offline[0].prefill_s, chunks_s, 1e-9);
}

}  // namespace
}  // namespace mobisim
