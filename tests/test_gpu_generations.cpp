// GPU generations (issue 37, GPU side): a runtime's values for one generation of a GPU family
// (engine `gpu.families.F.generations.G`) are laid over the family's on a GPU of that generation only, and
// `lm_head_bandwidth_efficiency` gives the LM head's GEMV its own rate for the dtype its weights are stored
// at (llama.cpp's flat K-quant GEMV for a vocab-scale Q6_K classifier on Adreno A7x, llama.cpp PR #26440).
// Expected times are computed by hand in the comments.
#include <gtest/gtest.h>

#include <string>

#include "devices/compute_unit.h"
#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/fidelity/ondevice_probe.h"
#include "models/cost_model.h"
#include "sim/error.h"
#include "test_util.h"

namespace mobisim::devices::gpu_generations_test {

using models::DType;

DeviceProfile relabelled_pixel7(const std::string& generation) {
  return load_device_profile(
      YAML::Load("{base: pixel7, compute: {gpu: {family: adreno, generation: " + generation + "}}}"), ConfigSource{});
}
EngineProfile generations_engine(const std::string& yaml) {
  return load_engine_profile(YAML::Load(yaml), ConfigSource{std::make_shared<std::string>("generations.yaml"), ""});
}

// Adreno: decode bound by half the DRAM bandwidth; on the a7x only, a Q6_K (int6) LM head at 0.05 of it.
constexpr const char* kA7xHead =
    "{name: generation-test, gpu: {families: {adreno: {prefill_efficiency: 0.1, decode_efficiency: 0.1, "
    "bandwidth_efficiency: 0.5, call_overhead_us: 0, generations: {a7x: {lm_head_bandwidth_efficiency: {int6: 0.05}}}}}}}";

// An LM head GEMV with no arithmetic: 1e8 weight bytes stored as `stored`, 1e6 activation bytes.
models::Op head_op(std::optional<DType> stored) {
  models::Op op{models::OpKind::kLmHead, 0, 1e8, 1e6, 0, 0, 1, 1, std::nullopt};
  op.stored_dtype = stored;
  return op;
}

TEST(GpuGenerations, AGenerationsLmHeadRateAppliesOnItsGenerationToItsStoredDtypeOnly) {
  // Pixel 7 profile relabelled Adreno a7x: DRAM 51.2 GB/s. The int6 head's weights at 0.05 of it, its
  // activations at the family's 0.5: 1e8 / (51.2e9 x 0.05) + 1e6 / (51.2e9 x 0.5) = 0.0390625 + 0.0000390625 s.
  const DeviceProfile a7x = generations_engine(kA7xHead).apply(relabelled_pixel7("a7x"));
  const ComputeUnitSpec& gpu = a7x.unit("gpu", "t");
  EXPECT_NEAR(gpu.op_seconds(head_op(DType::kInt6), DType::kInt4), 1e8 / (51.2e9 * 0.05) + 1e6 / (51.2e9 * 0.5), 1e-12);
  // Stored as the pass's int4 (no stored dtype): every byte at 0.5, 1.01e8 / 25.6e9 = 0.003945 s.
  EXPECT_NEAR(gpu.op_seconds(head_op(std::nullopt), DType::kInt4), 1.01e8 / (51.2e9 * 0.5), 1e-12);
  // A pass whose own weights are int6 and an unset stored dtype: the head is int6 too.
  EXPECT_NEAR(gpu.op_seconds(head_op(std::nullopt), DType::kInt6), 1e8 / (51.2e9 * 0.05) + 1e6 / (51.2e9 * 0.5), 1e-12);
  // Another operator on int6 weights streams at the family's rate: it is not the classifier's kernel.
  models::Op ffn = head_op(DType::kInt6);
  ffn.kind = models::OpKind::kFfnDown;
  EXPECT_NEAR(gpu.op_seconds(ffn, DType::kInt6), 1.01e8 / (51.2e9 * 0.5), 1e-12);
  // The result names the generation's values.
  ASSERT_EQ(a7x.derived_from_soc.size(), 1u);
  EXPECT_NE(a7x.derived_from_soc[0].find("generations.a7x"), std::string::npos) << a7x.derived_from_soc[0];
  // An a8x GPU of the same family runs the family's values only.
  const DeviceProfile a8x = generations_engine(kA7xHead).apply(relabelled_pixel7("a8x"));
  EXPECT_NEAR(a8x.unit("gpu", "t").op_seconds(head_op(DType::kInt6), DType::kInt4), 1.01e8 / (51.2e9 * 0.5), 1e-12);
  EXPECT_EQ(a8x.derived_from_soc[0].find("generations.a7x"), std::string::npos) << a8x.derived_from_soc[0];
}

TEST(GpuGenerations, AnLmHeadRateWithoutItsStoredDtypeIsAConfigError) {
  // One number for every classifier would give the rate of one kernel to heads that do not run it.
  testing::expect_config_error_naming(
      [] {
        (void)generations_engine(
            "{name: generation-test, gpu: {families: {adreno: {generations: {a7x: {lm_head_bandwidth_efficiency: 0.05}}}}}}");
      },
      {"lm_head_bandwidth_efficiency", "per stored dtype", "generations.yaml"});
  testing::expect_config_error_naming(
      [] { (void)generations_engine("{name: generation-test, gpu: {families: {adreno: {generations: [a7x]}}}}"); },
      {"generations", "a7x"});
}

// llama.cpp's profile: a Qwen3-1.7B decode step whose Q4_0 file keeps a Q6_K classifier (classifier_dtype
// int6: 151936 x 2048 x 0.75 = 233373696 bytes instead of int4's 155582464). On the Galaxy S23 (Adreno 740,
// a7x, 67 GB/s) that head streams at the A7x classifier rate 0.0592152, every other byte at the Adreno
// 0.718954; on the POCO (Adreno 840, a8x, 85.3 GB/s) at 0.718954 like the rest. The tied embedding row the
// step gathers grows with it: 2048 x (0.75 - 0.5) = 512 bytes more at 0.718954.
fidelity::OnDeviceQuery qwen3_decode(const std::string& device, const std::string& classifier) {
  fidelity::OnDeviceQuery q;
  q.device = device;
  q.engine = "llama.cpp";
  q.model = "qwen3-1.7b";
  q.unit = "gpu";
  q.phase = "decode";
  q.tokens = 32;
  q.dtype = "int4";
  q.activation_dtype = "fp16";
  q.classifier_dtype = classifier;
  q.metric = "ms";
  return q;
}

TEST(GpuGenerations, LlamaCppsQ6kClassifierCrawlsOnTheA7xOnly) {
  const double int6_bytes = 151936.0 * 2048 * 0.75, int4_bytes = 151936.0 * 2048 * 0.5;
  // S23: 233373696 / (67e9 x 0.0592152) - 155582464 / (67e9 x 0.718954) = 58.822 - 3.230 = 55.592 ms more.
  const double s23_extra_ms =
      (int6_bytes / (67e9 * 0.0592152) - int4_bytes / (67e9 * 0.718954) + 512 / (67e9 * 0.718954)) * 1e3;
  EXPECT_NEAR(fidelity::ondevice_prediction(qwen3_decode("galaxy-s23", "int6")) -
                  fidelity::ondevice_prediction(qwen3_decode("galaxy-s23", "")),
              s23_extra_ms, 1e-6);
  EXPECT_NEAR(s23_extra_ms, 55.592, 1e-3);
  // POCO: only the 77.8 MB more bytes at the family's rate, 77791232 / (85.3e9 x 0.718954) = 1.2685 ms more.
  const double poco_extra_ms = (int6_bytes - int4_bytes + 512) / (85.3e9 * 0.718954) * 1e3;
  EXPECT_NEAR(fidelity::ondevice_prediction(qwen3_decode("poco-myron", "int6")) -
                  fidelity::ondevice_prediction(qwen3_decode("poco-myron", "")),
              poco_extra_ms, 1e-6);
  EXPECT_NEAR(poco_extra_ms, 1.2685, 1e-3);
}

}  // namespace mobisim::devices::gpu_generations_test
