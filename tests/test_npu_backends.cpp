// NPU backends (HTP matrix engine vs HVX vector units) and CPU+NPU overlap across prefill chunks
// (issue 37 item 2, devices/npu.h). Expected values are computed by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "devices/device.h"
#include "devices/engine.h"
#include "devices/npu.h"
#include "experiments/fidelity/ondevice_probe.h"
#include "models/cost_model.h"
#include "sim/error.h"

namespace mobisim::devices {
namespace {

using models::DType;

TEST(NpuBackends, HvxOpTimeByHand) {
  NpuSpec n;
  n.hvx_peak_tops_int8 = 2;           // 2e12 int8 op/s
  n.hvx_gemm_efficiency = 0.5;        // 1e12 achieved
  n.mem_bandwidth_gbps = 50;
  n.hvx_bandwidth_efficiency = 0.4;   // 20 GB/s achieved
  n.hvx_op_overhead_us = 10;
  models::Work w;
  models::Op gemv;                    // bandwidth-bound: 2e9 flops -> 2 ms, 1e8 bytes -> 5 ms
  gemv.kind = models::OpKind::kFfnUp;
  gemv.flops = 2e9;
  gemv.weight_bytes = 1e8;
  gemv.layers = 16;                   // 16 calls x 10 us = 0.16 ms
  gemv.tokens = 1;
  models::Op gemm;                    // compute-bound: 1e10 flops -> 10 ms, 4e7 bytes -> 2 ms
  gemm.kind = models::OpKind::kQProj;
  gemm.flops = 1e10;
  gemm.weight_bytes = 4e7;
  gemm.layers = 4;                    // 0.04 ms
  gemm.tokens = 1;
  w.ops = {gemv, gemm};
  const double by_hand = (5e-3 + 0.16e-3) + (10e-3 + 0.04e-3);
  EXPECT_NEAR(n.hvx_seconds(w, DType::kInt4, "decode"), by_hand, 1e-15);
  // A phase on hvx goes through it; on htp (the default) it does not.
  n.peak_tops_int8 = 80;
  n.max_utilization = 0.5;
  n.decode_bandwidth_efficiency = 1.0;
  EXPECT_NE(n.decode_seconds(w, DType::kInt4, DType::kInt8), by_hand);
  n.decode_backend = NpuBackend::kHvx;
  EXPECT_NEAR(n.decode_seconds(w, DType::kInt4, DType::kInt8), by_hand, 1e-15);
  // Float weights need the fp16 HVX peak, which this spec does not have.
  EXPECT_THROW(n.hvx_seconds(w, DType::kF16, "decode"), ConfigError);
}

TEST(NpuBackends, MissingHvxPeakIsAConfigErrorNamingDeviceEngineAndKey) {
  fidelity::OnDeviceQuery q;
  q.device = "oneplus-12";  // a document's profile: no HVX peak
  q.engine = "mllm";
  q.model = "llama-3.2-1b";
  q.unit = "npu";
  q.phase = "prefill";
  q.tokens = 128;
  q.chunk = 128;
  q.dtype = "int4";  // Q4_0 weights, 8-bit activations (the HVX int8 peak)
  q.activation_dtype = "int8";
  EXPECT_NO_THROW(fidelity::ondevice_prediction(q));  // on htp it runs as before
  // hvx needs the engine's own kernel values: none is inherited.
  try {
    fidelity::ondevice_prediction(q, {"engine.npu.prefill_backend=hvx"});
    FAIL() << "selecting hvx without the engine's hvx values must be a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hvx_gemm_efficiency"), std::string::npos) << e.what();
  }
  const std::vector<std::string> hvx_values{"engine.npu.hvx_gemm_efficiency=0.5", "engine.npu.hvx_bandwidth_efficiency=0.5",
                                            "engine.npu.hvx_op_overhead_us=0"};
  auto with = [&](std::vector<std::string> o) {
    o.insert(o.end(), hvx_values.begin(), hvx_values.end());
    return o;
  };
  try {
    fidelity::ondevice_prediction(q, with({"engine.npu.prefill_backend=hvx"}));
    FAIL() << "selecting hvx without the device's HVX peak must be a ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("oneplus-12"), std::string::npos) << what;
    EXPECT_NE(what.find("'mllm'"), std::string::npos) << what;
    EXPECT_NE(what.find("npu.hvx_peak_tops_int8"), std::string::npos) << what;
    EXPECT_NE(what.find("prefill"), std::string::npos) << what;
  }
  q.phase = "decode";
  EXPECT_THROW(fidelity::ondevice_prediction(q, with({"engine.npu.decode_backend=hvx"})), ConfigError);
  // Given the peak, the same selection runs.
  EXPECT_GT(fidelity::ondevice_prediction(q, with({"engine.npu.decode_backend=hvx", "device.npu.hvx_peak_tops_int8=2"})), 0);
  // An unknown backend is refused.
  EXPECT_THROW(fidelity::ondevice_prediction(q, {"engine.npu.decode_backend=hmx"}), ConfigError);
}

