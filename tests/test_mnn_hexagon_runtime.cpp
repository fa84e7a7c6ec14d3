// MNN's Hexagon backend as a runtime of the mnn engine (issue 37; devices/npu.h "Runtimes that send every matmul
// to HMX"; configs/engines/mnn.yaml runtimes.hexagon): every matmul on HMX in whole 32-row tiles, each weight tile
// dequantised on HVX once per ubatch (decode: per token), weights as stored. Expected values are computed by hand.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "devices/device.h"
#include "devices/engine.h"
#include "devices/npu.h"
#include "experiments/fidelity/ondevice_probe.h"
#include "models/cost_model.h"
#include "sim/builtin_configs.h"
#include "sim/error.h"
#include "sim/params.h"

namespace mobisim::devices {
namespace mnn_hexagon_test {

// One linear of 1,048,576 int4 weights (0.5 byte each) over `tokens` rows: 2 flops per weight per row.
models::Work one_linear(std::int64_t tokens) {
  models::Op op;
  op.kind = models::OpKind::kQProj;
  op.flops = 2.0 * 1048576.0 * static_cast<double>(tokens);
  op.weight_bytes = 524288;
  op.layers = 1;
  op.tokens = tokens;
  models::Work w;
  w.ops = {op};
  return w;
}

// HMX at 0.1 of 10 TFLOP/s = 1e12 op/s; 6 HVX contexts x 512 ops x 1 GHz = 3.072 TOPS (6e9 context-cycles/s);
// DRAM 50 GB/s x 0.4 = 20 GB/s; every matmul on HMX (hmx_min_rows 1), 16 HVX cycles per 32 x 32 tile.
NpuSpec every_matmul_on_hmx() {
  NpuSpec n;
  n.hmx_peak_tflops_fp16 = 10;
  n.hvx_gemm_efficiency = 0.1;
  n.hvx_peak_tops_int8 = 3.072;
  n.mem_bandwidth_gbps = 50;
  n.hvx_bandwidth_efficiency = 0.4;
  n.hmx_min_rows = 1;
  n.hmx_dequant_hvx_cycles_per_tile = 16;
  n.device_name = "hand-phone";
  return n;
}

TEST(MnnHexagonRuntime, DecodePaysWholeHmxTilesAndTheTilesDequantisation) {
  const NpuSpec n = every_matmul_on_hmx();
  // Dequantisation: 1,048,576 / 1024 = 1024 tiles x 16 cycles = 16,384 cycles / 6e9 = 2.7306667 us.
  EXPECT_NEAR(n.hmx_dequant_seconds(one_linear(1), "decode"), 16384.0 / 6e9, 1e-15);
  // One row pays a 32-row tile: 2,097,152 flops x 32 / 1e12 = 67.108864 us, over the bytes' 524,288 / 20e9 =
  // 26.2144 us; plus the dequantisation: 69.8395307 us.
  EXPECT_NEAR(n.hvx_ubatch_seconds(one_linear(1), models::DType::kInt4, "decode", 1), 67.108864e-6 + 16384.0 / 6e9,
              1e-12);
  // 8 rows pay the same tile (factor 4): 16,777,216 flops x 4 / 1e12 = 67.108864 us again.
  EXPECT_NEAR(n.hvx_ubatch_seconds(one_linear(8), models::DType::kInt4, "prefill", 8), 67.108864e-6 + 16384.0 / 6e9,
              1e-12);
  // 64 rows fill two tiles: 134,217,728 / 1e12 = 134.217728 us; the weights are dequantised once, not per row.
  EXPECT_NEAR(n.hvx_ubatch_seconds(one_linear(64), models::DType::kInt4, "prefill", 64),
              134.217728e-6 + 16384.0 / 6e9, 1e-12);
}

TEST(MnnHexagonRuntime, RuntimesThatKeepSubTileMatmulsOffHmxAreUnchanged) {
  // llama.cpp's spec: HMX from 32 rows, no dequantisation value. An LM-head row inside a 64-row HMX ubatch is not
  // padded, and no dequantisation is added: 2,097,152 / 1e12 = 2.097152 us.
  NpuSpec n = every_matmul_on_hmx();
  n.hmx_min_rows = 32;
  n.hmx_dequant_hvx_cycles_per_tile = 0;
  n.hvx_matmul_efficiency = 0.25;
  EXPECT_DOUBLE_EQ(n.hmx_tile_padding(one_linear(1).ops[0]), 1.0);
  EXPECT_NEAR(n.hvx_ubatch_seconds(one_linear(1), models::DType::kInt4, "prefill", 64), 26.2144e-6, 1e-12);
  // Non-linear operators are never padded, whatever hmx_min_rows says.
  NpuSpec m = every_matmul_on_hmx();
  models::Op norm = one_linear(1).ops[0];
  norm.kind = models::OpKind::kAttnNorm;
  EXPECT_DOUBLE_EQ(m.hmx_tile_padding(norm), 1.0);
  EXPECT_DOUBLE_EQ(m.hmx_tile_padding(one_linear(1).ops[0]), 32.0);
}

TEST(MnnHexagonRuntime, DequantisationWithoutTheDevicesHvxPeakIsAConfigError) {
  NpuSpec n = every_matmul_on_hmx();
  n.hvx_peak_tops_int8 = 0;
  try {
    (void)n.hmx_dequant_seconds(one_linear(1), "decode");
    FAIL() << "a dequantisation cost without the HVX contexts' peak was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("hvx_peak_tops_int8"), std::string::npos) << what;
    EXPECT_NE(what.find("hand-phone"), std::string::npos) << what;
  }
}

EngineProfile parse_mnn_hexagon_engine(const std::string& text) {
  return EngineProfile::from_yaml(load_yaml_string(text, "<test>"), ConfigSource{std::make_shared<std::string>("<test>"), ""});
}

TEST(MnnHexagonRuntime, EngineKeysAndTheirConfigErrors) {
  const std::string head = "name: x\nnpu: {prefill_backend: hvx, decode_backend: hvx, hvx_gemm_efficiency: 0.1, "
                           "hvx_bandwidth_efficiency: 0.2, hvx_op_overhead_us: 0, ";
  // hmx_min_rows 1 sends every matmul to HMX: no HVX matmul rate is needed.
  const EngineProfile all_hmx = parse_mnn_hexagon_engine(head + "hmx_min_rows: 1, hmx_dequant_hvx_cycles_per_tile: 16}\n");
  EXPECT_EQ(*all_hmx.npu.hmx_min_rows, 1);
  EXPECT_DOUBLE_EQ(*all_hmx.npu.hmx_dequant_hvx_cycles_per_tile, 16.0);
  // From 2 rows some matmuls stay on HVX: their rate must be stated.
  try {
    (void)parse_mnn_hexagon_engine(head + "hmx_min_rows: 2}\n");
    FAIL() << "hmx_min_rows 2 without hvx_matmul_efficiency was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hvx_matmul_efficiency"), std::string::npos) << e.what();
  }
  try {
    (void)parse_mnn_hexagon_engine(head + "hmx_min_rows: 1, hmx_dequant_hvx_cycles_per_tile: -1}\n");
    FAIL() << "a negative dequantisation cost was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hmx_dequant_hvx_cycles_per_tile"), std::string::npos) << e.what();
  }
  try {
    (void)parse_mnn_hexagon_engine("name: x\nnpu: {graph_weight_dtype: as_file}\n");
    FAIL() << "an unknown graph_weight_dtype was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("graph_weight_dtype"), std::string::npos) << e.what();
  }
}

