// Devices: golden timings computed by hand (as DRAMsim3 asserts tRCD + CL + BL), profile
// validation, the UFS request-size curve, and energy accounting.
#include <gtest/gtest.h>

#include <cmath>

#include "devices/device.h"
#include "devices/engine.h"
#include "models/cost_model.h"
#include "policies/specdec/specdec_policy.h"
#include "sim/error.h"
#include "sim/event.h"

namespace mobisim::devices {
namespace {

StorageSpec simple_ufs() {
  StorageSpec s;
  s.kind = "ufs4.0";
  s.seq_read_gbps = 2.9;
  s.seq_write_gbps = 1.6;
  s.random_read_iops = 120000;
  s.random_write_iops = 100000;
  s.queue_depth = 32;
  s.access_latency_us = 70;
  s.max_transfer_kb = 512;
  s.page_size_kb = 16;
  return s;
}

TEST(Devices, LargeReadIsBandwidthBound) {
  // 74 MB at 1.2 GB/s: 61.7 ms plus one command's fixed costs.
  StorageSpec s = simple_ufs();
  s.seq_read_gbps = 1.2;
  const double t = s.read_seconds(74e6);
  const double ideal = 74e6 / 1.2e9;
  EXPECT_GT(t, ideal);
  EXPECT_LT(t, ideal + 1.0 / s.random_read_iops + s.access_latency_us * 1e-6 + 512 * 1024 / 1.2e9);
}

TEST(Devices, SmallReadsAreIopsBoundBelowTheKnee) {
  const StorageSpec s = simple_ufs();
  // Knee at bandwidth / IOPS = 2.9e9 / 120000 = 24.2 KB (DynaKV figure 3b: ~24 KB).
  EXPECT_NEAR(s.seq_read_gbps * 1e9 / s.random_read_iops / 1000.0, 24.2, 0.1);
  EXPECT_NEAR(s.sustained_read_bps(4096), 120000.0 * 4096, 1.0);      // IOPS x size
  EXPECT_NEAR(s.sustained_read_bps(8192), 120000.0 * 8192, 1.0);      // linear in size
  EXPECT_NEAR(s.sustained_read_bps(256 * 1024), 2.9e9, 1.0);          // bandwidth-bound
}

sim::Task<void> read_many(Storage& st, int n, double bytes, sim::Simulator& sim, sim::Time& done) {
  std::vector<sim::Event> evs;
  for (int i = 0; i < n; ++i) evs.push_back(sim.start(st.read(bytes)).done_event());
  co_await sim::all_of(sim, evs);
  done = sim.now();
}

TEST(Devices, SimulatedQueueMatchesTheAnalyticCurve) {
  sim::Simulator sim;
  sim::StatGroup stats("dev");
  Storage st(sim, simple_ufs(), "ufs", stats);
  sim::Time done = 0;
  // 2000 concurrent 4 KB reads: IOPS-bound, about 2000 / 120000 s.
  sim.start(read_many(st, 2000, 4096, sim, done));
  sim.run();
  EXPECT_NEAR(sim::to_seconds(done), 2000.0 / 120000.0, 0.0005);
  EXPECT_DOUBLE_EQ(st.bytes_read(), 2000 * 4096.0);

  sim::Simulator sim2;
  sim::StatGroup stats2("dev");
  Storage st2(sim2, simple_ufs(), "ufs", stats2);
  sim::Time done2 = 0;
  sim2.start(read_many(st2, 1, 74e6, sim2, done2));
  sim2.run();
  EXPECT_NEAR(sim::to_seconds(done2), simple_ufs().read_seconds(74e6), 0.0005);
}

TEST(Devices, PartialPageWritesProgramWholePages) {
  const StorageSpec s = simple_ufs();  // 16 KB pages
  EXPECT_DOUBLE_EQ(s.written_bytes(1), 16384);
  EXPECT_DOUBLE_EQ(s.written_bytes(16384), 16384);
  EXPECT_DOUBLE_EQ(s.written_bytes(16385), 32768);
}

TEST(Devices, DecodeStepOfA3BModelIsWeightsOverBandwidth) {
  // A decode step is memory-bound: time = bytes / bandwidth when compute is plentiful.
  ComputeUnitSpec u;
  u.name = "cpu";
  u.peak_tflops[models::DType::kF16] = 1000.0;  // effectively infinite compute
  u.mem_bandwidth_gbps = 25.0;
  const models::CostModel cm(models::load_model_spec("llama-3.2-3b"));
  const models::Work w = cm.decode(0);
  EXPECT_NEAR(u.seconds(w, models::DType::kF16), w.bytes() / 25e9, 1e-6);
  EXPECT_NEAR(w.weight_bytes() / 25e9, 0.257, 0.003);  // 6.4 GB of fp16 weights (+ tied head) at 25 GB/s
}

TEST(Devices, ComputeBoundPrefillUsesPeakTimesEfficiency) {
  ComputeUnitSpec u;
  u.name = "gpu";
  u.peak_tflops[models::DType::kF16] = 10.0;
  u.compute_efficiency = 0.5;
  u.gemv_compute_efficiency = 0.5;  // the LM head of a prefill runs for one token
  u.mem_bandwidth_gbps = 1e6;  // effectively infinite bandwidth
  const models::CostModel cm(models::load_model_spec("llama-3.2-1b"));
  const models::Work w = cm.prefill(2048);
  EXPECT_NEAR(u.seconds(w, models::DType::kF16), w.flops() / 5e12, 1e-6);
  // int4 weights fall back to the int8 peak, then fp16.
  EXPECT_DOUBLE_EQ(u.peak_flops(models::DType::kInt4), 10e12);
  ComputeUnitSpec none;
  none.name = "none";
  none.peak_tflops[models::DType::kInt8] = 1.0;
  EXPECT_THROW(none.peak_flops(models::DType::kF32), ConfigError);
}

TEST(Devices, AttentionEfficiencyAppliesToAttentionOperatorsOnly) {
  // Compute-bound unit: every operator's time is flops / (peak * its efficiency). With an attention
  // efficiency of 0.5 the scores, softmax and weighted values take flops / 5e12, the rest flops / 1e12.
  ComputeUnitSpec u;
  u.name = "cpu";
  u.peak_tflops[models::DType::kF16] = 10.0;
  u.compute_efficiency = u.gemv_compute_efficiency = 0.1;
  u.mem_bandwidth_gbps = 1e9;
  const models::CostModel cm(models::load_model_spec("llama-3.2-1b"));
  const models::Work w = cm.prefill(2048);
  double attention_flops = 0;
  for (const auto& op : w.ops)
    if (models::is_attention(op.kind)) attention_flops += op.flops;
  ASSERT_GT(attention_flops, 0.0);
  const double rest_flops = w.flops() - attention_flops;
  EXPECT_NEAR(u.seconds(w, models::DType::kF16), w.flops() / 1e12, 1e-9);  // unset: one efficiency
  u.attention_compute_efficiency = 0.5;
  EXPECT_NEAR(u.seconds(w, models::DType::kF16), attention_flops / 5e12 + rest_flops / 1e12, 1e-9);
}

TEST(Devices, RedmiK70ProNpuReproducesCoordGenVerificationSpeeds) {
  // CoordGen section 2.3 / Figure 6 (Qwen2.5-1.5B, int8): 5.7 ms/token verifying a 32-token draft on a
  // chunk-32 graph, 51.1 ms for a single-token pass. The profile was fitted to both (calibration points);
  // this pins the profile to them, since a comment once claimed a fit the values did not give. The
  // verification is the one the specdec policies cost (logits for every row; attention on the CPU).
  const DeviceProfile d = load_device_profile("redmi-k70-pro");
  models::ModelSpec m = models::load_model_spec("qwen2.5-1.5b");
  m.weight_dtype = m.activation_dtype = models::DType::kInt8;
  const models::CostModel cm(m);
  const devices::NpuSpec& npu = d.require_npu("test");
  const policies::specdec::SpecDecEnv env{npu, d.unit("cpu", "test"), 0.0, cm, cm};
  // (fitted with the LM head inside the graphs, the model before lm_head_unit: cpu)
  EXPECT_NEAR(
      policies::specdec::npu_verify_split(env, 32, 0, 32, policies::specdec::LmHeadUnit::kNpu).first / 32 * 1e3, 5.7,
      0.01);
  EXPECT_NEAR(npu.decode_seconds(cm.decode(512), m.weight_dtype, m.activation_dtype) * 1e3, 51.1, 0.05);
}

// configs/devices/xiaomi-14.yaml says `base: redmi-k70-pro`: a value of the K70 Pro profile is one of its values.
TEST(Devices, ProfileInheritanceFollowsTheBaseChain) {
  EXPECT_TRUE(profile_inherits_from("devices", "xiaomi-14", "redmi-k70-pro"));
  EXPECT_TRUE(profile_inherits_from("devices", "redmi-k70-pro", "redmi-k70-pro"));
  EXPECT_FALSE(profile_inherits_from("devices", "redmi-k70-pro", "xiaomi-14"));
  EXPECT_FALSE(profile_inherits_from("devices", "oneplus-12", "redmi-k70-pro"));
  EXPECT_FALSE(profile_inherits_from("devices", "no-such-phone", "redmi-k70-pro"));
  EXPECT_TRUE(profile_inherits_from("engines", "mllm", "mllm"));
}

TEST(Devices, PixelSevenReproducesPerCacheTableOne) {
  // The profile was fitted to PerCache Table 1: prefill 62.14 s for the 349-token query, decode
  // 10.95 s for its 136 output tokens (Llama-3.2-3B in mllm's Q4_K file: v_proj and down_proj in Q6_K,
  // whose kernels mllm's engine profile makes 1.875x costlier; fp32 activations).
  const DeviceProfile d = load_engine_profile("mllm").apply(load_device_profile("pixel7"));
  models::ModelSpec m = models::load_model_spec("llama-3.2-3b");
  m.weight_dtype = models::DType::kInt4;
  m.activation_dtype = m.kv_dtype = models::DType::kF32;
  m.projection_dtypes[static_cast<int>(models::Projection::kV)] = models::DType::kInt6;
  m.projection_dtypes[static_cast<int>(models::Projection::kDown)] = models::DType::kInt6;
  const models::CostModel cm(m);
  const auto& cpu = d.unit("cpu", "test");
  EXPECT_NEAR(cpu.seconds(cm.prefill(349), m.weight_dtype), 62.14, 62.14 * 0.005);
  double decode = 0;
  for (int i = 0; i < 136; ++i) decode += cpu.seconds(cm.decode(349 + i), m.weight_dtype);
  EXPECT_NEAR(decode, 10.95, 10.95 * 0.05);
  // Without the Q6_K projections told apart, the same profile runs the model ~20% faster: the fitted
  // rate is the Q4_K kernels' alone.
  models::ModelSpec uniform = m;
  uniform.projection_dtypes = {};
  EXPECT_LT(cpu.seconds(models::CostModel(uniform).prefill(349), m.weight_dtype), 62.14 * 0.85);
}

TEST(Devices, PrefixNoteProfilesReproduceUncachedPrefill) {
  // The prefix-caching note: its 74 MB (180-token) prefix loads in 18-24 ms on the iPhone 14 Pro,
  // "3-4% of the original prefill cost", so that prefix's prefill takes 18 / 0.04 = 450 to
  // 24 / 0.03 = 800 ms. `mobisim calibrate` fits the note's runtime (engine prefix-note) to another
  // point (the median uncached TTFT of the replayed sessions inside "650-900 ms"): the 180-token
  // prefill must land in the note's implied range all the same. The mid-tier Android runs the same
  // engine, fitted on the iPhone alone: its prefix prefill is below its 1.1 s median uncached TTFT
  // (prompts longer than the prefix) and, on a slower GPU, above the iPhone's.
  models::ModelSpec spec = models::load_model_spec("generic-3b");
  spec.weight_dtype = models::DType::kInt4;  // the note's runtimes hold the 3B weights in int4
  const models::CostModel cm(spec);
  const models::Work w = cm.prefill(180);
  const EngineProfile note = load_engine_profile("prefix-note");
  const auto prefill_s = [&](const char* device) {
    return note.apply(load_device_profile(device)).unit("gpu", "test").seconds(w, models::DType::kInt4);
  };
  const double iphone = prefill_s("iphone-14-pro");
  EXPECT_GT(iphone, 0.450);
  EXPECT_LT(iphone, 0.800);
  const double android = prefill_s("midtier-android-ufs21");
  EXPECT_GT(android, iphone);
  EXPECT_LT(android, 1.100);
}

TEST(Devices, PrefixNotePhonesWithoutAnEngineRunTheNotesRuntime) {
  // The two phones' own GPU prefill efficiency is the prefix-note engine's fitted value (what an
  // experiment naming no engine, e.g. kvpr_cake phones, sees); a refit of the engine must carry over.
  const EngineProfile note = load_engine_profile("prefix-note");
  const double fitted = note.units.at("gpu").prefill_efficiency.by_dtype.at(models::DType::kInt4);
  for (const char* name : {"iphone-14-pro", "midtier-android-ufs21"}) {
    SCOPED_TRACE(name);
    const DeviceProfile d = load_device_profile(name);
    EXPECT_DOUBLE_EQ(d.unit("gpu", "test").compute_efficiency, fitted);
    EXPECT_DOUBLE_EQ(note.apply(d).unit("gpu", "test").efficiency(models::DType::kInt4, false), fitted);
  }
  // The A16's GPU has no double-rate fp16: fp16 runs at the fp32 peak.
  const DeviceProfile iphone = load_device_profile("iphone-14-pro");
  const auto& peak = iphone.unit("gpu", "test").peak_tflops;
  EXPECT_DOUBLE_EQ(peak.at(models::DType::kF16), peak.at(models::DType::kF32));
}

TEST(Devices, EveryBuiltinProfileLoads) {
  const auto names = builtin_device_names();
  EXPECT_GE(names.size(), 13u);
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    const DeviceProfile d = load_device_profile(n);
    EXPECT_FALSE(d.compute.empty());
    EXPECT_GT(d.dram.available_bytes(), 0);
  }
}

TEST(Devices, ProfileErrorsNameTheUnitAndWhoNeedsIt) {
  const DeviceProfile d = load_device_profile("galaxy-s22-ultra");
  try {
    d.require_npu("policy coordgen");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("has no npu, needed by policy coordgen"), std::string::npos);
  }
  EXPECT_THROW(d.unit("tpu", "x"), ConfigError);
  EXPECT_THROW(load_device_profile("no-such-phone"), ConfigError);
  YAML::Node bad = YAML::Load(
      "{name: b, base_power_w: 0.5, dram: {capacity_gb: 8, bandwidth_gbps: 50, reserved_gb: 1}, storage: {kind: ufs3.1, "
      "seq_read_gbps: -1, seq_write_gbps: 1, random_read_iops: 1, random_write_iops: 1}}");
  try {
    DeviceProfile::from_yaml(bad, ConfigSource{std::make_shared<std::string>("bad.yaml"), ""});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("storage.seq_read_gbps"), std::string::npos) << e.what();
  }
}

