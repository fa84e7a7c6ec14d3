// Group scales as the run stored them (ondevice probe key scale_dtype; issue 37, executorch x npu):
// ExecuTorch's QNN 16a4w_block exports (QNN blockwise expansion) keep one 4-bit scale per block of
// group_size weights in 8-bit storage, not an fp32 scale. Expected values are computed by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "experiments/fidelity/ondevice_probe.h"
#include "sim/error.h"
#include "test_util.h"

namespace mobisim::qnn_block_scales_test {
namespace {

// Qwen2.5-0.5B (24 layers, d 896, 14 x 64 query, 2 x 64 KV, FFN 4864, vocabulary 151,936, tied,
// Q/K/V biases) decoding at context 1024 as PR #14047's 16a4w block-16 export on the 8 Elite QRD.
fidelity::OnDeviceQuery qwen_block16_decode() {
  fidelity::OnDeviceQuery q;
  q.device = "snapdragon-8-elite-qrd";
  q.engine = "executorch";
  q.model = "qwen2.5-0.5b";
  q.unit = "npu";
  q.phase = "decode";
  q.tokens = 1024;
  q.dtype = "int4";
  q.group_size = 16;
  q.activation_dtype = "fp16";
  return q;
}

// 80 GB/s x 0.625 = 50 GB/s of streaming and no per-execution cost: decode time = bytes / 50e9.
const std::vector<std::string> kFiftyGbps = {"device.npu.exec_overhead_ms=0", "device.npu.mem_bandwidth_gbps=80",
                                             "engine.npu.decode_bandwidth_efficiency=0.625"};

TEST(QnnBlockScales, Int8ScalesStreamThreeSixteenthsOfAByteLessPerWeight) {
  fidelity::OnDeviceQuery fp32 = qwen_block16_decode();
  fidelity::OnDeviceQuery int8 = fp32;
  int8.scale_dtype = "int8";
  // Weights a decode step reads, by hand: per layer q 896*896 + 896 = 803,712, k and v 896*128 + 128 = 114,816
  // each, o 802,816, gate/up/down 3*896*4864 = 13,074,432, two norms 1,792: 14,912,384; x 24 = 357,897,216; plus the
  // final norm 896, the tied head 896 * 151,936 = 136,134,656 and one embedding row 896: 494,033,664 weights.
  // Scales per weight: fp32 4/16, int8 1/16, so 494,033,664 x 3/16 = 92,631,312 bytes fewer.
  const double fp32_s = 1.0 / fidelity::ondevice_prediction(fp32, kFiftyGbps);
  const double int8_s = 1.0 / fidelity::ondevice_prediction(int8, kFiftyGbps);
  EXPECT_NEAR(fp32_s - int8_s, 92631312.0 / 50e9, 1e-12);
  // The default is the model profile's fp32: the same as saying fp32.
  fidelity::OnDeviceQuery said_fp32 = fp32;
  said_fp32.scale_dtype = "fp32";
  EXPECT_DOUBLE_EQ(fidelity::ondevice_prediction(said_fp32, kFiftyGbps), fidelity::ondevice_prediction(fp32, kFiftyGbps));
}

TEST(QnnBlockScales, ScaleDtypeWithoutGroupsOrUnknownIsRefusedNamingTheKey) {
  ParamSchema s = fidelity::OnDeviceProbe::schema();
  auto probe = [&](const char* extra) {
    return fidelity::OnDeviceProbe(Params(YAML::Load(std::string("{device: snapdragon-8-elite-qrd, engine: executorch, "
                                                                 "model: qwen2.5-0.5b, unit: npu, phase: decode, "
                                                                 "tokens: 1024, dtype: int4, ") +
                                                     extra + "}"),
                                          s, ConfigSource{}, {}));
  };
  testing::expect_config_error_naming([&] { (void)probe("scale_dtype: int8"); }, {"scale_dtype", "group_size"});
  testing::expect_config_error_naming([&] { (void)probe("group_size: 16, scale_dtype: int3"); }, {"scale_dtype"});
  EXPECT_NO_THROW((void)probe("group_size: 16, scale_dtype: int8"));
}

// Qwen3-0.6B as PR #13544's 16a8w kv-mode export (issue 37, sixth pass): the static llama's per-head convs hold the
// config's head_dim 128 x 16 query heads = 2048 rows, twice the hidden size (examples/models/qwen3/config/0_6b_config.json
// at executorch f154d50d88, = Hugging Face config.json), so the q and o projections are 1024 x 2048 each.
TEST(QnnBlockScales, Qwen3HalfBillionDecodeStreamsItsHeadDimSizedProjections) {
  fidelity::OnDeviceQuery int8 = qwen_block16_decode();
  int8.model = "qwen3-0.6b";
  int8.dtype = "int8";
  int8.group_size = 0;
  fidelity::OnDeviceQuery fp16 = int8;
  fp16.dtype = "fp16";
  // Weights by hand: per layer q 1024*2048 = 2,097,152, k and v 1024*1024 = 1,048,576 each, o 2,097,152, gate/up/down
  // 3*1024*3072 = 9,437,184, two norms 2,048: 15,730,688; x 28 = 440,459,264; plus the final norm 1,024, the tied head
  // 1024 * 151,936 = 155,582,464 and one embedding row 1,024: 596,043,776 weights, one byte more each at fp16. K/V
  // (16-bit) and activations do not depend on the weight dtype.
  const double int8_s = 1.0 / fidelity::ondevice_prediction(int8, kFiftyGbps);
  const double fp16_s = 1.0 / fidelity::ondevice_prediction(fp16, kFiftyGbps);
  EXPECT_NEAR(fp16_s - int8_s, 596043776.0 / 50e9, 1e-12);
}

}  // namespace
}  // namespace mobisim::qnn_block_scales_test
