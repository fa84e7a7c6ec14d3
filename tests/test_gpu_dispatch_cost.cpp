// The fixed GPU cost of each dispatch (issue 37, "what makes small-model GPU decode slower than its bytes"): an
// engine's gpu `call_overhead_us` is charged once per operator per layer, whatever the operator's size, so a small
// model's decode step is longer than its bytes over the bandwidth by (15 x layers + 3) dispatches' worth
// (models/cost_model.h: 15 operators per layer, plus the embedding, final norm and LM head). ExecuTorch's Vulkan
// value on Adreno is the GPU time of a dispatch that does no work (configs/engines/executorch.yaml). Expected
// times are computed by hand in the comments.
#include <gtest/gtest.h>

#include <string>

#include "devices/compute_unit.h"
#include "devices/device.h"
#include "devices/engine.h"
#include "models/cost_model.h"
#include "sim/error.h"
#include "test_util.h"

namespace mobisim::devices {
namespace {

using models::DType;

EngineProfile dispatch_engine(const std::string& yaml) {
  return load_engine_profile(YAML::Load(yaml), ConfigSource{std::make_shared<std::string>("dispatch.yaml"), ""});
}

// fp16 weights and activations on the Galaxy S24's Adreno 750 (68.3 GB/s, fp16 peak 5.6 TFLOP/s): decode GEMVs at
// 0.1 of the peak, streaming at half the bandwidth, 10 us per dispatch.
constexpr const char* kTenMicroseconds =
    "{name: dispatch-test, gpu: {families: {adreno: {prefill_efficiency: 0.1, decode_efficiency: 0.1, "
    "bandwidth_efficiency: 0.5, call_overhead_us: 10}}}}";

models::ModelSpec tiny_fp16() {
  models::ModelSpec m = testing::tiny_transformer_spec();
  m.weight_dtype = DType::kF16;
  m.activation_dtype = DType::kF16;
  m.kv_dtype = DType::kF16;
  return m;
}

TEST(GpuDispatchCost, ADecodeStepIsItsBytesOverTheBandwidthPlusOneCostPerDispatch) {
  const DeviceProfile s24 = dispatch_engine(kTenMicroseconds).apply(load_device_profile("galaxy-s24"));
  const ComputeUnitSpec& gpu = s24.unit("gpu", "t");
  const models::ModelSpec m = tiny_fp16();
  const models::Work step = models::CostModel(m).decode(/*context=*/7);
  // Weights streamed by one token, by hand (fp16, 2 bytes each): per layer Q, K, V, O 4 x 64 x 64 = 16384 and the
  // FFN 3 x 64 x 128 = 24576, two norms 2 x 64: 41088 x 4 layers = 164352; the embedding row 64, the final norm 64,
  // the LM head 64 x 100 = 6400: 170880 weights = 341760 bytes.
  EXPECT_DOUBLE_EQ(step.weight_bytes(), 341760.0);
  // Every operator of a one-token step is bound by its bytes: the densest, a GEMV, does 2 FLOP per 2-byte weight
  // (1 FLOP/byte), under the unit's 0.1 x 5.6e12 / (0.5 x 68.3e9) = 16.4 FLOP/byte. So the step is all its bytes
  // (weights, activations, K/V) over 34.15 GB/s, plus 15 x 4 + 3 = 63 dispatches of 10 us = 630 us.
  const double bytes_s = step.bytes() / (0.5 * 68.3e9);
  // Each operator is summed over the layers it runs in (Op::layers counts its dispatches).
  int dispatches = 0;
  for (const models::Op& op : step.ops) dispatches += op.layers;
  EXPECT_EQ(step.ops.size(), 18u);
  EXPECT_EQ(dispatches, 63);
  EXPECT_NEAR(gpu.seconds(step, DType::kF16), bytes_s + 63 * 10e-6, 1e-12);
  // The dispatches, not the bytes, are most of this tiny step: 630 us against ~11 us of streaming.
  EXPECT_GT(63 * 10e-6, 10 * bytes_s);
}

TEST(GpuDispatchCost, ExecuTorchVulkanPaysTheAdrenoDispatchCostAndNoHostLaunch) {
  // configs/engines/executorch.yaml: 8.2 us per dispatch on Adreno (MLC's profile of kernels that do no work); the
  // device profile's 40 us (a host launch per kernel, which the reusable command buffer does not pay) is replaced.
  const DeviceProfile s24 = load_engine_profile("executorch").apply(load_device_profile("galaxy-s24"));
  const ComputeUnitSpec& gpu = s24.unit("gpu", "t");
  EXPECT_DOUBLE_EQ(gpu.call_overhead_us, 8.2);
  // The same step with and without the dispatch cost: Qwen3-0.6B's 28 layers issue 15 x 28 + 3 = 423 dispatches,
  // 423 x 8.2 us = 3.4686 ms per token.
  const models::ModelSpec qwen = models::load_model_spec("qwen3-0.6b");
  ASSERT_EQ(qwen.n_layers, 28);
  const models::Work step = models::CostModel(qwen).decode(128);
  ComputeUnitSpec free_dispatch = gpu;
  free_dispatch.call_overhead_us = 0;
  // int4 weights: the Vulkan delegate's 8da4w linears, its only kernel class.
  EXPECT_NEAR(gpu.seconds(step, DType::kInt4) - free_dispatch.seconds(step, DType::kInt4), 423 * 8.2e-6, 1e-12);
}

TEST(GpuDispatchCost, AGpuFamilyWithoutADispatchCostIsAConfigErrorUnlessInheritedByName) {
  // Adreno values with no call_overhead_us and no inheritance: using the GPU is an error naming the key.
  const std::string without =
      "{name: dispatch-test, gpu: {families: {adreno: {prefill_efficiency: 0.1, decode_efficiency: 0.1, "
      "bandwidth_efficiency: 0.5}}}}";
  const DeviceProfile d = dispatch_engine(without).apply(load_device_profile("galaxy-s24"));
  const models::Work step = models::CostModel(tiny_fp16()).decode(7);
  testing::expect_config_error_naming([&] { d.unit("gpu", "t").seconds(step, DType::kF16); },
                                      {"engine 'dispatch-test'", "dispatch.yaml", "gpu decode", "fp16",
                                       "gpu.call_overhead_us", "device 'galaxy-s24'", "inherit_device"});
  // Inherited by name, the device's 40 us is charged and recorded with the reason.
  const std::string inherited =
      "{name: dispatch-test, inherit_device: {gpu.decode.fp16: 'the device profile launch cost'}, gpu: {families: "
      "{adreno: {prefill_efficiency: 0.1, decode_efficiency: 0.1, bandwidth_efficiency: 0.5}}}}";
  const DeviceProfile taken = dispatch_engine(inherited).apply(load_device_profile("galaxy-s24"));
  const double bytes_s = step.bytes() / (0.5 * 68.3e9);
  EXPECT_NEAR(taken.unit("gpu", "t").seconds(step, DType::kF16), bytes_s + 63 * 40e-6, 1e-12);
  bool recorded = false;
  for (const auto& line : taken.inherited_from_device)
    recorded |= line.find("call_overhead_us=40") != std::string::npos &&
                line.find("the device profile launch cost") != std::string::npos;
  EXPECT_TRUE(recorded);
}

}  // namespace
}  // namespace mobisim::devices
