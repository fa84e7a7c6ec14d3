// CoordGen's Figure 12 memory (docs/coordgen.md, "Memory (Figure 12)"): each policy's peak memory
// counted by hand, term by term, from a small model's shapes and the dtypes mllm keeps them at
// (int8 linear layers in the QNN graphs, fp32 embedding table and fp32 LM head on the CPU, each its
// own tensor; the CPU decoder's own copy; EAGLE-2's drafter with its own embedding table), and the
// DRAM ledger of the coordgen driver's pipeline peaking at exactly the policy's peak_memory_bytes.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "devices/device.h"
#include "experiments/simulation.h"
#include "models/cost_model.h"
#include "policies/pipeline/pipeline.h"
#include "policies/apps/app.h"
#include "policies/pipeline/policy_phases.h"
#include "policies/pipeline/speculative_decode.h"
#include "policies/specdec/sd_policies.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "test_pipeline_util.h"
#include "test_util.h"

namespace mobisim {
namespace {

namespace pl = policies::pipeline;
namespace sd = policies::specdec;

// 4 layers of width 64 (4 heads of 16, no GQA), FFN 128, vocabulary 100, tied, int8 weights, fp16 K/V.
models::ModelSpec small_int8_model() {
  models::ModelSpec m = mobisim::testing::tiny_transformer_spec();
  m.name = "small";
  m.tied_embeddings = true;
  m.weight_dtype = models::DType::kInt8;
  m.kv_dtype = models::DType::kF16;
  return m;
}

// The bytes of the small model, by hand.
// One block: Wq, Wk, Wv, Wo 64x64 each (4 x 4096), gate/up/down 64x128 each (3 x 8192), two norms (128).
constexpr double kBlockParams = 4 * 4096 + 3 * 8192 + 128;  // 41,088
constexpr double kBlocksInt8 = 4 * kBlockParams;            // 164,352 bytes: four blocks at int8
constexpr double kTable = 100 * 64;                         // 6,400 parameters per vocabulary table
constexpr double kFinalNormInt8 = 64;                       // the final norm as the spec stores it
// The NPU graphs of 2 blocks (2 layers each): during a switch a block is held twice.
constexpr double kOneGraphBlock = 2 * kBlockParams;  // 82,176 bytes
// mllm's NPU model: the graphs' int8 blocks + the final norm, fp32 embedding table + fp32 LM head on the CPU.
constexpr double kNpuModel = kBlocksInt8 + kFinalNormInt8 + kTable * 4 + kTable * 4;  // 215,616
// The CPU decoder's own copy: int8 blocks + final norm, fp32 embedding table, int8 LM head.
constexpr double kCpuCopy = kBlocksInt8 + kFinalNormInt8 + kTable * 4 + kTable * 1;  // 196,416
// EAGLE-2's drafter: one int8 block + the int8 fc [128 -> 64] with its 64 biases, its own fp32 table.
constexpr double kEagleDrafter = kBlockParams + (2 * 64 * 64 + 64) + kTable * 4;  // 74,944
// K and V of one token: 2 x 4 layers x 64 x 2 bytes.
constexpr double kKvPerToken = 2 * 4 * 64 * 2;  // 1,024

sd::SpecDecEnv small_env() {
  devices::NpuSpec n;
  n.peak_tops_int8 = n.peak_tflops_fp16 = 1000;
  n.max_utilization = 1;
  n.half_utilization_chunk = 1;
  n.exec_overhead_ms = 1;
  n.mem_bandwidth_gbps = 1000;
  n.graph_load_ms_per_layer = 5;
  n.active_power_w = 2;
  devices::ComputeUnitSpec c;
  c.peak_tflops[models::DType::kF32] = c.peak_tflops[models::DType::kF16] = 1000;
  c.peak_tflops[models::DType::kInt8] = 1000;
  c.mem_bandwidth_gbps = 1000;
  c.active_power_w = 1;
  c.single_thread_power_w = 1;  // energy is not what these tests count
  const models::CostModel cost(small_int8_model());
  return sd::SpecDecEnv{n, c, 0.5, cost, cost};
}

std::unique_ptr<sd::SpecDecPolicy> make(const std::string& yaml) {
  return Registry<sd::SpecDecPolicy>::instance().create(load_yaml_string(yaml, "test"), ConfigSource{});
}

sd::DecodeTrace plain_trace(int tokens) {
  sd::DecodeTrace t;
  t.steps.assign(tokens, sd::DecodeStep{0, 0});
  return t;
}

constexpr const char* kShape = "prefill_chunk: 256, decode_chunk: 32, blocks: 2";

TEST(CoordGenMemory, HandCountedSmallModelSpecCountsMatchTheTerms) {
  // The spec's own count: int8 blocks, one tied int8 table, the final norm.
  EXPECT_DOUBLE_EQ(small_int8_model().weight_bytes(), kBlocksInt8 + kTable + kFinalNormInt8);
  EXPECT_DOUBLE_EQ(static_cast<double>(small_int8_model().params_per_layer()), kBlockParams);
  EXPECT_DOUBLE_EQ(small_int8_model().kv_bytes_per_token(), kKvPerToken);
}

TEST(CoordGenMemory, NpuVanillaHoldsTheGraphsAndTwoFloatTables) {
  const sd::SpecDecEnv env = small_env();
  // Synchronous switch: every block on one graph plus the block being loaded on the other.
  const sd::RequestBreakdown b = make(std::string("{impl: npu_vanilla, ") + kShape + "}")->run(env, 256, plain_trace(10));
  EXPECT_DOUBLE_EQ(b.peak_memory_bytes, kNpuModel + kOneGraphBlock + kKvPerToken * (256 + 10));
  EXPECT_DOUBLE_EQ(b.peak_memory_bytes, 570176.0);
}

TEST(CoordGenMemory, CpuVanillaHoldsTheNpuModelAndTheCpuCopy) {
  const sd::SpecDecEnv env = small_env();
  // No switch (the NPU only prefills): the graphs once, then the CPU decoder's own model.
  const sd::RequestBreakdown b = make(std::string("{impl: cpu_vanilla, ") + kShape + "}")->run(env, 256, plain_trace(10));
  EXPECT_DOUBLE_EQ(b.peak_memory_bytes, kNpuModel + kCpuCopy + kKvPerToken * (256 + 10));
  EXPECT_DOUBLE_EQ(b.peak_memory_bytes, 684416.0);
}

TEST(CoordGenMemory, NpuEagleAddsItsDrafterOnly) {
  const sd::SpecDecEnv env = small_env();
  const sd::RequestBreakdown b = make(std::string("{impl: npu_eagle, ") + kShape + "}")->run(env, 256, plain_trace(11));
  ASSERT_EQ(b.output_tokens, 11);
  EXPECT_DOUBLE_EQ(b.peak_memory_bytes, kNpuModel + kOneGraphBlock + kEagleDrafter + kKvPerToken * (256 + 11));
  EXPECT_DOUBLE_EQ(sd::eagle_drafter_bytes(env.cost.spec(), sd::PolicyKnobs{}), kEagleDrafter);
}

TEST(CoordGenMemory, CoordGenAddsTheCalibratedTree) {
  const sd::SpecDecEnv env = small_env();
  // Calibrated tree: top 3 to depth 4 = 81 nodes per context position, 256 positions (under the
  // 200,000-node budget), 16 bytes a node.
  const sd::RequestBreakdown b = make(std::string("{impl: coordgen, ") + kShape + "}")->run(env, 256, plain_trace(10));
  EXPECT_DOUBLE_EQ(b.peak_memory_bytes, kNpuModel + kOneGraphBlock + 81.0 * 256 * 16 + kKvPerToken * (256 + 10));
}

// The runtime's table dtypes are parameters: at int8 for both (as the spec counts a table) an untied
// view of the same model holds exactly one more int8 table than the spec.
TEST(CoordGenMemory, TableDtypesAreParameters) {
  const sd::SpecDecEnv env = small_env();
  const sd::RequestBreakdown b =
      make(std::string("{impl: npu_vanilla, embedding_dtype: int8, npu_lm_head_dtype: int8, ") + kShape + "}")
          ->run(env, 256, plain_trace(10));
  EXPECT_DOUBLE_EQ(b.peak_memory_bytes,
                   small_int8_model().weight_bytes() + kTable + kOneGraphBlock + kKvPerToken * (256 + 10));
  EXPECT_THROW(make(std::string("{impl: npu_vanilla, embedding_dtype: fp33, ") + kShape + "}"), Error);
}

// The coordgen driver's pipeline (PolicyPrefill, PolicyDecode, the K/V in DRAM) holds at its peak
// exactly what the policy says it holds.
sim::Task<void> serve_one(devices::Device& device, pl::Pipeline& pipeline, const pl::Request& r) {
  const std::string owner = "user", kv_owner = "user/kv";  // named: see decode_stage.h on g++ 12
  co_await pipeline.start(device, owner);
  pl::Served served;
  co_await pipeline.serve(device, kv_owner, r, served);
}

TEST(CoordGenMemory, DramLedgerPeakIsThePolicysPeak) {
  const devices::DeviceProfile phone = devices::load_device_profile("oneplus-12");
  const models::CostModel cost(models::load_model_spec(
      YAML::Load("{base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}"), ConfigSource{}));
  const sd::SpecDecEnv env{phone.require_npu("test"), phone.unit("cpu", "test"), phone.base_power_w, cost, cost};
  for (const char* impl : {"npu_vanilla", "cpu_vanilla", "npu_eagle", "coordgen"}) {
    const sd::RequestBreakdown b = make(std::string("{impl: ") + impl + "}")->run(env, 700, plain_trace(12));
    auto plan = std::make_shared<pl::PolicyPlan>();
    pl::Pipeline pipeline(cost, pl::options_on("npu"),
                          Registry<pl::KvReuse>::instance().create(YAML::Load("{impl: none}"), ConfigSource{}),
                          Registry<policies::kvsplit::KvSplitStrategy>::instance().create(
                              YAML::Load("{impl: always_load}"), ConfigSource{}),
                          std::make_unique<pl::PolicyPrefill>(plan), nullptr, std::make_unique<pl::PolicyDecode>(plan));
    const double kv = cost.spec().kv_bytes_per_token() * static_cast<double>(700 + b.output_tokens);
    plan->set(b.phases, b.peak_memory_bytes - kv);  // as the coordgen driver does
    pl::Request r;
    r.app = "coordgen";
    r.prompt = {{"context", 0, 700}};
    r.output_tokens = b.output_tokens;
    sim::StatGroup stats("phone");
    experiments::SimulatedRun run(phone, stats.child("device"));
    run.start(serve_one(run.device(), pipeline, r), "request");
    run.run();
    EXPECT_NEAR(run.device().dram().peak_bytes(), b.peak_memory_bytes, 1e-6 * b.peak_memory_bytes) << impl;
  }
}

// The pipeline's own stages (`npu_graphs` prefill, `speculative` decode) hold the same: the graph's
// weights as the spec counts them, the rest of the policy's peak beyond the K/V by the decoder.
TEST(CoordGenMemory, SpeculativeStageHoldsThePolicysPeakBeyondTheKv) {
  const devices::DeviceProfile phone = devices::load_device_profile("oneplus-12");
  constexpr const char* kModel = "{base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}";
  const models::CostModel cost(models::load_model_spec(YAML::Load(kModel), ConfigSource{}));
  for (const char* impl : {"npu_vanilla", "coordgen"}) {
    const std::string decode = std::string("{impl: speculative, policy: {impl: ") + impl + "}, outputs: {seed: 7}}";
    auto app = Registry<policies::App>::instance().create(
        YAML::Load(std::string("{impl: pipeline, model: ") + kModel +
                   ", unit: cpu, workload: {generate: default}, system_prompt_tokens: 64, top_k: 3, "
                   "prefill: {impl: npu_graphs}, decode: " + decode + "}"),
        ConfigSource{});
    policies::AppEnvironment env;
    env.rag_workload = [](const YAML::Node&, const ConfigSource&) { return testing::three_chunk_workload(1, 20, 40); };
    app->prepare(env);
    const testing::PipelineRun ran = testing::run_pipeline_alone(*app, phone);
    ASSERT_EQ(ran.served.size(), 1u);
    // The same request planned again by the same stage: its peak beyond the K/V of prompt + answer.
    auto again = Registry<pl::DecodeStage>::instance().create(YAML::Load(decode), ConfigSource{});
    auto& stage = dynamic_cast<pl::SpeculativeDecode&>(*again);
    sim::StatGroup stats("phone");
    experiments::SimulatedRun run(phone, stats.child("device"));
    stage.begin(run.device(), cost);
    pl::Request r;
    r.prompt = {{"system", 0x5157E1ULL, 64}};
    for (std::uint64_t c = 0; c < 3; ++c) r.prompt.push_back({"chunk", 0xC4000000ULL + c, 100});
    r.prompt.push_back({"query", 0x9E000000000ULL, 20});
    const sd::RequestBreakdown b = stage.plan(r.token_ids(), 40).breakdown;
    const double beyond_kv = b.peak_memory_bytes - cost.spec().kv_bytes_per_token() * (384.0 + b.output_tokens);
    ASSERT_TRUE(ran.peaks.count("app/npu_graph")) << impl;
    ASSERT_TRUE(ran.peaks.count("app/decoder")) << impl;
    EXPECT_DOUBLE_EQ(ran.peaks.at("app/npu_graph"), cost.spec().weight_bytes()) << impl;
    EXPECT_NEAR(ran.peaks.at("app/npu_graph") + ran.peaks.at("app/decoder"), beyond_kv, 1e-6 * beyond_kv) << impl;
  }
}

}  // namespace
}  // namespace mobisim
