// Issue 37: no silent fallback from an engine profile to the device profile's (mllm-fitted) values,
// `validate` fails where `run` fails, and storage classes combine with overrides.
// Expected values are computed by hand from the profiles' numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/fidelity/ondevice_probe.h"
#include "models/cost_model.h"
#include "models/model_spec.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "sim/params.h"
#include "sim/simulator.h"
#include "sim/stats.h"
#include "test_util.h"

namespace mobisim::devices {
namespace {

using models::DType;

// A hand-built engine: the CPU's int4 prefill only (efficiency, bandwidth, call overhead), nothing else.
constexpr const char* kHandEngine = R"(
name: hand
cpu:
  prefill_efficiency: {int4: 0.25}
  bandwidth_efficiency: 0.5
  call_overhead_us: 4
)";

EngineProfile hand_engine(const std::string& extra = "") {
  return EngineProfile::from_yaml(YAML::Load(std::string(kHandEngine) + extra),
                                  ConfigSource{std::make_shared<std::string>("hand.yaml"), ""});
}

// One compute-bound batched operator (512 tokens) and one single-token operator.
models::Op batched_op() { return models::Op{models::OpKind::kFfnGate, 2.0 * 512 * 2048 * 8192, 1e6, 0, 0, 0, 16, 512, std::nullopt}; }
models::Op gemv_op() { return models::Op{models::OpKind::kFfnGate, 16.0 * 2 * 2048 * 8192, 16e6, 0, 0, 0, 16, 1, std::nullopt}; }

TEST(NoSilentFallback, EachMissingValueIsAConfigErrorNamingIt) {
  const DeviceProfile run = hand_engine().apply(load_device_profile("oneplus-12"));
  const ComputeUnitSpec& cpu = run.unit("cpu", "t");
  // What the engine sets is used: OnePlus 12 CPU int8 peak 1.228 TOPS (int4 runs on it), 0.25 of it,
  // plus 4 us per operator and layer.
  EXPECT_NEAR(cpu.op_seconds(batched_op(), DType::kInt4), 2.0 * 512 * 2048 * 8192 / (1.228e12 * 0.25) + 16 * 4e-6, 1e-12);
  // int4 decode: decode_efficiency missing (bandwidth and overhead are set).
  testing::expect_config_error_naming([&] { cpu.op_seconds(gemv_op(), DType::kInt4); },
             {"engine 'hand'", "hand.yaml", "cpu decode", "int4", "cpu.decode_efficiency", "oneplus-12"});
  // fp16 prefill: the efficiency is per dtype, so only it is missing.
  testing::expect_config_error_naming([&] { cpu.op_seconds(batched_op(), DType::kF16); }, {"engine 'hand'", "cpu prefill", "fp16", "cpu.prefill_efficiency"});
  // The GPU: the engine sets nothing for it, so every key is missing.
  testing::expect_config_error_naming([&] { run.unit("gpu", "t").op_seconds(batched_op(), DType::kF16); },
             {"engine 'hand'", "gpu prefill", "fp16", "gpu.prefill_efficiency", "gpu.bandwidth_efficiency",
              "gpu.call_overhead_us", "inherit_device"});
  // The NPU: its curve, per phase (integer weights also need the mixed-precision rate).
  const models::CostModel cost(models::load_model_spec("llama-3.2-1b"));
  testing::expect_config_error_naming([&] { run.npu->decode_seconds(cost.decode(64), DType::kInt8, DType::kF16); },
             {"npu decode", "int8", "npu.max_utilization", "npu.exec_overhead_ms", "npu.decode_bandwidth_efficiency",
              "npu.mixed_precision_fraction"});
  testing::expect_config_error_naming([&] { run.npu->chunked_prefill_seconds(cost, 256, 0, 128); },
             {"npu prefill", "npu.half_utilization_chunk", "npu.graph_chunk"});
  // The same gaps are found where an experiment is built, for the model's dtypes (what validate runs).
  testing::expect_config_error_naming([&] { run.require_engine_values("cpu", models::load_model_spec("llama-3.2-1b"), "test unit"); },
             {"engine 'hand'", "cpu", "needed by test unit"});
  const DeviceProfile mllm = load_engine_profile("mllm").apply(load_device_profile("oneplus-12"));
  EXPECT_NO_THROW(mllm.require_engine_values("cpu", models::load_model_spec("llama-3.2-1b"), "t"));
  EXPECT_NO_THROW(mllm.require_engine_values("npu", models::load_model_spec("llama-3.2-1b"), "t"));
}

TEST(NoSilentFallback, ExplicitInheritanceTakesTheDeviceValueAndIsRecorded) {
  const DeviceProfile device = load_device_profile("oneplus-12");
  const DeviceProfile run = hand_engine(R"(
inherit_device:
  cpu.decode.int4: "test: decode at the device's matrix-vector rate"
  gpu: "test: the device's GPU"
)").apply(device);
  const ComputeUnitSpec& cpu = run.unit("cpu", "t");
  // int4 decode now runs at the device's gemv_compute_efficiency 0.0898 (compute-bound here: 16 x 33.6
  // MFLOP at 1.228 TOPS x 0.0898 = 4.87 ms; 16 MB at 76.8 GB/s x 0.5 = 0.42 ms), the engine's 4 us per call.
  EXPECT_NEAR(cpu.op_seconds(gemv_op(), DType::kInt4), 16.0 * 2 * 2048 * 8192 / (1.228e12 * 0.0898) + 16 * 4e-6, 1e-12);
  // The GPU wholly: fp16 peak 5.6 TFLOP/s x 0.2, 40 us per call.
  EXPECT_NEAR(run.unit("gpu", "t").op_seconds(batched_op(), DType::kF16),
              2.0 * 512 * 2048 * 8192 / (5.6e12 * 0.2) + 16 * 40e-6, 1e-12);
  // Only what was named: int8 decode on the CPU is still a gap.
  EXPECT_THROW(cpu.op_seconds(gemv_op(), DType::kInt8), ConfigError);
  // Recorded: one line per unit and phase, the keys taken with their values and the reason.
  const auto& lines = run.inherited_from_device;
  auto has = [&](const std::string& s) { return std::find(lines.begin(), lines.end(), s) != lines.end(); };
  EXPECT_TRUE(has("cpu.decode[int4]: gemv_compute_efficiency=0.0898 of device oneplus-12 (test: decode at the "
                  "device's matrix-vector rate)"))
      << ::testing::PrintToString(lines);
  EXPECT_TRUE(has("gpu.prefill: compute_efficiency=0.2, bandwidth_efficiency=0.6, call_overhead_us=40 of device "
                  "oneplus-12 (test: the device's GPU)"))
      << ::testing::PrintToString(lines);
  EXPECT_EQ(lines.size(), 3u);  // cpu.decode[int4], gpu.prefill, gpu.decode
  // Collected into the run's record (ConfigSource::inherited, written as `inherited_from_device`).
  ConfigSource src;
  src.inherited = std::make_shared<NotModelledKeys>();
  record_inherited(run, src);
  EXPECT_EQ(src.inherited->keys().size(), 3u);
  // A selector must say why, and name a phase and dtype that exist.
  EXPECT_THROW(hand_engine("inherit_device: {cpu: \"\"}\n"), ConfigError);
  EXPECT_THROW(hand_engine("inherit_device: {cpu.warmup: why}\n"), ConfigError);
  EXPECT_THROW(hand_engine("inherit_device: {cpu.decode.int3: why}\n"), ConfigError);
}

TEST(NoSilentFallback, TheIssuesExamplesAreErrorsOrNamedInheritances) {
  const DeviceProfile pixel7 = load_device_profile("pixel7");
  // llama.cpp's Q4_0/Q8_0 CPU kernels run on the SoC's ISA peak (tests/test_cpu_isa.cpp): a profile that
  // gives no clusters (the generic mid-tier phone) is an error naming the key; on the Pixel 7 (Tensor G2:
  // dot product, no i8mm) they take the SDOT path, Q6_K too (its own class values, issue 37); F16 weights take
  // the device's CPU values by name, and say so.
  try {
    load_engine_profile("llama.cpp").apply(load_device_profile("midtier-android-ufs21")).unit("cpu", "t")
        .efficiency(DType::kInt4, false);
    FAIL() << "llama.cpp's int4 CPU kernels on a CPU without clusters must be a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("compute.cpu.clusters"), std::string::npos) << e.what();
  }
  const DeviceProfile lc = load_engine_profile("llama.cpp").apply(pixel7);
  EXPECT_GT(lc.unit("cpu", "t").efficiency(DType::kInt4, false), 0);
  EXPECT_GT(lc.unit("cpu", "t").efficiency(DType::kInt6, false), 0);
  EXPECT_GT(lc.unit("cpu", "t").efficiency(DType::kF16, false), 0);
  auto inherited = [&](const char* dtype) {
    return std::find_if(lc.inherited_from_device.begin(), lc.inherited_from_device.end(), [&](const std::string& l) {
             return l.rfind("cpu.prefill[", 0) == 0 && l.find(dtype) != std::string::npos;
           }) != lc.inherited_from_device.end();
  };
  EXPECT_TRUE(inherited("fp16")) << ::testing::PrintToString(lc.inherited_from_device);
  EXPECT_FALSE(inherited("int6")) << ::testing::PrintToString(lc.inherited_from_device);
  // ExecuTorch has no int6 entry (the quick start's projections): an error. MLC states nothing for the
  // CPU or the NPU: errors.
  const DeviceProfile et = load_engine_profile("executorch").apply(pixel7);
  EXPECT_THROW(et.unit("cpu", "t").efficiency(DType::kInt6, false), ConfigError);
  const DeviceProfile mlc = load_engine_profile("mlc").apply(load_device_profile("oneplus-12"));
  EXPECT_THROW(mlc.unit("cpu", "t").efficiency(DType::kInt4, false), ConfigError);
  EXPECT_THROW(mlc.require_engine_values("npu", models::load_model_spec("llama-3.2-1b"), "t"), ConfigError);
  // mllm inherits everything by name, and the result records it.
  const DeviceProfile mllm = load_engine_profile("mllm").apply(pixel7);
  EXPECT_DOUBLE_EQ(mllm.unit("cpu", "t").efficiency(DType::kInt4, false), 0.0387082);
  EXPECT_FALSE(mllm.inherited_from_device.empty());
}

// A run records what its engine inherits: ExecuTorch on the quick start's int6 projections is refused;
// with its CPU inherited by name from the command line it runs at the device's mllm-fitted values for
// the dtypes it has none of, and says so in its result file.
TEST(NoSilentFallback, ARunRecordsWhatItsEngineInherits) {
  testing::TempDir dir("inherited");
  const std::string config = std::string(MOBISIM_SOURCE_DIR) + "/experiments/quickstart.yaml";
  const auto refused = testing::run_mobisim("run " + config + " -p experiment.engine=executorch --no-plot --quiet --output " +
                                            dir.file("refused.h5"));
  EXPECT_EQ(refused.exit_code, 3) << refused.output;
  EXPECT_NE(refused.output.find("engine 'executorch'"), std::string::npos) << refused.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("refused.h5")));
  const auto r = testing::run_mobisim("run " + config + " -p experiment.engine=executorch" +
                                      " -p 'experiment.engine.inherit_device.cpu=no ExecuTorch int6 point yet'" +
                                      " --no-plot --quiet --output " + dir.file("r.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = h5::Reader(dir.file("r.h5")).attr_strings("/", "inherited_from_device");
  // ExecuTorch sets CPU prefill for bf16, int4, fp32 and decode for int4, fp32 (bf16 decode is its own,
  // more specific inheritance); the rest takes configs/devices/pixel7.yaml's CPU: compute_efficiency
  // 0.0387082, gemv 0.138814 (its bandwidth and call overhead are ExecuTorch's own).
  const std::string prefill = "cpu.prefill[fp16,fp8,int8,int6]: compute_efficiency=0.0387082 of device pixel7 "
                              "(no ExecuTorch int6 point yet)";
  const std::string decode = "cpu.decode[fp16,fp8,int8,int6]: gemv_compute_efficiency=0.138814 of device pixel7 "
                             "(no ExecuTorch int6 point yet)";
  EXPECT_NE(std::find(lines.begin(), lines.end(), prefill), lines.end()) << ::testing::PrintToString(lines);
  EXPECT_NE(std::find(lines.begin(), lines.end(), decode), lines.end()) << ::testing::PrintToString(lines);
}

// `validate` builds what `run` builds: the PerCache Table 1 case of issue 37 (compute_unit npu on a
// phone whose NPU is not a compute unit) fails in both, with the same message and exit code.
TEST(NoSilentFallback, ValidateFailsWhereRunFails) {
  const std::string overrides =
      " -p experiment.pipeline.compute_unit=npu -p experiment.device=snapdragon-8-elite-qrd";
  const std::string config = std::string(MOBISIM_SOURCE_DIR) + "/experiments/percache/table1.yaml";
  testing::TempDir dir("validate-npu");
  const auto v = testing::run_mobisim("validate " + config + overrides);
  const auto r = testing::run_mobisim("run " + config + overrides + " --no-plot --quiet --output " + dir.file("t.h5"));
  EXPECT_EQ(v.exit_code, 3) << v.output;
  EXPECT_EQ(r.exit_code, 3) << r.output;
  for (const auto* out : {&v.output, &r.output})
    EXPECT_NE(out->find("has no compute unit 'npu'"), std::string::npos) << *out;
  // And an engine without a value for the model's dtypes (the quick start's int6 projections under
  // ExecuTorch) fails validate as it would fail the run.
  const auto e = testing::run_mobisim("validate " + std::string(MOBISIM_SOURCE_DIR) +
                                      "/experiments/quickstart.yaml -p experiment.engine=executorch");
  EXPECT_EQ(e.exit_code, 3) << e.output;
  EXPECT_NE(e.output.find("has no cpu prefill value for int6 weights"), std::string::npos) << e.output;
  // Every driver checks the units it runs on: a pipeline app's npu_graphs prefill stage (compose), the
  // coordgen drivers' NPU, DynaKV's CPU at its precision (fp8) under an engine without those values.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"compose/b_npu_prefill.yaml -p experiment.engine=dynakv", "has no npu prefill value for int4 weights"},
      // MNN: int4 on the CPU and its QNN backend, but no fp16 CPU value for the speculative decode's attention.
      {"compose/b_npu_prefill_coordgen.yaml -p experiment.engine=mnn", "has no cpu prefill value for fp16 weights"},
      {"coordgen/fig8_schedules.yaml -p experiment.engine=mlc", "has no npu prefill value for int8 weights"},
      {"coordgen/table3_k60.yaml -p experiment.engine=dynakv", "has no npu prefill value"},
      // QNN states the NPU (and inherits its curve) but nothing for the CPU the coordgen drivers decode on.
      {"coordgen/fig8_schedules.yaml -p experiment.engine=qnn", "has no cpu prefill value for int8 weights"},
      {"dynakv/table6.yaml -p experiment.engine=executorch", "has no cpu prefill value for fp8 weights"},
      {"prefix_cache/ttft.yaml -p experiment.devices.0.engine=mnn", "has no gpu prefill value for int4 weights"}};
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(args);
    const auto c = testing::run_mobisim("validate " + std::string(MOBISIM_SOURCE_DIR) + "/experiments/" + args);
    EXPECT_EQ(c.exit_code, 3) << c.output;
    EXPECT_NE(c.output.find(message), std::string::npos) << c.output;
  }
}

