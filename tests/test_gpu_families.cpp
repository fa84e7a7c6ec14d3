// GPU families (issue 37 item 2, GPU side): a runtime's GPU kernel values are given per GPU family
// (engine `gpu.families`), applied to each device's own peaks, and a GPU of a family the runtime has no
// values for is a ConfigError naming device, engine, family and key (devices/engine.h). Expected times are
// computed by hand in the comments.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "devices/compute_unit.h"
#include "devices/device.h"
#include "devices/engine.h"
#include "models/cost_model.h"
#include "sim/error.h"
#include "test_util.h"

namespace mobisim::devices {
namespace {

using models::DType;

DeviceProfile gpu_device(const std::string& yaml) { return load_device_profile(YAML::Load(yaml), ConfigSource{}); }
EngineProfile gpu_engine(const std::string& yaml) {
  return load_engine_profile(YAML::Load(yaml), ConfigSource{std::make_shared<std::string>("family.yaml"), ""});
}

// Adreno values only: int4 prefill at 0.1 of the GPU's peak, decode bound by half the DRAM bandwidth.
constexpr const char* kAdrenoOnly =
    "{name: family-test, gpu: {families: {adreno: {prefill_efficiency: {int4: 0.1}, decode_efficiency: {int4: 0.1}, "
    "bandwidth_efficiency: 0.5, call_overhead_us: 0}}}}";

// A compute-bound batched operator: 2 x 512 x 2048 x 8192 FLOP over 1 MB, 16 layers.
models::Op batched_gpu_op() {
  return models::Op{models::OpKind::kFfnGate, 2.0 * 512 * 2048 * 8192, 1e6, 0, 0, 0, 16, 512, std::nullopt};
}

TEST(GpuFamilies, TheFamilysValuesApplyToThisGpusPeak) {
  // The Pixel 7 profile's GPU (Mali-G710 peaks: fp16 1.52 TFLOP/s) relabelled as an Adreno: the engine's
  // Adreno value applies to that peak. 2 x 512 x 2048 x 8192 = 17.18e9 FLOP / (1.52e12 x 0.1) = 0.11304 s.
  const DeviceProfile d =
      gpu_engine(kAdrenoOnly).apply(gpu_device("{base: pixel7, compute: {gpu: {family: adreno, generation: a7x}}}"));
  const ComputeUnitSpec& gpu = d.unit("gpu", "t");
  EXPECT_NEAR(gpu.op_seconds(batched_gpu_op(), DType::kInt4), 2.0 * 512 * 2048 * 8192 / (1.52e12 * 0.1), 1e-12);
  // The result says which family's values ran on which GPU.
  ASSERT_EQ(d.derived_from_soc.size(), 1u);
  for (const char* w : {"adreno values", "family-test", "gpu.families.adreno", "a7x", "fp16 1.52"})
    EXPECT_NE(d.derived_from_soc[0].find(w), std::string::npos) << w << " not in " << d.derived_from_soc[0];
  // A dtype the family does not give is still a gap (no fallback to the device's 0.2).
  testing::expect_config_error_naming([&] { gpu.op_seconds(batched_gpu_op(), DType::kF16); },
                      {"engine 'family-test'", "gpu prefill", "fp16", "gpu.prefill_efficiency"});
}

TEST(GpuFamilies, AGpuWithoutOrOfAnotherFamilyIsAConfigErrorNamingIt) {
  // No family in the device profile (the Pixel 7's own): every GPU value is missing.
  const DeviceProfile bare = gpu_engine(kAdrenoOnly).apply(load_device_profile("pixel7"));
  testing::expect_config_error_naming([&] { bare.unit("gpu", "t").op_seconds(batched_gpu_op(), DType::kInt4); },
                      {"engine 'family-test'", "family.yaml", "device 'pixel7'", "compute.gpu.family", "adreno",
                       "gpu prefill", "int4"});
  // A Mali GPU: the engine has no Mali values, even for the int4 prefill it gives on Adreno.
  const DeviceProfile mali = gpu_engine(kAdrenoOnly).apply(gpu_device("{base: pixel7, compute: {gpu: {family: mali}}}"));
  testing::expect_config_error_naming([&] { mali.unit("gpu", "t").op_seconds(batched_gpu_op(), DType::kInt4); },
                      {"engine 'family-test'", "family 'mali'", "gpu.families.mali", "inherit_device"});
  EXPECT_TRUE(mali.derived_from_soc.empty());
}

TEST(GpuFamilies, NamedInheritanceTakesTheDevicesValuesAndRecordsThem) {
  // Mali listed with no values of its own and `inherit_device: {gpu: ...}`: a Mali GPU runs the device
  // profile's values (Pixel 7: efficiency 0.2, bandwidth 0.6, 50 us per operator and layer), not the Adreno
  // ones, and the result lists what was taken: 17.18e9 / (1.52e12 x 0.2) + 16 x 50e-6 = 0.056512 + 0.0008 s.
  const std::string with_inheritance =
      "{name: family-test, inherit_device: {gpu: 'no Mali kernels measured'}, gpu: {families: {mali: {}, adreno: "
      "{prefill_efficiency: 0.1, decode_efficiency: 0.1, bandwidth_efficiency: 0.5, call_overhead_us: 0}}}}";
  const DeviceProfile d =
      gpu_engine(with_inheritance).apply(gpu_device("{base: pixel7, compute: {gpu: {family: mali}}}"));
  EXPECT_NEAR(d.unit("gpu", "t").op_seconds(batched_gpu_op(), DType::kInt4),
              2.0 * 512 * 2048 * 8192 / (1.52e12 * 0.2) + 16 * 50e-6, 1e-12);
  // An Apple GPU is not listed: the inheritance does not reach it.
  const DeviceProfile apple =
      gpu_engine(with_inheritance).apply(gpu_device("{base: pixel7, compute: {gpu: {family: apple}}}"));
  testing::expect_config_error_naming([&] { apple.unit("gpu", "t").op_seconds(batched_gpu_op(), DType::kInt4); },
                      {"family 'apple'", "gpu.families.apple"});
  bool recorded = false;
  for (const auto& line : d.inherited_from_device)
    recorded |= line.find("compute_efficiency=0.2") != std::string::npos &&
                line.find("no Mali kernels measured") != std::string::npos;
  EXPECT_TRUE(recorded);
}

TEST(GpuFamilies, OnlyAGpuHasFamilies) {
  testing::expect_config_error_naming([] { gpu_engine("{name: x, cpu: {families: {adreno: {prefill_efficiency: 0.1}}}}"); },
                      {"families", "only a gpu"});
  testing::expect_config_error_naming([] { gpu_engine("{name: x, gpu: {families: {adreno: {prefill_efficency: 0.1}}}}"); },
                      {"prefill_efficency"});
}

TEST(GpuFamilies, LlamaCppRunsOneKernelClassForQ8F16AndQ6KOnAdrenoAndNothingElsewhere) {
  const EngineProfile llama = load_engine_profile("llama.cpp");
  const DeviceProfile elite = llama.apply(load_device_profile("snapdragon-8-elite-qrd"));
  const ComputeUnitSpec& gpu = elite.unit("gpu", "t");
  // Q8_0, F16 and Q6_K prefill run the same generic tiled GEMM (l4_lm): the same share of the same fp16 peak.
  const double q8 = gpu.efficiency(DType::kInt8, false) * gpu.peak_flops(DType::kInt8);
  EXPECT_DOUBLE_EQ(gpu.efficiency(DType::kF16, false) * gpu.peak_flops(DType::kF16), q8);
  EXPECT_DOUBLE_EQ(gpu.efficiency(DType::kInt6, false) * gpu.peak_flops(DType::kInt6), q8);
  // Q4_0 runs the Adreno-specific noshuffle GEMM: a kernel class of its own.
  EXPECT_NE(gpu.efficiency(DType::kInt4, false) * gpu.peak_flops(DType::kInt4), q8);
  // bf16 has no OpenCL kernel class: an error, not the device's 0.2.
  testing::expect_config_error_naming([&] { gpu.efficiency(DType::kBF16, false); }, {"engine 'llama.cpp'", "gpu prefill", "bf16"});
  // A Mali GPU (Pixel 8 Pro): no llama.cpp OpenCL value at all.
  const DeviceProfile pixel = llama.apply(load_device_profile("pixel-8-pro"));
  testing::expect_config_error_naming([&] { pixel.unit("gpu", "t").efficiency(DType::kInt4, false); },
                      {"engine 'llama.cpp'", "device 'pixel-8-pro'", "family 'mali'", "gpu.families.mali"});
  // MLC has Adreno and Mali values, none for an Apple GPU (Metal).
  const EngineProfile mlc = load_engine_profile("mlc");
  EXPECT_NO_THROW(mlc.apply(load_device_profile("pixel-8-pro")).unit("gpu", "t").bandwidth_efficiency_for(DType::kInt4));
  const DeviceProfile iphone = mlc.apply(load_device_profile("iphone-15-pro"));
  testing::expect_config_error_naming([&] { iphone.unit("gpu", "t").efficiency(DType::kInt4, true); },
                      {"engine 'mlc'", "family 'apple'", "gpu.families.apple"});
}

}  // namespace
}  // namespace mobisim::devices
