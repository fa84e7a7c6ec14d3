// CPU kernel classes (issue 37): a runtime's integer-matmul kernel paths, each with its own share of the SoC's
// ISA peak (devices/engine.h: cpu.kernel_classes, cpu.kernels), and the ondevice probe's `cpu_kernels` /
// `threads`, which say how a measured build ran. Expected values are computed by hand in the comments.
#include <gtest/gtest.h>

#include <string>

#include "devices/compute_unit.h"
#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/fidelity/ondevice_probe.h"
#include "sim/error.h"
#include "test_util.h"

namespace mobisim::devices {
namespace {

using models::DType;

DeviceProfile kc_device(const std::string& yaml) { return load_device_profile(YAML::Load(yaml), ConfigSource{}); }
EngineProfile kc_engine(const std::string& yaml) { return load_engine_profile(YAML::Load(yaml), ConfigSource{}); }

// A Pixel 7 given one X4-like core with i8mm: 3.3e9 x 4 pipes x 64 ops (SMMLA) = 844.8e9 op/s.
const char* kOneX4 =
    "{base: pixel7, compute: {cpu: {clusters: [{core: cortex-x4, count: 1, ghz: 3.3, vector_pipes: 4}], "
    "isa: [dotprod, i8mm]}}}";

// Two classes: vec_dot with its own values, repack = vec_dot x 1.5 for int4 only. CLASS is the one run.
std::string two_class_engine(const std::string& cls) {
  return "{name: kc-test, description: t, inherit_device: {cpu.prefill.fp16: test, cpu.decode.fp16: test}, "
         "cpu: {isa_kernels: [i8mm, dotprod], threads: '1', kernels: " + cls + ", kernel_classes: {"
         "vec_dot: {prefill_efficiency: {int4: 0.02, int8: 0.02}, decode_efficiency: {int4: 0.02, int8: 0.02}}, "
         "repack: {relative_to: vec_dot, speedup: {int4: 1.5}}}, bandwidth_efficiency: 0.3, call_overhead_us: 1}}";
}

double int_rate(const DeviceProfile& d, DType t, bool decode = false) {
  const ComputeUnitSpec& c = d.compute.at("cpu");
  return c.efficiency(t, decode) * c.peak_flops(t);
}

TEST(CpuKernelClasses, EachClassIsItsShareOfTheIsaPeak) {
  // repack: 0.02 x 1.5 = 0.03 of 844.8e9 = 25.344e9 op/s, prefill and decode; vec_dot: 0.02 x 844.8e9 = 16.896e9.
  const DeviceProfile repack = kc_engine(two_class_engine("repack")).apply(kc_device(kOneX4));
  EXPECT_NEAR(int_rate(repack, DType::kInt4), 25.344e9, 1e-3);
  EXPECT_NEAR(int_rate(repack, DType::kInt4, true), 25.344e9, 1e-3);
  const DeviceProfile vec_dot = kc_engine(two_class_engine("vec_dot")).apply(kc_device(kOneX4));
  EXPECT_NEAR(int_rate(vec_dot, DType::kInt4), 16.896e9, 1e-3);
  EXPECT_NEAR(int_rate(vec_dot, DType::kInt8), 16.896e9, 1e-3);
  // The result says which class ran.
  ASSERT_EQ(repack.derived_from_soc.size(), 1u);
  EXPECT_EQ(repack.derived_from_soc.front().rfind("cpu integer kernels: class repack, i8mm path, 1 threads", 0), 0u)
      << repack.derived_from_soc.front();
}

TEST(CpuKernelClasses, ADtypeTheClassDoesNotGiveIsAnErrorNamingTheClass) {
  // repack's speedup names int4 only: its int8 is a gap, not vec_dot's value nor the device's (no inheritance).
  const DeviceProfile repack = kc_engine(two_class_engine("repack")).apply(kc_device(kOneX4));
  testing::expect_config_error_naming([&] { (void)int_rate(repack, DType::kInt8); },
                                      {"engine 'kc-test'", "kernel class 'repack'", "cpu prefill", "int8"});
}

TEST(CpuKernelClasses, MalformedClassesAreConfigErrors) {
  // An unknown class names it and the classes there are.
  testing::expect_config_error_naming([] { (void)kc_engine(two_class_engine("kleidiai")); },
                                      {"kc-test", "'kleidiai'", "repack, vec_dot"});
  const std::string isa = "isa_kernels: [i8mm], threads: all, ";
  const std::string vd = "vec_dot: {prefill_efficiency: {int4: 0.02}, decode_efficiency: {int4: 0.02}}";
  auto cpu = [](const std::string& body) { return "{name: e, description: t, cpu: {" + body + "}}"; };
  // Classes without `kernels`, `kernels` without classes, unit-level efficiencies beside classes.
  EXPECT_THROW(kc_engine(cpu(isa + "kernel_classes: {" + vd + "}")), ConfigError);
  EXPECT_THROW(kc_engine(cpu(isa + "kernels: vec_dot")), ConfigError);
  EXPECT_THROW(kc_engine(cpu(isa + "kernels: vec_dot, prefill_efficiency: {int8: 0.1}, kernel_classes: {" + vd + "}")),
               ConfigError);
  // A relative class: its base must exist and have its own values for the dtypes it scales; speedup needs it.
  EXPECT_THROW(kc_engine(cpu(isa + "kernels: r, kernel_classes: {r: {relative_to: nope, speedup: {int4: 2}}}")),
               ConfigError);
  EXPECT_THROW(kc_engine(cpu(isa + "kernels: r, kernel_classes: {" + vd + ", r: {relative_to: vec_dot, speedup: {int8: 2}}}")),
               ConfigError);
  EXPECT_THROW(kc_engine(cpu(isa + "kernels: vec_dot, kernel_classes: {vec_dot: {speedup: {int4: 2}}}")), ConfigError);
  EXPECT_THROW(kc_engine(cpu(isa + "kernels: r, kernel_classes: {" + vd + ", r: {relative_to: vec_dot}}")), ConfigError);
  // Only a cpu has kernel classes.
  EXPECT_THROW(kc_engine("{name: e, description: t, gpu: {kernels: a, kernel_classes: {a: {prefill_efficiency: 0.1}}}}"),
               ConfigError);
}

TEST(CpuKernelClasses, LlamaCppRepackIsVecDotTimesTheMeasuredRatio) {
  // configs/engines/llama.cpp.yaml: repack = vec_dot x pocketpal-ai PR #637's Pixel 9 ratios (mmap off, repack
  // off -> on: Q4_0 88.49 / 51.85, Q8_0 107.71 / 56.56) at an even split. vec_dot is one class for Q4_0 and Q8_0, decode at the
  // GEMM's share.
  const auto profile = load_engine_profile("llama.cpp");  // kept: the references below point into it
  const EngineUnitSpec& cpu = profile.units.at("cpu");
  EXPECT_EQ(cpu.kernels, "repack");
  const EngineKernelValues& vd = cpu.kernel_classes.at("vec_dot");
  const EngineKernelValues& rp = cpu.kernel_classes.at("repack");
  const double e4 = vd.prefill_efficiency.by_dtype.at(DType::kInt4);
  EXPECT_EQ(vd.prefill_efficiency.by_dtype.at(DType::kInt8), e4);
  EXPECT_EQ(vd.decode_efficiency.by_dtype.at(DType::kInt4), e4);
  EXPECT_EQ(vd.decode_efficiency.by_dtype.at(DType::kInt8), e4);
  // The repack ratios are PR #637's with that Pixel 9 run's chunking loss divided out (its repacked matmuls: 24
  // chunks on 6 threads, 1497.6 of an even-split 2042.88 GOP/s; test CpuIsa.ChunkedPeakOfPocketPalsSixThreadsByHand).
  const double chunking_loss = 2042.88 / 1497.6;
  EXPECT_NEAR(rp.prefill_efficiency.by_dtype.at(DType::kInt4), e4 * 88.49 / 51.85 * chunking_loss, 1e-6 * e4);
  EXPECT_NEAR(rp.prefill_efficiency.by_dtype.at(DType::kInt8), e4 * 107.71 / 56.56 * chunking_loss, 1e-6 * e4);
  // Q6_K: vec_dot at PR #637's Q6_K / Q4_0 rate ratio with repack off (36.62 / 51.85), repack at its own ratio
  // (54.67 / 36.62, x the chunking loss), so repack int6 = int4 x 54.67 / 51.85 x the chunking loss.
  EXPECT_NEAR(vd.prefill_efficiency.by_dtype.at(DType::kInt6), e4 * 36.62 / 51.85, 1e-6 * e4);
  EXPECT_NEAR(rp.prefill_efficiency.by_dtype.at(DType::kInt6), e4 * 54.67 / 51.85 * chunking_loss, 1e-5 * e4);
  // The unit runs the default class's values.
  EXPECT_EQ(cpu.prefill_efficiency.by_dtype.at(DType::kInt4), rp.prefill_efficiency.by_dtype.at(DType::kInt4));
}

// The ondevice probe's cpu_kernels and threads reach the engine: llama.cpp's vec_dot class on the POCO Myron
// (8 Elite Gen 5) with PocketPal's 6 threads runs on the 2 prime + 4 performance Oryon cores:
// (2 x 4.60 + 4 x 3.62) GHz x 2 SMMLA per cycle (Oryon's issue_per_cycle, not its 4 pipes) x 64 ops = 3031.04e9 op/s.
TEST(CpuKernelClasses, AProbesClassAndThreadsSetThePeakAndShare) {
  YAML::Node eng = YAML::LoadFile(std::string(MOBISIM_SOURCE_DIR) + "/configs/engines/llama.cpp.yaml");
  eng["cpu"]["kernels"] = "vec_dot";
  eng["cpu"]["threads"] = "6";
  const EngineProfile e = load_engine_profile(eng, ConfigSource{});
  const double e4 = e.units.at("cpu").kernel_classes.at("vec_dot").prefill_efficiency.by_dtype.at(DType::kInt4);
  EXPECT_NEAR(int_rate(e.apply(load_device_profile("poco-myron")), DType::kInt4), e4 * 3031.04e9, 1e-2);
  // The probe fields do the same as those engine overrides.
  fidelity::OnDeviceQuery q;
  q.device = "poco-myron";
  q.engine = "llama.cpp";
  q.model = "qwen3-1.7b";
  q.unit = "cpu";
  q.phase = "prefill";
  q.tokens = 512;
  q.dtype = "int4";
  q.activation_dtype = "int8";
  const double by_override = fidelity::ondevice_prediction(q, {"engine.cpu.kernels=vec_dot", "engine.cpu.threads=6"});
  const double repack_all = fidelity::ondevice_prediction(q);
  q.cpu_kernels = "vec_dot";
  q.threads = 6;
  EXPECT_DOUBLE_EQ(fidelity::ondevice_prediction(q), by_override);
  EXPECT_LT(fidelity::ondevice_prediction(q), repack_all);  // fewer cores, the slower class
  // A class the engine does not have is an error naming it (no silent fallback to the default class).
  q.cpu_kernels = "kleidiai";
  testing::expect_config_error_naming([&] { (void)fidelity::ondevice_prediction(q); },
                                      {"llama.cpp", "'kleidiai'", "repack, vec_dot"});
}

// The probe's cpu_isa_detected: MNN 2.8.0's iOS build detected no i8mm on the A16 (docs/cpu_isa_sources.md), so
// its int8 GEMMs ran SDOT. MNN's 4 threads on the iPhone 14 Pro take the 2 P-cores (3.46 GHz, 4 pipes) and 2 E-cores
// (2.02 GHz, 2 pipes): 2 x 3.46 x 4 + 2 x 2.02 x 2 = 35.76 GHz-pipes; x 64 (SMMLA) = 2288.64e9 op/s, x 32 (SDOT) =
// 1144.32e9 op/s.
TEST(CpuKernelClasses, AProbesDetectedIsaPicksThePathTheBuildRan) {
  const EngineProfile mnn = load_engine_profile(
      YAML::LoadFile(std::string(MOBISIM_SOURCE_DIR) + "/configs/engines/mnn.yaml"), ConfigSource{});
  const double e4 = mnn.units.at("cpu").prefill_efficiency.by_dtype.at(DType::kInt4);
  EXPECT_NEAR(int_rate(mnn.apply(load_device_profile("iphone-14-pro")), DType::kInt4), e4 * 2288.64e9, 1.0);
  YAML::Node sdot_only = YAML::Load("{base: iphone-14-pro, compute: {cpu: {isa: [dotprod, bf16]}}}");
  EXPECT_NEAR(int_rate(mnn.apply(load_device_profile(sdot_only, ConfigSource{})), DType::kInt4), e4 * 1144.32e9, 1.0);
  // The probe key does what that device override does, and the prefill slows (it is compute-bound here).
  fidelity::OnDeviceQuery q;
  q.device = "iphone-14-pro";
  q.engine = "mnn";
  q.model = "qwen1.5-1.8b";
  q.unit = "cpu";
  q.phase = "prefill";
  q.tokens = 128;
  q.dtype = "int4";
  const double chip = fidelity::ondevice_prediction(q);
  const double by_override = fidelity::ondevice_prediction(q, {"device.compute.cpu.isa=[dotprod, bf16]"});
  q.cpu_isa_detected = {"dotprod"};
  const double detected = fidelity::ondevice_prediction(q);
  EXPECT_DOUBLE_EQ(detected, by_override);
  EXPECT_LT(detected, 0.6 * chip);  // half the peak; per-op overheads keep it above exactly half
  // A build cannot detect what the chip lacks: the Galaxy S20+'s Snapdragon 865 (Armv8.2) has no i8mm.
  q.device = "galaxy-s20-plus";
  q.cpu_isa_detected = {"i8mm"};
  testing::expect_config_error_naming([&] { (void)fidelity::ondevice_prediction(q); },
                                      {"cpu_isa_detected", "'i8mm'", "galaxy-s20-plus", "compute.cpu.isa"});
  // The key says how a build used the CPU: refused on another unit.
  ParamSchema s = fidelity::OnDeviceProbe::schema();
  testing::expect_config_error_naming(
      [&] {
        (void)fidelity::OnDeviceProbe(Params(YAML::Load("{device: iphone-14-pro, engine: mnn, "
                                                        "model: qwen1.5-1.8b, unit: gpu, phase: decode, tokens: 128, "
                                                        "cpu_isa_detected: [dotprod]}"),
                                             s, ConfigSource{}, {}));
      },
      {"cpu_isa_detected", "unit cpu"});
}

// MNN's two CPU kernel classes differ only in how a linear's work reaches the 4 threads (configs/engines/mnn.yaml):
// int8_tiled (3.x) follows the cores' rates; hybrid (2.8.0 and a980dba3, ConvolutionHybrid) gives each thread an equal
// quarter, so an op ends when the slowest thread's core ends: 4 x the slowest of the 4 fastest cores' peaks. On an
// iPhone those 4 threads are the 2 P-cores and 2 E-cores (Apple's CPU Optimization Guide 3.0, section 5.1), and the
// E-cores' 2 SIMD units (Table 4.10) at their clock set the op's end.
TEST(CpuKernelClasses, MnnsHybridClassEndsEachOpWithTheSlowestThreadsQuarter) {
  YAML::Node hybrid_yaml = YAML::LoadFile(std::string(MOBISIM_SOURCE_DIR) + "/configs/engines/mnn.yaml");
  hybrid_yaml["cpu"]["kernels"] = "hybrid";
  const EngineProfile hybrid = load_engine_profile(hybrid_yaml, ConfigSource{});
  const EngineProfile tiled = load_engine_profile(
      YAML::LoadFile(std::string(MOBISIM_SOURCE_DIR) + "/configs/engines/mnn.yaml"), ConfigSource{});
  ASSERT_EQ(hybrid.units.at("cpu").matmul_chunks_per_thread.value_or(0), 1);
  EXPECT_FALSE(tiled.units.at("cpu").matmul_chunks_per_thread.has_value());
  // One share for both classes (speedup 1: the same int8 GEMM family).
  const double e4 = tiled.units.at("cpu").prefill_efficiency.by_dtype.at(DType::kInt4);
  EXPECT_DOUBLE_EQ(hybrid.units.at("cpu").prefill_efficiency.by_dtype.at(DType::kInt4), e4);
  EXPECT_DOUBLE_EQ(hybrid.units.at("cpu").prefill_efficiency.by_dtype.at(DType::kInt8), e4);
  // iPhone 15 Pro (A17 Pro), SMMLA: summed, 2 x 3.78 x 4 x 64 + 2 x 2.11 x 2 x 64 = 1935.36 + 540.16 = 2475.52e9;
  // equal quarters, 4 x (2.11 x 2 x 64 = 270.08) = 1080.32e9.
  EXPECT_NEAR(int_rate(tiled.apply(load_device_profile("iphone-15-pro")), DType::kInt4), e4 * 2475.52e9, 1.0);
  EXPECT_NEAR(int_rate(hybrid.apply(load_device_profile("iphone-15-pro")), DType::kInt4), e4 * 1080.32e9, 1.0);
  // iPhone 14 Pro (A16) on SDOT (MNN 2.8.0's iOS detection): 4 x 2.02 x 2 x 32 = 517.12e9 (summed: 1144.32e9).
  YAML::Node a16_sdot = YAML::Load("{base: iphone-14-pro, compute: {cpu: {isa: [dotprod, bf16]}}}");
  EXPECT_NEAR(int_rate(hybrid.apply(load_device_profile(a16_sdot, ConfigSource{})), DType::kInt8), e4 * 517.12e9, 1.0);
  // Xiaomi 12 (8 Gen 1), SMMLA: the X2 (768) and three A710s (320 each) sum to 1728e9; quarters, 4 x 320 = 1280e9.
  EXPECT_NEAR(int_rate(hybrid.apply(load_device_profile("xiaomi-12")), DType::kInt4), e4 * 1280e9, 1.0);
  // The probe key runs the class as the engine override does, and the iPhone 15 Pro's 128-token prefill slows
  // (it is compute-bound there; per-op costs keep it above 1080.32 / 2475.52 = 0.436 of the summed case).
  fidelity::OnDeviceQuery q;
  q.device = "iphone-15-pro";
  q.engine = "mnn";
  q.model = "qwen2.5-1.5b";
  q.unit = "cpu";
  q.phase = "prefill";
  q.tokens = 128;
  q.dtype = "int4";
  const double summed = fidelity::ondevice_prediction(q);
  const double by_override = fidelity::ondevice_prediction(q, {"engine.cpu.kernels=hybrid"});
  q.cpu_kernels = "hybrid";
  const double quarters = fidelity::ondevice_prediction(q);
  EXPECT_DOUBLE_EQ(quarters, by_override);
  EXPECT_GT(quarters, 0.436 * summed);
  EXPECT_LT(quarters, 0.6 * summed);
}

// A llama.cpp build compiled for dotprod only (ggml of 2024 chose its kernels at compile time; llama.cpp's Android
// instructions then gave -march=armv8.4a+dotprod, docs/cpu_isa_sources.md): TinyLLMLeaderBoard's rows on the Xiaomi
// 14 (8 Gen 3, the OnePlus 12's clusters) run vec_dot on SDOT over every core. Its 8 cores: 1 X4 @ 3.3 GHz x 4 pipes
// + 3 A720 @ 3.15 x 2 + 2 A720 @ 2.96 x 2 + 2 A520 @ 2.27 x 1 = 13.2 + 18.9 + 11.84 + 4.54 = 48.48 GHz-pipes;
// x 64 (SMMLA) = 3102.72e9 op/s, x 32 (SDOT) = 1551.36e9 op/s.
TEST(CpuKernelClasses, ALlamaCppBuildCompiledForDotprodRunsSdotOnAnI8mmPhone) {
  YAML::Node eng = YAML::LoadFile(std::string(MOBISIM_SOURCE_DIR) + "/configs/engines/llama.cpp.yaml");
  eng["cpu"]["kernels"] = "vec_dot";
  const EngineProfile e = load_engine_profile(eng, ConfigSource{});
  const double e4 = e.units.at("cpu").kernel_classes.at("vec_dot").prefill_efficiency.by_dtype.at(DType::kInt4);
  EXPECT_NEAR(int_rate(e.apply(load_device_profile("xiaomi-14")), DType::kInt4), e4 * 3102.72e9, 1e-2);
  YAML::Node sdot_only = YAML::Load("{base: xiaomi-14, compute: {cpu: {isa: [dotprod]}}}");
  EXPECT_NEAR(int_rate(e.apply(load_device_profile(sdot_only, ConfigSource{})), DType::kInt4), e4 * 1551.36e9, 1e-2);
  // The leaderboard's LLaMA-2-7B prefill of 28 tokens: the probe key does what the device override does, and the
  // compute-bound prefill slows to about half.
  fidelity::OnDeviceQuery q;
  q.device = "xiaomi-14";
  q.engine = "llama.cpp";
  q.model = "llama-2-7b";
  q.unit = "cpu";
  q.phase = "prefill";
  q.tokens = 28;
  q.dtype = "int4";
  q.classifier_dtype = "int6";
  q.activation_dtype = "int8";
  q.cpu_kernels = "vec_dot";
  const double chip = fidelity::ondevice_prediction(q);
  const double by_override = fidelity::ondevice_prediction(q, {"device.compute.cpu.isa=[dotprod]"});
  q.cpu_isa_detected = {"dotprod"};
  const double compiled_for_dotprod = fidelity::ondevice_prediction(q);
  EXPECT_DOUBLE_EQ(compiled_for_dotprod, by_override);
  EXPECT_GT(compiled_for_dotprod, 0.45 * chip);
  EXPECT_LT(compiled_for_dotprod, 0.55 * chip);
  // On a phone without i8mm (the Pixel 7 Pro's Tensor G2) the key changes nothing: SDOT was its path already.
  q.device = "pixel-7-pro";
  const double g2_compiled_for_dotprod = fidelity::ondevice_prediction(q);
  q.cpu_isa_detected.clear();
  EXPECT_DOUBLE_EQ(g2_compiled_for_dotprod, fidelity::ondevice_prediction(q));
}

}  // namespace
}  // namespace mobisim::devices
