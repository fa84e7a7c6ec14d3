// CPU ISA peaks (issue 37 item 2, CPU side): a runtime's integer-weight kernels as a fraction of the SoC's
// ISA peak, from the device's clusters (cores, clocks, 128-bit pipes) and ISA features (devices/compute_unit.h,
// devices/engine.h). Expected values are computed by hand in the comments.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "devices/compute_unit.h"
#include "devices/device.h"
#include "devices/engine.h"
#include "sim/builtin_configs.h"
#include "sim/error.h"
#include "sim/params.h"

namespace mobisim::devices {
namespace {

using models::DType;

// Snapdragon 8 Gen 3's layout, listed out of order on purpose (the peak takes the fastest cores first).
ComputeUnitSpec gen3_like() {
  ComputeUnitSpec u;
  u.name = "cpu";
  u.clusters = {{"cortex-a520", 2, 2.27, 1, {}}, {"cortex-x4", 1, 3.3, 4, {}}, {"cortex-a720", 3, 3.15, 2, {}}};
  u.isa = {"dotprod", "i8mm"};
  return u;
}

TEST(CpuIsa, PeakOfACortexX4ByHand) {
  const ComputeUnitSpec u = gen3_like();
  // One Cortex-X4 at 3.3 GHz, 4 x 128-bit pipes. SMMLA (i8mm): a 2x8 by 8x2 int8 block = 32 MACs = 64 ops per
  // pipe per cycle: 3.3e9 x 4 x 64 = 844.8e9 op/s. SDOT: 16 MACs = 32 ops: 422.4e9. SMLAL (neon): 16 ops: 211.2e9.
  EXPECT_DOUBLE_EQ(u.isa_peak_ops("i8mm", 1), 844.8e9);
  EXPECT_DOUBLE_EQ(u.isa_peak_ops("dotprod", 1), 422.4e9);
  EXPECT_DOUBLE_EQ(u.isa_peak_ops("neon", 1), 211.2e9);
  // Two threads: the X4 and one A720 (3.15e9 x 2 x 64 = 403.2e9): 1248.0e9.
  EXPECT_DOUBLE_EQ(u.isa_peak_ops("i8mm", 2), 1248.0e9);
  // Every core (threads 0): 844.8 + 3 x 403.2 + 2 x (2.27 x 1 x 64 = 145.28) = 2344.96 GOP/s.
  EXPECT_NEAR(u.isa_peak_ops("i8mm", 0), 2344.96e9, 1e-3);
  // More threads than cores, a path with no peak model, no clusters: ConfigErrors.
  EXPECT_THROW(u.isa_peak_ops("i8mm", 7), ConfigError);
  EXPECT_THROW(u.isa_peak_ops("sme2", 1), ConfigError);
  ComputeUnitSpec bare;
  EXPECT_THROW(bare.isa_peak_ops("dotprod", 1), ConfigError);
}

// A core whose scheduling model issues fewer SMMLA per cycle than it has pipes (Qualcomm Oryon, LLVM's
// AArch64SchedOryon.td: SMMLA 2 per cycle, SDOT 4 per cycle on its 4 vector pipes).
TEST(CpuIsa, IssuePerCycleOverridesThePipesForItsPathOnly) {
  ComputeUnitSpec u;
  u.name = "cpu";
  u.clusters = {{"oryon", 2, 4.0, 4, {{"i8mm", 2}}}, {"cortex-a720", 1, 3.0, 2, {}}};
  // SMMLA: 4.0e9 x 2 x 64 = 512e9 per Oryon core (not 4 x 64 = 1024e9); the A720 keeps its 2 pipes:
  // 3.0e9 x 2 x 64 = 384e9. Two threads: 1024e9; three: 1408e9 (the A720 is slower than an Oryon, so last).
  EXPECT_DOUBLE_EQ(u.isa_peak_ops("i8mm", 2), 1024e9);
  EXPECT_DOUBLE_EQ(u.isa_peak_ops("i8mm", 3), 1408e9);
  // SDOT keeps one per pipe: 4.0e9 x 4 x 32 = 512e9 per Oryon core, the same as its SMMLA peak.
  EXPECT_DOUBLE_EQ(u.isa_peak_ops("dotprod", 1), 512e9);
  EXPECT_DOUBLE_EQ(u.clusters[0].instructions_per_cycle("i8mm"), 2);
  EXPECT_DOUBLE_EQ(u.clusters[0].instructions_per_cycle("dotprod"), 4);
}

DeviceProfile device(const std::string& yaml) { return load_device_profile(YAML::Load(yaml), ConfigSource{}); }
EngineProfile engine(const std::string& yaml) { return load_engine_profile(YAML::Load(yaml), ConfigSource{}); }

const char* kEngine =
    "{name: isa-test, description: t, cpu: {isa_kernels: [i8mm, dotprod], threads: '1', "
    "prefill_efficiency: {int4: 0.5, int8: 0.25}, decode_efficiency: {int4: 0.5, int8: 0.25}, "
    "bandwidth_efficiency: 0.5, call_overhead_us: 0}, inherit_device: {all: test}}";

TEST(CpuIsa, EngineEfficiencyIsAShareOfTheIsaPeakOfTheBestPathTheCpuHas) {
  // A Pixel 7 profile given one X4-like cluster: with i8mm the int4 GEMM reaches 0.5 x 844.8e9 op/s.
  const std::string clusters = "clusters: [{core: cortex-x4, count: 1, ghz: 3.3, vector_pipes: 4}]";
  const DeviceProfile with_i8mm =
      engine(kEngine).apply(device("{base: pixel7, compute: {cpu: {" + clusters + ", isa: [dotprod, i8mm]}}}"));
  const ComputeUnitSpec& c = with_i8mm.compute.at("cpu");
  EXPECT_NEAR(c.efficiency(DType::kInt4, false) * c.peak_flops(DType::kInt4), 0.5 * 844.8e9, 1e-3);
  EXPECT_NEAR(c.efficiency(DType::kInt8, true) * c.peak_flops(DType::kInt8), 0.25 * 844.8e9, 1e-3);
  // The same core without i8mm runs the runtime's SDOT kernels: half the peak.
  const DeviceProfile dotprod_only =
      engine(kEngine).apply(device("{base: pixel7, compute: {cpu: {" + clusters + ", isa: [dotprod]}}}"));
  const ComputeUnitSpec& d = dotprod_only.compute.at("cpu");
  EXPECT_NEAR(d.efficiency(DType::kInt4, false) * d.peak_flops(DType::kInt4), 0.5 * 422.4e9, 1e-3);
  // mllm reads neither: its fitted efficiency stands.
  const DeviceProfile mllm = load_engine_profile("mllm").apply(
      device("{base: pixel7, compute: {cpu: {" + clusters + ", isa: [dotprod, i8mm]}}}"));
  const DeviceProfile pixel7 = load_engine_profile("mllm").apply(load_device_profile("pixel7"));
  EXPECT_EQ(mllm.compute.at("cpu").efficiency(DType::kInt4, false), pixel7.compute.at("cpu").efficiency(DType::kInt4, false));
}

TEST(CpuIsa, TheResultRecordsWhichPathThreadsAndPeakTheKernelsUsed) {
  const std::string clusters = "clusters: [{core: cortex-x4, count: 1, ghz: 3.3, vector_pipes: 4}]";
  const DeviceProfile dotprod_only =
      engine(kEngine).apply(device("{base: pixel7, compute: {cpu: {" + clusters + ", isa: [dotprod]}}}"));
  // One line for the cpu: the SDOT path (no i8mm on this core), 1 thread, 3.3e9 x 4 x 32 = 422.4e9 op/s.
  ASSERT_EQ(dotprod_only.derived_from_soc.size(), 1u);
  const std::string& line = dotprod_only.derived_from_soc.front();
  EXPECT_EQ(line.rfind("cpu integer kernels: dotprod path, 1 threads, int8 peak 4.22e+11 op/s (engine 'isa-test'", 0), 0u)
      << line;
  EXPECT_NE(line.find("isa_kernels [i8mm, dotprod]"), std::string::npos) << line;
  EXPECT_NE(line.find("cpu.isa [dotprod]"), std::string::npos) << line;
  // Collected into the run's record (ConfigSource::derived_from_soc, written as `derived_from_soc`).
  ConfigSource src;
  src.derived_from_soc = std::make_shared<NotModelledKeys>();
  record_inherited(dotprod_only, src.child("experiment").element(0).child("device"));  // as a run's key reads it
  EXPECT_EQ(src.derived_from_soc->keys(), dotprod_only.derived_from_soc);
  // A runtime without ISA-path kernels derives nothing.
  EXPECT_TRUE(load_engine_profile("mllm").apply(load_device_profile("pixel7")).derived_from_soc.empty());
}

TEST(CpuIsa, ADeviceMissingAnIsaKeyIsAConfigErrorNamingIt) {
  // No `isa`: the first use of an integer-weight efficiency names the key, the device and the engine.
  const DeviceProfile no_isa =
      engine(kEngine).apply(device("{base: midtier-android-ufs21, compute: {cpu: {clusters: [{core: x, count: 1, ghz: 3, vector_pipes: 4}]}}}"));
  try {
    no_isa.compute.at("cpu").efficiency(DType::kInt4, false);
    FAIL() << "an ISA-path runtime on a CPU without `isa` must be a ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("compute.cpu.isa"), std::string::npos) << what;
    EXPECT_NE(what.find("midtier-android-ufs21"), std::string::npos) << what;
    EXPECT_NE(what.find("isa-test"), std::string::npos) << what;
  }
  // No clusters (the generic mid-tier profile names no SoC): names compute.cpu.clusters.
  const DeviceProfile no_clusters = engine(kEngine).apply(load_device_profile("midtier-android-ufs21"));
  try {
    no_clusters.compute.at("cpu").efficiency(DType::kInt8, true);
    FAIL() << "an ISA-path runtime on a CPU without clusters must be a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("compute.cpu.clusters"), std::string::npos) << e.what();
  }
  // An ISA the runtime has no kernels for (only neon listed by the device: not enough for [i8mm, dotprod]).
  const DeviceProfile wrong = engine(kEngine).apply(
      device("{base: pixel7, compute: {cpu: {clusters: [{core: x, count: 1, ghz: 3, vector_pipes: 4}], isa: [sve]}}}"));
  EXPECT_THROW(wrong.compute.at("cpu").efficiency(DType::kInt4, false), ConfigError);
  // Float weights are not ISA-path work: untouched (inherited here).
  EXPECT_NO_THROW(wrong.compute.at("cpu").efficiency(DType::kF16, false));
  // Bad cluster entries and engine keys are refused where they are read.
  EXPECT_THROW(device("{base: pixel7, compute: {cpu: {clusters: [{core: x, count: 1, ghz: 3}]}}}"), ConfigError);
  // issue_per_cycle: more than the pipes, a path with no peak model, not a mapping.
  const std::string x = "{base: pixel7, compute: {cpu: {clusters: [{core: x, count: 1, ghz: 3, vector_pipes: 2, ";
  EXPECT_THROW(device(x + "issue_per_cycle: {i8mm: 3}}]}}}"), ConfigError);
  EXPECT_THROW(device(x + "issue_per_cycle: {sme2: 1}}]}}}"), ConfigError);
  EXPECT_THROW(device(x + "issue_per_cycle: 2}]}}}"), ConfigError);
  const DeviceProfile half = engine(kEngine).apply(device(x + "issue_per_cycle: {i8mm: 1}}], isa: [dotprod, i8mm]}}}"));
  // 3e9 x 1 x 64 = 192e9 op/s on SMMLA (not 3e9 x 2 x 64 = 384e9): the int4 share 0.5 of it.
  const ComputeUnitSpec& h = half.compute.at("cpu");
  EXPECT_NEAR(h.efficiency(DType::kInt4, false) * h.peak_flops(DType::kInt4), 0.5 * 192e9, 1e-3);
  EXPECT_THROW(engine("{name: e, description: t, cpu: {isa_kernels: [sme2], threads: all}}"), ConfigError);
  EXPECT_THROW(engine("{name: e, description: t, cpu: {isa_kernels: [i8mm]}}"), ConfigError);
  EXPECT_THROW(engine("{name: e, description: t, cpu: {isa_kernels: [i8mm], threads: '0'}}"), ConfigError);
  EXPECT_THROW(engine("{name: e, description: t, gpu: {isa_kernels: [i8mm], threads: all}}"), ConfigError);
}

// The built-in llama.cpp profile running kernel class `cls` (cpu.kernels), as a probe's cpu_kernels does.
EngineProfile llama_cpp_running(const std::string& cls) {
  std::string text, origin;
  if (!find_config("engines", "llama.cpp", text, origin)) throw ConfigError("llama.cpp engine profile not found");
  YAML::Node root = load_yaml_string(text, origin);
  root["cpu"]["kernels"] = cls;
  return load_engine_profile(root, ConfigSource{});
}

TEST(CpuIsa, BuiltInRuntimesOnTheirPhonesByHand) {
  // llama.cpp's vec_dot class (its matmuls spread in chunks of 16 rows x 16 tokens: no matmul_chunks_per_thread,
  // the cores' peaks add up), every core, on the Galaxy S20+ (Snapdragon 865, dotprod only): 2.84 x 2 x 32
  // + 3 x 2.42 x 2 x 32 + 4 x 1.8 x 1 x 32 = 181.76 + 464.64 + 230.4 = 876.8 GOP/s on SDOT.
  const EngineProfile llama = llama_cpp_running("vec_dot");
  const double e_llama = llama.units.at("cpu").prefill_efficiency.by_dtype.at(DType::kInt4);
  const ComputeUnitSpec s20 = llama.apply(load_device_profile("galaxy-s20-plus")).compute.at("cpu");
  EXPECT_NEAR(s20.efficiency(DType::kInt4, false) * s20.peak_flops(DType::kInt4), e_llama * 876.8e9, 1e-2);
  // MNN (4 threads) on the Xiaomi 12 (8 Gen 1, i8mm): the X2 (3.0 x 4 x 64 = 768) and three A710
  // (2.5 x 2 x 64 = 320 each): 1728 GOP/s.
  const EngineProfile mnn = load_engine_profile("mnn");
  const double e_mnn = mnn.units.at("cpu").prefill_efficiency.by_dtype.at(DType::kInt4);
  const ComputeUnitSpec x12 = mnn.apply(load_device_profile("xiaomi-12")).compute.at("cpu");
  EXPECT_NEAR(x12.efficiency(DType::kInt4, false) * x12.peak_flops(DType::kInt4), e_mnn * 1728e9, 1e-2);
}

// The phones of the five documents and the on-device sets that name a SoC all carry its clusters, so
// llama.cpp and MNN run on each (the generic mid-tier profile names a class, not a SoC: it has none).
TEST(CpuIsa, EveryPhoneNamingASocRunsTheIsaPathRuntimes) {
  const EngineProfile llama = llama_cpp_running("vec_dot");  // even split: the peaks below add up
  const double e = llama.units.at("cpu").prefill_efficiency.by_dtype.at(DType::kInt4);
  const auto int4_rate = [&](const char* phone) {
    const ComputeUnitSpec c = llama.apply(load_device_profile(phone)).compute.at("cpu");
    return c.efficiency(DType::kInt4, false) * c.peak_flops(DType::kInt4);
  };
  // Every core on SMMLA (64 ops per pipe per cycle):
  // 8 Gen 1 (Galaxy S22 Ultra, S22; Xiaomi 12 inherits it): 3.0 x 4 + 3 x 2.5 x 2 + 4 x 1.8 x 1 = 34.2 pipe-GHz.
  EXPECT_NEAR(int4_rate("galaxy-s22-ultra"), e * 34.2 * 64e9, 1e-2);
  EXPECT_NEAR(int4_rate("galaxy-s22"), e * 34.2 * 64e9, 1e-2);
  EXPECT_NEAR(int4_rate("xiaomi-12"), e * 34.2 * 64e9, 1e-2);
  // 8+ Gen 1 (OnePlus Ace2): 3.2 x 4 + 3 x 2.75 x 2 + 4 x 2.0 x 1 = 37.3.
  EXPECT_NEAR(int4_rate("oneplus-ace2"), e * 37.3 * 64e9, 1e-2);
  // 8 Elite (OnePlus 13 and the phones built on it, Ace5 Pro, Ace 6): Oryon issues 2 SMMLA per cycle on its
  // 4 pipes (issue_per_cycle i8mm 2): 2 x 4.32 x 2 + 6 x 3.53 x 2 = 59.64 instruction-GHz.
  for (const char* phone : {"oneplus-13", "honor-magic7", "snapdragon-8-elite-qrd", "oneplus-ace5-pro", "oneplus-ace6"}) {
    EXPECT_NEAR(int4_rate(phone), e * 59.64 * 64e9, 1e-2) << phone;
  }
  // 8 Elite Gen 5 (POCO Myron and the phones built on its QRD): 2 x 4.6 x 2 + 6 x 3.62 x 2 = 61.84.
  for (const char* phone : {"snapdragon-8-elite-gen5-qrd", "poco-myron", "xiaomi-17", "galaxy-s26-ultra"}) {
    EXPECT_NEAR(int4_rate(phone), e * 61.84 * 64e9, 1e-2) << phone;
  }
  // 8 Gen 3 for Galaxy (Galaxy S24, S24 Ultra): 3.39 x 4 + 3 x 3.1 x 2 + 2 x 2.9 x 2 + 2 x 2.2 x 1 = 48.16.
  EXPECT_NEAR(int4_rate("galaxy-s24"), e * 48.16 * 64e9, 1e-2);
  EXPECT_NEAR(int4_rate("galaxy-s24-ultra"), e * 48.16 * 64e9, 1e-2);
}

// Chunks claimed one at a time (llama.cpp's repack matmuls: 4 per thread): a slow core that claims a late chunk
// holds the matmul back (devices/compute_unit.h chunked_throughput).
TEST(CpuIsa, ChunkedThroughputByHand) {
  // Cores of rates 2 and 1 (chunks per second), 4 chunks: both start at t = 0; the fast one ends its chunk at
  // 0.5 s and claims chunk 3 (ends 1.0 s); at 1.0 s both end, the fast one (the lower thread on a tie) claims
  // chunk 4 and ends it at 1.5 s: 4 chunks / 1.5 s = 2.6667, below the even split's 2 + 1 = 3.
  EXPECT_NEAR(chunked_throughput({2.0, 1.0}, 4), 4.0 / 1.5, 1e-12);
  // One chunk per thread (a static split): the slowest core sets the end: 2 / (1 / 1) = 2 = 2 x the slowest.
  EXPECT_NEAR(chunked_throughput({2.0, 1.0}, 2), 2.0, 1e-12);
  // Equal cores: every chunk count that is a multiple of the threads reaches the sum.
  EXPECT_NEAR(chunked_throughput({1.0, 1.0, 1.0}, 12), 3.0, 1e-12);
  // Many chunks tend to the sum of the rates (3): 3000 chunks of 1 unit are within one slow chunk of it.
  EXPECT_NEAR(chunked_throughput({2.0, 1.0}, 3000), 3.0, 3.0 * 3.0 / 3000);
  EXPECT_THROW(chunked_throughput({2.0, 1.0}, 1), ConfigError);   // fewer chunks than threads
  EXPECT_THROW(chunked_throughput({}, 4), ConfigError);
  EXPECT_THROW(chunked_throughput({1.0, 0.0}, 4), ConfigError);
}

TEST(CpuIsa, ChunkedPeakOfPocketPalsSixThreadsByHand) {
  // Galaxy S23 (8 Gen 2), PocketPal's 6 threads, i8mm: X3 3.36 x 4 x 64 = 860.16, four A715/A710 2.8 x 2 x 64 =
  // 358.4 each, one A510 2.0 x 1 x 64 = 128 GOP/s (even split: 2421.76). 24 chunks (4 per thread) of W/24: the
  // A510 ends its first at t1 = 1/128 (in units of W/24 per GOP/s); by then the X3 has ended 6 (6/860.16 <
  // t1 < 7/860.16) and claimed 6 more, each mid core 2 (2/358.4 < t1 < 3/358.4) and claimed 8 more in all:
  // 6 + 6 + 8 = 20 claimed, so the A510 claims a 21st and ends at 2 t1, after every other core (the 3 left
  // end by t1 + 1/358.4). Throughput 24 / (2 / 128) = 12 x 128 = 1536 GOP/s.
  const ComputeUnitSpec s23 = load_device_profile("galaxy-s23").compute.at("cpu");
  EXPECT_NEAR(s23.isa_peak_ops("i8mm", 6), 2421.76e9, 1e-2);
  EXPECT_NEAR(s23.isa_chunked_peak_ops("i8mm", 6, 4), 1536e9, 1e-2);
  // Pixel 9 (Tensor G4), 6 threads: X4 3.105 x 4 x 64 = 794.88, three A720 2.6 x 2 x 64 = 332.8, two A520
  // 1.95 x 64 = 124.8 (even split 2042.88). The A520s end their first chunks at t1 = 1/124.8, when 6 + 3 x 2 +
  // 6 = 18 chunks are claimed: both claim one more and end at 2 t1: 24 / (2 / 124.8) = 1497.6 GOP/s.
  const ComputeUnitSpec p9 = load_device_profile("pixel-9").compute.at("cpu");
  EXPECT_NEAR(p9.isa_peak_ops("i8mm", 6), 2042.88e9, 1e-2);
  EXPECT_NEAR(p9.isa_chunked_peak_ops("i8mm", 6, 4), 1497.6e9, 1e-2);
  // No chunking: the even split.
  EXPECT_DOUBLE_EQ(p9.isa_chunked_peak_ops("i8mm", 6, 0), p9.isa_peak_ops("i8mm", 6));
}

// llama.cpp's repack class is vec_dot times PR #637's measured Pixel 9 ratios, divided out of the chunking loss of
// that run (6 threads, 4 chunks each: 2042.88 / 1497.6 = 1.364103), so that the model gives back the measured
// ratio on the Pixel 9 (configs/engines/llama.cpp.yaml).
TEST(CpuIsa, LlamaCppRepackSpeedupIsPr637RatioAtAnEvenSplit) {
  const EngineProfile repack = llama_cpp_running("repack");
  const EngineProfile vec_dot = llama_cpp_running("vec_dot");
  ASSERT_EQ(repack.units.at("cpu").matmul_chunks_per_thread.value_or(0), 4);
  EXPECT_FALSE(vec_dot.units.at("cpu").matmul_chunks_per_thread.has_value());
  const ComputeUnitSpec p9 = load_device_profile("pixel-9").compute.at("cpu");
  const double chunking_loss = p9.isa_peak_ops("i8mm", 6) / p9.isa_chunked_peak_ops("i8mm", 6, 4);
  EXPECT_NEAR(chunking_loss, 2042.88 / 1497.6, 1e-9);
  const std::map<DType, double> measured = {{DType::kInt4, 88.49 / 51.85}, {DType::kInt8, 107.71 / 56.56},
                                            {DType::kInt6, 54.67 / 36.62}};
  for (const auto& [t, ratio] : measured) {
    const double r = repack.units.at("cpu").prefill_efficiency.by_dtype.at(t);
    const double v = vec_dot.units.at("cpu").prefill_efficiency.by_dtype.at(t);
    EXPECT_NEAR(r / v, ratio * chunking_loss, 2e-6) << models::to_string(t);
  }
}

TEST(CpuIsa, MatmulChunksNeedIsaKernels) {
  EXPECT_NO_THROW(engine("{name: e, description: t, cpu: {prefill_efficiency: 0.1}}"));
  EXPECT_NO_THROW(engine("{name: e, description: t, cpu: {isa_kernels: [i8mm], threads: all, matmul_chunks_per_thread: 4, "
                         "prefill_efficiency: 0.1}}"));
  EXPECT_THROW(engine("{name: e, description: t, cpu: {matmul_chunks_per_thread: 4, prefill_efficiency: 0.1}}"),
               ConfigError);
  EXPECT_THROW(engine("{name: e, description: t, gpu: {matmul_chunks_per_thread: 4, prefill_efficiency: 0.1}}"),
               ConfigError);
  EXPECT_THROW(engine("{name: e, description: t, cpu: {isa_kernels: [i8mm], threads: all, matmul_chunks_per_thread: 0, "
                      "prefill_efficiency: 0.1}}"),
               ConfigError);
}

}  // namespace
}  // namespace mobisim::devices