// `-p experiment.device.storage=ufs4.0 -p experiment.device.storage.max_transfer_kb=4`: the class with
// one field replaced (the overrides write {base: ufs4.0, max_transfer_kb: 4}).
TEST(NoSilentFallback, StorageClassAndOverrideCombine) {
  YAML::Node root = YAML::Load("{experiment: {device: pixel7}}");
  apply_override(root, "experiment.device.storage=ufs4.0");
  apply_override(root, "experiment.device.storage.max_transfer_kb=4");
  const ConfigSource src{std::make_shared<std::string>("test"), ""};
  const StorageSpec s = *load_device_profile(root["experiment"]["device"], src).storage;
  const StorageSpec cls = *load_device_profile(YAML::Load("{base: pixel7, storage: ufs4.0}"), src).storage;
  EXPECT_EQ(s.kind, "ufs4.0");
  EXPECT_DOUBLE_EQ(s.seq_read_gbps, 4.2);  // the class's, not the Pixel 7's UFS 3.1
  EXPECT_DOUBLE_EQ(s.max_transfer_kb, 4);
  EXPECT_DOUBLE_EQ(cls.max_transfer_kb, 512);
  // A 64 KB read on an idle device. The class alone: one command, 1/120000 s controller + 70 us flash +
  // 65536 B / 4.2 GB/s. With 4 KB commands: 16 commands; the first pays every stage, the other 15 are
  // paced by the controller's 1/120000 s (above the 4096 B / 4.2 GB/s transfer and the slot turnover
  // (8.33 + 70 + 0.98 us) / 32).
  const double ctrl = 1.0 / 120000, lat = 70e-6;
  const double one = ctrl + lat + 65536 / 4.2e9;
  const double split = ctrl + lat + 4096 / 4.2e9 + 15 * ctrl;
  EXPECT_NEAR(cls.read_seconds(65536), one, 1e-12);
  EXPECT_NEAR(s.read_seconds(65536), split, 1e-12);
  EXPECT_NEAR(s.read_seconds(65536) - cls.read_seconds(65536), 15 * ctrl + 4096 / 4.2e9 - 65536 / 4.2e9, 1e-12);
  // The simulated read (event path) takes the same time.
  sim::Simulator sim;
  sim::StatGroup stats("s");
  Storage st(sim, s, "ufs", stats);
  sim.start([](Storage& x) -> sim::Task<void> { co_await x.read(65536); }(st));
  sim.run();
  EXPECT_NEAR(sim::to_seconds(sim.now()), split, 1e-8);
}

