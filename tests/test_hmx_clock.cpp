// HMX ubatches of an hvx prefill at the build's HMX clock corner (issue 37; devices/npu.h, engine keys
// npu.hmx_min_rows / hmx_clock / hmx_max_corner_speedup). Expected values are computed by hand.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <string>

#include "devices/engine.h"
#include "devices/npu.h"
#include "experiments/fidelity/ondevice_probe.h"
#include "sim/error.h"

namespace mobisim::devices {
namespace {

using models::DType;

// One compute-bound and one bandwidth-bound operator (as in NpuBackends.HvxOpTimeByHand).
models::Work hmx_clock_two_ops() {
  models::Op gemm;  // 1e10 flops at 1e12 op/s = 10 ms; 4e7 bytes at 20 GB/s = 2 ms
  gemm.kind = models::OpKind::kQProj;
  gemm.flops = 1e10;
  gemm.weight_bytes = 4e7;
  gemm.layers = 4;
  gemm.tokens = 64;
  models::Op norm;  // 2e9 flops = 2 ms; 1e8 bytes = 5 ms: bandwidth-bound
  norm.kind = models::OpKind::kFfnUp;
  norm.flops = 2e9;
  norm.weight_bytes = 1e8;
  norm.layers = 16;
  norm.tokens = 64;
  models::Work w;
  w.ops = {gemm, norm};
  return w;
}

NpuSpec hmx_clock_spec() {
  NpuSpec n;
  n.hvx_peak_tops_int8 = 2;          // 2e12 op/s on HVX
  n.hmx_peak_tflops_fp16 = 2;        // 2e12 op/s on HMX (the same, so both paths give the same rate here)
  n.hvx_gemm_efficiency = 0.5;       // 1e12 achieved
  n.mem_bandwidth_gbps = 50;
  n.hvx_bandwidth_efficiency = 0.4;  // 20 GB/s
  n.hvx_op_overhead_us = 10;         // (4 + 16) calls = 0.2 ms
  return n;
}

TEST(HmxClock, LowestCornerSlowsTheComputeOfHmxUbatchesOnly) {
  NpuSpec n = hmx_clock_spec();
  const models::Work w = hmx_clock_two_ops();
  // Max corner (the default): 10 + 5 + 0.2 ms.
  EXPECT_NEAR(n.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 64), 15.2e-3, 1e-15);
  n.hmx_min_rows = 32;
  n.hmx_clock_slowdown = 1.5;
  EXPECT_EQ(n.hvx_ubatch_slowdown(31), 1.0);  // fewer than 32 rows: HVX, no HMX clock
  EXPECT_EQ(n.hvx_ubatch_slowdown(32), 1.5);
  // 32+ rows at the lowest corner: the GEMM's 10 ms becomes 15 ms; the norm's compute (2 -> 3 ms) stays
  // under its 5 ms of bytes, so it is unchanged: 15 + 5 + 0.2 ms.
  EXPECT_NEAR(n.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 32), 20.2e-3, 1e-15);
  EXPECT_NEAR(n.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 31), 15.2e-3, 1e-15);
  // No HMX path (hmx_min_rows 0): any ubatch runs at the fitted rate.
  n.hmx_min_rows = 0;
  EXPECT_EQ(n.hvx_ubatch_slowdown(4096), 1.0);
}

// The matmuls HMX does not take run the flat HVX kernels at hvx_matmul_efficiency (devices/npu.h).
TEST(HmxClock, UbatchesOffHmxRunAtTheHvxMatmulRate) {
  NpuSpec n = hmx_clock_spec();  // HMX ubatches at 0.5 of 2e12 = 1e12 op/s
  const models::Work w = hmx_clock_two_ops();
  n.hmx_min_rows = 32;
  n.hvx_matmul_efficiency = 0.25;  // 5e11 op/s on HVX: compute factor 0.5 / 0.25 = 2
  EXPECT_EQ(n.hvx_ubatch_slowdown(31), 2.0);
  EXPECT_EQ(n.hvx_ubatch_slowdown(1), 2.0);  // decode: one row, on HVX
  EXPECT_EQ(n.hvx_ubatch_slowdown(32), 1.0);  // max corner
  // 31 rows on HVX: the GEMM 1e10 / 5e11 = 20 ms (over its 2 ms of bytes); the norm 2e9 / 5e11 = 4 ms stays
  // under its 5 ms of bytes: 20 + 5 + 0.2 ms.
  EXPECT_NEAR(n.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 31), 25.2e-3, 1e-15);
  EXPECT_NEAR(n.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 32), 15.2e-3, 1e-15);
  // A build without HMX (hmx_clock: none): 4096 rows run on HVX too.
  n.hmx_in_build = false;
  EXPECT_FALSE(n.on_hmx(4096));
  EXPECT_NEAR(n.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 4096), 25.2e-3, 1e-15);
}