TEST(NpuBackends, OverlapClosedFormAgainstAHandComputedThreeChunkExample) {
  // NPU stage a_i, CPU stage b_i. By hand, lock-step: [0,3] a1; [3,5] a2 | b1; [5,10] a3 | b2; [10,12] b3.
  EXPECT_DOUBLE_EQ(pipelined_seconds({3, 2, 4}, {1, 5, 2}), 12.0);
  // The two-machine flow shop by hand gives the same here: NPU ends 3, 5, 9; CPU ends 4, 10, 12.
  // NPU-bound throughout: sum a + the last CPU stage; CPU-bound: the first NPU stage + sum b.
  EXPECT_DOUBLE_EQ(pipelined_seconds({4, 4, 4}, {1, 2, 3}), 4 + 4 + 4 + 3.0);
  EXPECT_DOUBLE_EQ(pipelined_seconds({1, 1, 1}, {5, 6, 7}), 1 + 5 + 6 + 7.0);
  EXPECT_DOUBLE_EQ(pipelined_seconds({2}, {3}), 5.0);  // one chunk: no overlap
  EXPECT_DOUBLE_EQ(pipelined_seconds({}, {}), 0.0);

  // The chunked prefill: three 128-token chunks, the NPU runs all but attention, the CPU attention.
  NpuSpec n;
  n.peak_tops_int8 = 40;
  n.max_utilization = 0.5;
  n.half_utilization_chunk = 128;
  n.exec_overhead_ms = 1;
  n.mem_bandwidth_gbps = 1e6;  // compute-bound
  const models::CostModel cost(models::load_model_spec(YAML::Load("{base: qwen2.5-1.5b, weight_dtype: int8, activation_dtype: int8}"),
                                                       ConfigSource{}));
  const double peak = 40e12 * 0.5 * 128 / (128 + 128.0);
  const double cpu_rate = 1e11;  // the CPU's float rate on attention
  std::vector<double> a, b;
  for (int c = 0; c < 3; ++c) {
    const models::Work w = cost.prefill(models::PrefillShape{128, 128 * c, 0, c == 2 ? 1 : 0});
    double attn = 0;
    for (const auto& op : w.ops)
      if (models::is_attention(op.kind)) attn += op.flops;
    a.push_back(1e-3 + (w.flops() - attn) / peak);
    b.push_back(attn / cpu_rate);
  }
  const double by_hand = a[0] + std::max(a[1], b[0]) + std::max(a[2], b[1]) + b[2];
  const double t = n.overlapped_prefill_seconds(cost, 384, 0, 128, [&](const models::Work& w) { return w.flops() / cpu_rate; });
  EXPECT_NEAR(t, by_hand, 1e-12);
  // In the probe the CPU stage needs the CPU's float-attention rate: without it, a ConfigError naming the key.
  fidelity::OnDeviceQuery q;
  q.device = "oneplus-12";
  q.engine = "mllm";
  q.model = "qwen2.5-1.5b";
  q.unit = "npu";
  q.phase = "prefill";
  q.tokens = 512;
  try {
    fidelity::ondevice_prediction(q, {"engine.npu.cpu_overlap=true"});
    FAIL() << "overlap without the CPU's attention efficiency must be a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("compute.cpu.attention_compute_efficiency"), std::string::npos) << e.what();
  }
  EXPECT_GT(fidelity::ondevice_prediction(q, {"engine.npu.cpu_overlap=true", "device.compute.cpu.attention_compute_efficiency=0.2"}), 0);
  // Overlap hides work: less than running both stages back to back.
  EXPECT_LT(t, a[0] + a[1] + a[2] + b[0] + b[1] + b[2]);
}

}  // namespace
}  // namespace mobisim::devices