// peak_tflops must be a non-empty mapping dtype -> finite number > 0; each error names the key.
TEST(Devices, PeakTflopsErrorsNameTheKey) {
  for (const char* peaks : {"5", "null", "{fp16: -1}", "{fp16: 0}", "{fp16: .inf}", "{fp16: fast}", "{fp99: 1}"}) {
    SCOPED_TRACE(peaks);
    const YAML::Node bad = YAML::Load(std::string("{base: galaxy-s22-ultra, compute: {cpu: {peak_tflops: ") + peaks + "}}}");
    try {
      DeviceProfile::from_yaml(bad, ConfigSource{std::make_shared<std::string>("bad.yaml"), ""});
      FAIL();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("compute.cpu.peak_tflops"), std::string::npos) << e.what();
    }
  }
}

sim::Task<void> run_work(Device& dev, const models::Work& w) {
  co_await dev.compute("cpu", w, models::DType::kF16, "w");
}

TEST(Devices, EnergyIsActiveWhileBusyIdleOtherwise) {
  DeviceProfile p;
  p.name = "toy";
  ComputeUnitSpec cpu;
  cpu.name = "cpu";
  cpu.peak_tflops[models::DType::kF16] = 1.0;
  cpu.mem_bandwidth_gbps = 1e6;
  cpu.active_power_w = 5.0;
  cpu.idle_power_w = 0.5;
  p.compute.emplace("cpu", cpu);
  p.base_power_w = 1.0;
  p.dram = DramSpec{8, 1e6, 0};  // a bus so wide that it never slows the unit
  p.battery = BatterySpec{1000, 3.6};
  sim::Simulator sim;
  sim::StatGroup stats("toy");
  Device dev(sim, p, stats);
  models::Work w;
  w.ops.push_back(models::Op{models::OpKind::kFfnUp, 2e12, 0, 0, 0, 0, 1, 100, std::nullopt});  // 2 s at 1 TFLOP/s
  sim.start(run_work(dev, w));
  sim.schedule_call(sim::from_seconds(10), [] {});
  sim.run();
  // 10 s: base 10 J + active 2 s x 5 W + idle 8 s x 0.5 W = 24 J.
  EXPECT_NEAR(dev.energy_j(), 24.0, 1e-6);
  // 1000 mAh x 3.6 V = 12960 J.
  EXPECT_NEAR(dev.battery_percent(24.0), 100.0 * 24.0 / 12960.0, 1e-9);
}

sim::Task<void> io(Storage& st) {
  co_await st.read(1e6);
  co_await st.write(5000);  // programs two 4 KB pages
}

TEST(Devices, StorageEnergyIsPerByteReadAndProgrammed) {
  StorageSpec s = simple_ufs();
  s.page_size_kb = 4;
  s.read_energy_nj_per_byte = 0.5;
  s.write_energy_nj_per_byte = 2.0;
  sim::Simulator sim;
  sim::StatGroup stats("dev");
  Storage st(sim, s, "ufs", stats);
  sim.start(io(st));
  sim.run();
  EXPECT_DOUBLE_EQ(st.flash_bytes_written(), 8192.0);
  EXPECT_NEAR(st.io_energy_j(), 1e-9 * (0.5 * 1e6 + 2.0 * 8192), 1e-12);
}

}  // namespace
}  // namespace mobisim::devices