fidelity::OnDeviceQuery hmx_clock_query(std::int64_t tokens) {
  fidelity::OnDeviceQuery q;
  q.device = "poco-myron";
  q.engine = "llama.cpp";
  q.model = "qwen3-1.7b";
  q.unit = "npu";
  q.phase = "prefill";
  q.tokens = tokens;
  q.chunk = tokens;
  q.dtype = "int4";
  q.activation_dtype = "int8";
  return q;
}

TEST(HmxClock, ProbeOfALowestCornerBuildIsSlowerOnlyFromThirtyTwoRows) {
  fidelity::OnDeviceQuery q = hmx_clock_query(256);
  const double max_corner = fidelity::ondevice_prediction(q);
  q.hmx_clock = "max";
  EXPECT_EQ(fidelity::ondevice_prediction(q), max_corner);  // the engine's default corner
  q.hmx_clock = "lowest";
  const double lowest = fidelity::ondevice_prediction(q);
  // Compute-bound ubatch: the throughput ratio is at most the measured 1.33178 (bytes-bound ops do not slow).
  EXPECT_LT(lowest, max_corner);
  EXPECT_LE(max_corner / lowest, 1.33178 + 1e-9);
  EXPECT_GT(max_corner / lowest, 1.2);
  // 31 tokens: every matmul stays on HVX, where the HMX clock does not enter.
  fidelity::OnDeviceQuery short_q = hmx_clock_query(31);
  const double short_max = fidelity::ondevice_prediction(short_q);
  short_q.hmx_clock = "lowest";
  EXPECT_EQ(fidelity::ondevice_prediction(short_q), short_max);
}

TEST(HmxClock, ProbeOfABuildWithoutHmxRunsEveryUbatchOnHvx) {
  // 256 tokens of a build without HMX: every matmul at hvx_matmul_efficiency, below the HMX build's rate.
  fidelity::OnDeviceQuery q = hmx_clock_query(256);
  const double with_hmx = fidelity::ondevice_prediction(q);
  q.hmx_clock = "none";
  const double without_hmx = fidelity::ondevice_prediction(q);
  EXPECT_LT(without_hmx, with_hmx);
  // 31 tokens run on HVX in either build: the same prediction.
  fidelity::OnDeviceQuery short_q = hmx_clock_query(31);
  const double short_hmx = fidelity::ondevice_prediction(short_q);
  short_q.hmx_clock = "none";
  EXPECT_EQ(fidelity::ondevice_prediction(short_q), short_hmx);
  // A 31-token ubatch on HVX is slower per token than a 256-token one on HMX of the same build.
  EXPECT_LT(short_hmx, with_hmx);
}

TEST(HmxClock, HmxRowsWithoutAnHvxMatmulRateIsAConfigError) {
  const char* without_hvx_rate = R"(
name: hmx-test
npu: {prefill_backend: hvx, decode_backend: hvx, hvx_gemm_efficiency: 0.5, hvx_bandwidth_efficiency: 0.5,
      hvx_op_overhead_us: 0, hmx_min_rows: 32}
)";
  try {
    EngineProfile::from_yaml(YAML::Load(without_hvx_rate), ConfigSource{});
    FAIL() << "hmx_min_rows without hvx_matmul_efficiency must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hvx_matmul_efficiency"), std::string::npos) << e.what();
  }
}

TEST(HmxClock, LowestCornerWithoutItsMeasuredRatioIsAConfigError) {
  const char* without_ratio = R"(
name: hmx-test
npu: {prefill_backend: hvx, decode_backend: hvx, hvx_gemm_efficiency: 0.5, hvx_bandwidth_efficiency: 0.5,
      hvx_op_overhead_us: 0, hmx_min_rows: 32, hmx_clock: lowest}
)";
  try {
    EngineProfile::from_yaml(YAML::Load(without_ratio), ConfigSource{});
    FAIL() << "hmx_clock lowest without hmx_max_corner_speedup must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hmx_max_corner_speedup"), std::string::npos) << e.what();
  }
  const char* without_rows = R"(
name: hmx-test
npu: {prefill_backend: hvx, decode_backend: hvx, hvx_gemm_efficiency: 0.5, hvx_bandwidth_efficiency: 0.5,
      hvx_op_overhead_us: 0, hmx_clock: lowest, hmx_max_corner_speedup: 1.3}
)";
  EXPECT_THROW(EngineProfile::from_yaml(YAML::Load(without_rows), ConfigSource{}), ConfigError);
  // An unknown corner is refused by the engine's schema (max | lowest).
  fidelity::OnDeviceQuery q = hmx_clock_query(256);
  q.hmx_clock = "sometimes";
  EXPECT_THROW(fidelity::ondevice_prediction(q), ConfigError);
}

}  // namespace
}  // namespace mobisim::devices
