// Runtime paths of one engine (engine key `runtimes`, devices/engine.h with_engine_runtime; on-device probe
// key `runtime`): mllm's QNN-AOT runtime keeps values of its own beside the v1 values the five documents use.
// Expected values are computed by hand.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "devices/device.h"
#include "devices/engine.h"
#include "devices/npu.h"
#include "experiments/fidelity/ondevice_probe.h"
#include "models/cost_model.h"
#include "models/model_spec.h"
#include "sim/builtin_configs.h"
#include "sim/error.h"
#include "sim/params.h"

namespace mobisim::devices {
namespace engine_runtimes_test {

const char* kTwoRuntimeEngine = R"(
name: two-runtimes
npu: {decode_bandwidth_efficiency: 0.9, graph_chunk: 64}
runtimes:
  aot:
    npu: {decode_bandwidth_efficiency: 0.4}
)";

EngineProfile parse_engine(const YAML::Node& node) {
  return EngineProfile::from_yaml(node, ConfigSource{std::make_shared<std::string>("<test>"), ""});
}

TEST(EngineRuntimes, RuntimeBlockReplacesOnlyTheKeysItGives) {
  const YAML::Node node = load_yaml_string(kTwoRuntimeEngine, "<test>");
  const EngineProfile plain = parse_engine(node);
  EXPECT_DOUBLE_EQ(*plain.npu.decode_bandwidth_efficiency, 0.9);
  const EngineProfile aot = parse_engine(with_engine_runtime(node, "aot"));
  EXPECT_DOUBLE_EQ(*aot.npu.decode_bandwidth_efficiency, 0.4);
  EXPECT_DOUBLE_EQ(*aot.npu.graph_chunk, 64);  // not in the block: the profile's
  EXPECT_FALSE(aot.resolved["runtimes"].IsDefined());
  // The profile the runtime was taken from is left as it was.
  EXPECT_DOUBLE_EQ(node["npu"]["decode_bandwidth_efficiency"].as<double>(), 0.9);
}

TEST(EngineRuntimes, UnknownRuntimeOrForeignKeyIsAConfigError) {
  const YAML::Node node = load_yaml_string(kTwoRuntimeEngine, "<test>");
  try {
    (void)with_engine_runtime(node, "v3");
    FAIL() << "an unknown runtime was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("runtimes.v3"), std::string::npos) << e.what();
  }
  // A runtime sets unit values only, and each block must make a valid profile.
  EXPECT_THROW(parse_engine(load_yaml_string("name: x\nruntimes: {aot: {storage: {load_ns_per_byte: 1}}}\n", "<t>")),
               ConfigError);
  EXPECT_THROW(parse_engine(load_yaml_string("name: x\nruntimes: {aot: {npu: {no_such_key: 1}}}\n", "<t>")), ConfigError);
}

// The committed mllm profile's NPU values on `dev`: its `aot` runtime and its default (v1) runtime.
std::pair<NpuSpec, NpuSpec> mllm_aot_and_v1_npu(const DeviceProfile& dev) {
  std::string text, origin;
  if (!find_config("engines", "mllm", text, origin)) throw std::runtime_error("configs/engines/mllm.yaml not found");
  const YAML::Node mllm = load_yaml_string(text, origin);
  return {parse_engine(with_engine_runtime(mllm, "aot")).apply(dev).npu.value(), parse_engine(mllm).apply(dev).npu.value()};
}

// The committed mllm profile's aot runtime on the SM8650 profile: one decode step of a hand-made
// single-token work (1 GB of weights, 2 GFLOP) is exec_overhead + max(compute, bytes / (bw x share)).
TEST(EngineRuntimes, MllmAotDecodeStepByHand) {
  const DeviceProfile dev = load_device_profile("snapdragon-8-gen3-device");
  const auto [aot, v1] = mllm_aot_and_v1_npu(dev);
  models::Work w;
  models::Op op;
  op.kind = models::OpKind::kQProj;
  op.flops = 2e9;
  op.weight_bytes = 1e9;
  op.tokens = 1;
  w.ops.push_back(op);
  // The SM8650 profile (OnePlus 12's NPU): 76.8 GB/s, 2.0 ms per execution, 73 TOPS.
  ASSERT_DOUBLE_EQ(dev.npu->mem_bandwidth_gbps, 76.8);
  ASSERT_DOUBLE_EQ(dev.npu->exec_overhead_ms, 2.0);
  // aot: share 0.322307 fitted (mllm.yaml): 1e9 / (76.8e9 x 0.322307) = 40.399 ms; compute 2e9 / (73e12 x
  // 0.200429) = 0.137 ms does not bind, so the step is 2.0 + 40.399 = 42.399 ms.
  EXPECT_NEAR(aot.decode_seconds(w, models::DType::kInt4, models::DType::kF16), 0.042399, 2e-6);
  // v1 (the documents' runs): NpuSpec's share 1.0: 2.0 + 1e9 / 76.8e9 = 2.0 + 13.021 ms.
  EXPECT_NEAR(v1.decode_seconds(w, models::DType::kInt4, models::DType::kF16), 0.015021, 2e-6);
}

// mllm's AOT prompt graph is a static-context graph (mllm.yaml runtimes.aot: PromptProcessor.cpp's K/V inputs of
// context_len - ar_len positions, its {1, 1, ar_len, vocab} logits; aot_run.cpp's context_len 1024). One 32-row
// pass of Qwen3-1.7B on the SM8650 profile, by hand: against a pass that attends only its own rows and computes one
// logit row, it attends 32 x 992 more (query, key) pairs per head and layer, each 2 x 128 (scores) + 5 (softmax) +
// 2 x 128 (context) = 517 flops, over 28 layers x 16 heads: 28 x 16 x 517 x 31744 = 7,352,418,304 flops; and 31 more
// logit rows, each a final RMSNorm (4 x 2048 flops) and an LM-head row (2 x 2048 x 151936 = 622,329,856 flops):
// 31 x 622,338,048 = 19,292,479,488 flops. v1 (the documents' runs) has neither.
TEST(EngineRuntimes, MllmAotPromptPassReadsThePaddedCacheAndComputesEveryRowsLogits) {
  const DeviceProfile dev = load_device_profile("snapdragon-8-gen3-device");
  const auto [aot, v1] = mllm_aot_and_v1_npu(dev);
  EXPECT_EQ(aot.graph_context, 1024);
  EXPECT_TRUE(aot.graph_logits_all_rows);
  EXPECT_EQ(v1.graph_context, 0);
  EXPECT_FALSE(v1.graph_logits_all_rows);
  EXPECT_EQ(aot.pass_past_positions(0, 0, 32), 992);
  YAML::Node model_node;
  model_node["base"] = "qwen3-1.7b";
  model_node["weight_dtype"] = "int4";
  model_node["activation_dtype"] = "fp16";
  const models::CostModel cost(models::load_model_spec(model_node, ConfigSource{std::make_shared<std::string>("<test>"), ""}));
  NpuSpec dynamic_pass = aot;  // the same values without the static context and the all-rows head
  dynamic_pass.graph_context = 0;
  dynamic_pass.graph_logits_all_rows = false;
  const double extra_attention = 28.0 * 16 * 517 * (32 * 992);
  const double extra_logits = 31.0 * (4 * 2048 + 2 * 2048 * 151936);
  EXPECT_DOUBLE_EQ(extra_attention, 7352418304.0);
  EXPECT_DOUBLE_EQ(extra_logits, 19292479488.0);
  const double rate = aot.peak_ops(models::DType::kInt4, models::DType::kF16) * aot.utilization(32);
  const double t_static = aot.chunked_prefill_seconds(cost, 32, 0, 32);
  const double t_dynamic = dynamic_pass.chunked_prefill_seconds(cost, 32, 0, 32);
  // Both passes are bound by their compute (the 8 Gen 3's HTP at a 32-row chunk), so the difference is the extra
  // flops at that rate.
  EXPECT_NEAR(t_static - t_dynamic, (extra_attention + extra_logits) / rate, 1e-6 * t_static);
}

// The probe's `runtime: aot` reaches the runtime's values and nothing else: the same decode probe without it
// is the v1 prediction, and halving the runtime's share doubles the memory part of the step.
TEST(EngineRuntimes, ProbeRuntimeSelectsTheRuntimesValuesOnly) {
  fidelity::OnDeviceQuery q;
  q.device = "snapdragon-8-gen3-device";
  q.engine = "mllm";
  q.model = "qwen3-1.7b";
  q.unit = "npu";
  q.phase = "decode";
  q.tokens = 704;
  q.dtype = "int4";
  q.activation_dtype = "fp16";
  q.kv_dtype = "int8";
  q.metric = "ms";
  const double v1_ms = fidelity::ondevice_prediction(q, {});
  EXPECT_DOUBLE_EQ(fidelity::ondevice_prediction(q, {"engine.runtimes.aot.npu.decode_bandwidth_efficiency=0.1"}), v1_ms);
  q.runtime = "aot";
  const double at_half = fidelity::ondevice_prediction(q, {"engine.runtimes.aot.npu.decode_bandwidth_efficiency=0.5"});
  const double at_quarter = fidelity::ondevice_prediction(q, {"engine.runtimes.aot.npu.decode_bandwidth_efficiency=0.25"});
  // v1 streams at share 1: (at_half - 2 ms) = 2 x (v1 - 2 ms), (at_quarter - 2 ms) = 4 x (v1 - 2 ms).
  EXPECT_NEAR(at_half - 2.0, 2 * (v1_ms - 2.0), 1e-9);
  EXPECT_NEAR(at_quarter - 2.0, 4 * (v1_ms - 2.0), 1e-9);
  q.runtime = "v3";
  EXPECT_THROW(fidelity::ondevice_prediction(q, {}), ConfigError);
}

}  // namespace engine_runtimes_test
}  // namespace mobisim::devices