// The committed mnn profile on the 8 Elite QRD: its hexagon runtime keeps the model's weights and sends every
// matmul to HMX; its default (QNN) path keeps fp16 graph weights.
TEST(MnnHexagonRuntime, CommittedRuntimeKeepsTheStoredWeights) {
  std::string text, origin;
  if (!find_config("engines", "mnn", text, origin)) throw std::runtime_error("configs/engines/mnn.yaml not found");
  const YAML::Node mnn = load_yaml_string(text, origin);
  const DeviceProfile dev = load_device_profile("snapdragon-8-elite-qrd");
  const auto src = ConfigSource{std::make_shared<std::string>(origin), ""};
  const NpuSpec qnn = EngineProfile::from_yaml(mnn, src).apply(dev).npu.value();
  const NpuSpec hex = EngineProfile::from_yaml(with_engine_runtime(mnn, "hexagon"), src).apply(dev).npu.value();
  ASSERT_TRUE(qnn.graph_weight_dtype.has_value());
  EXPECT_EQ(*qnn.graph_weight_dtype, models::DType::kF16);
  EXPECT_FALSE(hex.graph_weight_dtype.has_value());
  EXPECT_EQ(hex.prefill_backend, NpuBackend::kHvx);
  EXPECT_EQ(hex.decode_backend, NpuBackend::kHvx);
  EXPECT_EQ(hex.hmx_min_rows, 1);
  EXPECT_DOUBLE_EQ(hex.hmx_dequant_hvx_cycles_per_tile, 16.0);
}

// The PR #4633 probes under `runtime: hexagon`, against the hand model of docs/npu_sources.md (Qwen3-0.6B,
// 440,401,920 layer weights + 155,582,464 LM-head weights at 0.53125 byte; HMX 9.9 TFLOP/s x 0.139338; DRAM
// 85.3 GB/s x 0.270394; 3.69 TOPS / 512 = 7.207e9 HVX context-cycles/s): decode at context 64 takes 29.350 ms
// (34.07 tok/s), the 512-token prefill 399.36 ms (1282.1 tok/s).
TEST(MnnHexagonRuntime, Pr4633ProbesMatchTheHandModel) {
  fidelity::OnDeviceQuery q;
  q.device = "snapdragon-8-elite-qrd";
  q.engine = "mnn";
  q.runtime = "hexagon";
  q.model = "qwen3-0.6b";
  q.unit = "npu";
  q.dtype = "int4";
  q.group_size = 64;
  q.scale_dtype = "fp16";
  q.activation_dtype = "fp16";
  q.metric = "tokens_per_s";
  q.phase = "decode";
  q.tokens = 64;
  EXPECT_NEAR(fidelity::ondevice_prediction(q, {}), 34.07, 0.01);
  q.phase = "prefill";
  q.tokens = 512;
  q.chunk = 512;
  EXPECT_NEAR(fidelity::ondevice_prediction(q, {}), 1282.1, 0.1);
  q.runtime = "hexagn";
  EXPECT_THROW(fidelity::ondevice_prediction(q, {}), ConfigError);
}

}  // namespace mnn_hexagon_test
}  // namespace mobisim::devices
