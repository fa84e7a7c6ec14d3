// HVX contexts vs the HMX unit (issue 37; devices/npu.h "HVX contexts vs the HMX unit"): an hvx-backend
// ubatch off HMX runs against the SoC's HVX peak, which counts its reported 128-byte contexts; an HMX ubatch
// runs against the one HMX unit's peak, which does not. Expected values are computed by hand.
#include <gtest/gtest.h>

#include <string>

#include "devices/device.h"
#include "devices/npu.h"
#include "sim/error.h"

namespace mobisim::devices {
namespace {

using models::DType;

// One compute-bound matmul: 1e10 flops; 4e6 weight bytes at 20 GB/s = 0.2 ms, always under its compute.
models::Work hvx_contexts_one_gemm() {
  models::Op gemm;
  gemm.kind = models::OpKind::kQProj;
  gemm.flops = 1e10;
  gemm.weight_bytes = 4e6;
  gemm.layers = 1;
  gemm.tokens = 64;
  models::Work w;
  w.ops = {gemm};
  return w;
}

// A llama.cpp-like spec: HMX from 32 rows, HVX matmuls at 0.25 of the HVX peak, HMX ubatches at 0.1 of
// the HMX peak (10 TFLOP/s -> 1e12 op/s), no per-op dispatch cost.
NpuSpec hvx_contexts_spec(double hvx_peak_tops) {
  NpuSpec n;
  n.hvx_peak_tops_int8 = hvx_peak_tops;
  n.hmx_peak_tflops_fp16 = 10;
  n.hvx_gemm_efficiency = 0.1;
  n.hvx_matmul_efficiency = 0.25;
  n.hmx_min_rows = 32;
  n.mem_bandwidth_gbps = 50;
  n.hvx_bandwidth_efficiency = 0.4;
  return n;
}

TEST(HvxContexts, HvxUbatchesScaleWithTheContextCountHmxUbatchesDoNot) {
  // 4 contexts x 512 ops x 1 GHz = 2.048 TOPS; 6 contexts: 3.072 TOPS.
  const NpuSpec four = hvx_contexts_spec(2.048);
  const NpuSpec six = hvx_contexts_spec(3.072);
  const models::Work w = hvx_contexts_one_gemm();
  // 25 rows (< 32) run on HVX at 0.25 of the peak: 1e10 / (2.048e12 x 0.25) = 19.53125 ms on 4 contexts,
  // 1e10 / (3.072e12 x 0.25) = 13.0208333 ms on 6: the ratio of the contexts, 4/6.
  EXPECT_NEAR(four.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 25), 19.53125e-3, 1e-12);
  EXPECT_NEAR(six.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 25), 13.0208333333e-3, 1e-12);
  // Decode (one row) is an HVX ubatch too.
  EXPECT_NEAR(six.hvx_ubatch_seconds(w, DType::kInt4, "decode", 1), 13.0208333333e-3, 1e-12);
  // 64 rows run on the HMX unit at 0.1 of 10 TFLOP/s = 1e12 op/s: 10 ms, whatever the HVX context count.
  EXPECT_NEAR(four.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 64), 10e-3, 1e-12);
  EXPECT_NEAR(six.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 64), 10e-3, 1e-12);
  // At the lowest HMX clock corner (compute x 1.5): 15 ms, still the same on both.
  NpuSpec slow = six;
  slow.hmx_clock_slowdown = 1.5;
  EXPECT_NEAR(slow.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 64), 15e-3, 1e-12);
}

TEST(HvxContexts, AnHmxUbatchOnADeviceWithoutAnHmxPeakIsAConfigError) {
  NpuSpec n = hvx_contexts_spec(2.048);
  n.hmx_peak_tflops_fp16 = 0;
  n.device_name = "no-hmx-phone";
  const models::Work w = hvx_contexts_one_gemm();
  // Fewer rows than hmx_min_rows never need it.
  EXPECT_NEAR(n.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 31), 19.53125e-3, 1e-12);
  try {
    n.hvx_ubatch_seconds(w, DType::kInt4, "prefill", 32);
    FAIL() << "an HMX ubatch without the device's HMX peak must be refused";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("hmx_peak_tflops_fp16"), std::string::npos) << what;
    EXPECT_NE(what.find("no-hmx-phone"), std::string::npos) << what;
  }
}

TEST(HvxContexts, SnapdragonProfilesCountTheReportedContexts) {
  // 512 int8 ops per cycle per context x 1.2 GHz = 0.6144 TOPS per context: v73 4 (assumed), v79 6 and
  // v81 8 (reported by the DSP), to the profiles' two decimals; one HMX peak (9.9 TFLOP/s) on all three.
  const struct {
    const char* device;
    double contexts;
  } phones[] = {{"galaxy-s23", 4}, {"snapdragon-8-elite-qrd", 6}, {"snapdragon-8-elite-gen5-qrd", 8},
                {"poco-myron", 8}};
  for (const auto& p : phones) {
    const DeviceProfile d = load_device_profile(p.device);
    ASSERT_TRUE(d.npu.has_value()) << p.device;
    EXPECT_NEAR(d.npu->hvx_peak_tops_int8, p.contexts * 0.6144, 0.005) << p.device;
    EXPECT_EQ(d.npu->hmx_peak_tflops_fp16, 9.9) << p.device;
  }
}

}  // namespace
}  // namespace mobisim::devices