// Storage request size and queue depth as parameters of an on-device probe (unit storage, phase read).
TEST(NoSilentFallback, StorageProbeTakesRequestSizeAndQueueDepth) {
  fidelity::OnDeviceQuery q;
  q.device = "oneplus-12";
  q.unit = "storage";
  q.phase = "read";
  q.metric = "mb_per_s";
  q.request_kb = 4;
  q.queue_depth = 1;
  // OnePlus 12 (UFS 4.0 profile: 120K IOPS, 70 us, 2.9 GB/s): QD1 4 KB, one command at a time:
  // 4096 B / (1/120000 + 70e-6 + 4096 / 2.9e9) s.
  const double qd1 = 4096 / (1.0 / 120000 + 70e-6 + 4096 / 2.9e9) / 1e6;
  EXPECT_NEAR(fidelity::ondevice_prediction(q), qd1, 1e-9);
  // QD32: IOPS-bound, 120000 x 4096 B.
  q.queue_depth = 32;
  EXPECT_NEAR(fidelity::ondevice_prediction(q), 120000.0 * 4096 / 1e6, 1e-9);
  // ms per request at QD32: 32 x 4096 B / (120000 x 4096 B/s) = 0.2667 ms.
  q.metric = "ms";
  EXPECT_NEAR(fidelity::ondevice_prediction(q), 32e3 / 120000.0, 1e-9);
  // The probe's YAML checks what a storage read needs.
  ParamSchema s = fidelity::OnDeviceProbe::schema();
  auto probe = [&](const char* yaml) { return fidelity::OnDeviceProbe(Params(YAML::Load(yaml), s, ConfigSource{}, {})); };
  EXPECT_NO_THROW(probe("{device: oneplus-12, unit: storage, phase: read, request_kb: 4, queue_depth: 1, metric: mb_per_s}"));
  EXPECT_THROW(probe("{device: oneplus-12, unit: storage, phase: read, metric: mb_per_s}"), ConfigError);
  EXPECT_THROW(probe("{device: oneplus-12, unit: cpu, phase: prefill, tokens: 64, metric: mb_per_s}"), ConfigError);
}

}  // namespace
}  // namespace mobisim::devices
