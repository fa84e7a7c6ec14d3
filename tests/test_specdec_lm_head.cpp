// The NPU model's final norm and LM head on the CPU after the last NPU graph (lm_head_unit: cpu, mllm;
// policies/specdec/specdec_policy.h): a step's time worked by hand on a tiny model, and `npu` giving
// exactly what the earlier model (the head inside the graphs, none in the prefill) gave.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>

#include "devices/device.h"
#include "policies/specdec/sd_policies.h"
#include "sim/registry.h"
#include "test_specdec_util.h"
#include "test_util.h"

namespace mobisim::policies::specdec {
namespace {

// Every NPU execution costs ~1 s (its overhead), graph loads 0.5 s per layer. The CPU is ~free at fp16
// (the attention) and slow at fp32 (the head): 1 MFLOP/s and 1 MB/s, so the head's roofline is easy
// to work by hand.
SpecDecEnv slow_fp32_cpu_env() {
  devices::NpuSpec n = mobisim::testing::one_second_per_execution_npu();
  devices::ComputeUnitSpec c;
  c.peak_tflops[models::DType::kF16] = 1000;
  c.peak_tflops[models::DType::kF32] = 1e-6;  // 1e6 FLOP/s
  c.mem_bandwidth_gbps = 1000;
  c.bandwidth_efficiency_by_dtype[models::DType::kF32] = 1e-6;  // 1e6 B/s at fp32
  c.active_power_w = 1;
  c.single_thread_power_w = 1;
  const models::ModelSpec tiny = mobisim::testing::tiny_transformer_spec();  // d 64, vocab 100, 4 layers
  return SpecDecEnv{n, c, 0.5, models::CostModel(tiny), models::CostModel(tiny)};
}

std::unique_ptr<SpecDecPolicy> make_lm_head_policy(const std::string& yaml) {
  return Registry<SpecDecPolicy>::instance().create(load_yaml_string(yaml, "test"), ConfigSource{});
}

DecodeTrace lm_head_trace(int steps, int draft, int accepted) {
  DecodeTrace t;
  t.steps.assign(static_cast<std::size_t>(steps), DecodeStep{draft, accepted});
  return t;
}

double phase_seconds(const RequestBreakdown& r, const std::string& label) {
  double s = 0;
  for (const Phase& ph : r.phases)
    if (ph.label == label) s += ph.seconds;
  return s;
}

// d = 64, vocab = 100, fp32 (4 bytes), CPU 1e6 FLOP/s and 1e6 B/s, each operator max(FLOPs, bytes) / 1e6:
//   verification of 8 rows on the 32-row graph:
//     norm of the 32 graph rows: 4*32*64 = 8192 FLOPs; 64*4 + 2*32*64*4 = 16640 B      -> 0.016640 s
//     head of the 8 rows: 2*8*64*100 = 102400 FLOPs; 64*100*4 + 8*(64+100)*4 = 30848 B -> 0.102400 s
//   prefill of 256 tokens (one 256-row chunk):
//     norm of the 256 rows: 65536 FLOPs; 256 + 2*256*64*4 = 131328 B                  -> 0.131328 s
//     head of one row: 12800 FLOPs; 25600 + 164*4 = 26256 B                             -> 0.026256 s
constexpr double kVerifyHeadS = 0.016640 + 0.102400;
constexpr double kPrefillHeadS = 0.131328 + 0.026256;

TEST(SpecdecLmHead, HeadPieceIsTheFp32RooflineOfNormAndHead) {
  const SpecDecEnv env = slow_fp32_cpu_env();
  EXPECT_NEAR(npu_verify_head_seconds(env, 8, 32, LmHeadUnit::kCpu, models::DType::kF32), kVerifyHeadS, 1e-12);
  EXPECT_NEAR(cpu_lm_head_seconds(env, 256, 1, models::DType::kF32), kPrefillHeadS, 1e-12);
  EXPECT_DOUBLE_EQ(npu_verify_head_seconds(env, 8, 32, LmHeadUnit::kNpu, models::DType::kF32), 0.0);
  // The whole vocab x hidden head is read once per call, whatever the rows.
  const models::Work w = cpu_lm_head_work(env.cost.spec(), 32, 8, models::DType::kF32);
  EXPECT_DOUBLE_EQ(w.weight_bytes(), 64 * 4 + 64 * 100 * 4);
  EXPECT_DOUBLE_EQ(w.flops(), 4 * 32 * 64 + 2 * 8 * 64 * 100);
}

TEST(SpecdecLmHead, HandCountedStepWithTheHeadOnTheCpu) {
  const SpecDecEnv env = slow_fp32_cpu_env();
  const std::string shape = "prefill_chunk: 256, decode_chunk: 32, blocks: 2, draft_ms_per_step: 0";
  // One verification of 7 draft tokens + the pending one (8 rows) after a 256-token prompt.
  const RequestBreakdown cpu = make_lm_head_policy("{impl: npu_sam, lm_head_unit: cpu, " + shape + "}")->run(env, 256, lm_head_trace(1, 7, 3));
  // Prefill: 2 blocks x ~0.5 s (their share of the 1 s overhead) + the head after the last chunk.
  const PrefillResult slots = npu_prefill(env, 256, GraphShapes{2, 256, 32}, SwitchStrategy::kSynchronous);
  EXPECT_NEAR(slots.prefill_s, 1.0, 1e-4);
  EXPECT_NEAR(cpu.prefill_s, slots.prefill_s + kPrefillHeadS, 1e-12);
  EXPECT_NEAR(phase_seconds(cpu, "prefill lm head"), kPrefillHeadS, 1e-12);
  // Synchronous switch: 2 blocks x 2 layers x 0.5 s, after the head.
  EXPECT_NEAR(cpu.switch_s, 2.0, 1e-9);
  // The step: one ~1 s execution of the 32-row graph (no head inside), ~0 attention, the head of 8 rows.
  const auto [graphs_s, attention_s] = npu_verify_split(env, 8, 256, 32, LmHeadUnit::kCpu);
  EXPECT_NEAR(graphs_s, 1.0, 1e-4);
  EXPECT_LT(attention_s, 1e-4);
  EXPECT_NEAR(cpu.decode_s, graphs_s + attention_s + kVerifyHeadS, 1e-12);
  EXPECT_NEAR(phase_seconds(cpu, "lm head"), kVerifyHeadS, 1e-12);
  EXPECT_DOUBLE_EQ(phase_seconds(cpu, "verify"), graphs_s);
  // The head is on the CPU's worker pool (its active power, not the calling thread's): the CPU's busy
  // time beyond attention and host code is both pieces, and the phases still sum to the request.
  EXPECT_NEAR(cpu.cpu_busy_s - cpu.cpu_single_thread_s - phase_seconds(cpu, "attention") -
                  phase_seconds(cpu, "prefill attention"),
              kPrefillHeadS + kVerifyHeadS, 1e-12);
  double sum = 0;
  for (const Phase& ph : cpu.phases) sum += ph.seconds;
  EXPECT_NEAR(sum, cpu.total_s(), 1e-12);
  // The prefill's head is part of the prefill (the first token), before the switch.
  std::size_t head = 0, sw = 0;
  for (std::size_t i = 0; i < cpu.phases.size(); ++i) {
    if (cpu.phases[i].label == "prefill lm head") head = i;
    if (cpu.phases[i].label == "graph switch") sw = i;
  }
  EXPECT_EQ(cpu.phases[head].unit, "cpu");
  EXPECT_LT(head, sw);

  // Both npu: no CPU piece, the head inside the graph (its share is tiny on this NPU).
  const RequestBreakdown npu =
      make_lm_head_policy("{impl: npu_sam, lm_head_unit: npu, prefill_lm_head_unit: npu, " + shape + "}")->run(env, 256, lm_head_trace(1, 7, 3));
  const auto [graphs_with_head_s, attention_npu_s] = npu_verify_split(env, 8, 256, 32, LmHeadUnit::kNpu);
  EXPECT_GT(graphs_with_head_s, graphs_s);
  EXPECT_DOUBLE_EQ(attention_npu_s, attention_s);
  EXPECT_DOUBLE_EQ(npu.prefill_s, slots.prefill_s);
  EXPECT_DOUBLE_EQ(npu.decode_s, graphs_with_head_s + attention_s);
  EXPECT_DOUBLE_EQ(phase_seconds(npu, "lm head") + phase_seconds(npu, "prefill lm head"), 0.0);

  // EAGLE on the NPU: each of the 6 draft passes reads the head for its 10 rows on the CPU.
  const RequestBreakdown eagle = make_lm_head_policy("{impl: npu_eagle, lm_head_unit: cpu, " + shape + "}")->run(env, 256, lm_head_trace(11, 0, 0));
  ASSERT_EQ(eagle.steps, 2);  // ceil(11 / 5.5)
  // head of 10 rows: 2*10*64*100 = 128000 FLOPs (0.128 s) > 25600 + 10*164*4 B; norm of 32 rows as above.
  EXPECT_NEAR(phase_seconds(eagle, "draft lm head"), 2 * 6 * (0.016640 + 0.128), 1e-9);
  EXPECT_THROW(make_lm_head_policy("{impl: npu_sam, lm_head_unit: gpu}"), ConfigError);
  EXPECT_THROW(make_lm_head_policy("{impl: npu_sam, prefill_lm_head_unit: gpu}"), ConfigError);

  // The defaults (specdec_policy.h, LM head): the prefill's one-row head on the CPU (upstream mllm's NPU
  // prefill), the verification's inside the graphs.
  const RequestBreakdown dflt = make_lm_head_policy("{impl: npu_sam, " + shape + "}")->run(env, 256, lm_head_trace(1, 7, 3));
  EXPECT_DOUBLE_EQ(dflt.prefill_s, cpu.prefill_s);
  EXPECT_DOUBLE_EQ(dflt.decode_s, npu.decode_s);
  EXPECT_DOUBLE_EQ(phase_seconds(dflt, "lm head"), 0.0);
}

// lm_head_unit: npu is the earlier model, to the last bit: a prefill with no head (npu_prefill's slots
// and switch), verifications costed as the graphs' padded executions of everything but attention
// (npu_part, the head included) plus the CPU attention of the real rows, and no CPU head phases. On a
// real phone and model (the values the coordgen figures run).
TEST(SpecdecLmHead, NpuKnobReproducesTheEarlierModelExactly) {
  const devices::DeviceProfile phone = devices::load_device_profile("redmi-k60-pro");
  models::ModelSpec m = models::load_model_spec("qwen2.5-1.5b");
  m.weight_dtype = models::DType::kInt8;
  const SpecDecEnv env{*phone.npu, phone.unit("cpu", "test"), phone.base_power_w, models::CostModel(m),
                       models::CostModel(m)};
  const std::int64_t prompt = 700;
  DecodeTrace trace;
  for (int i = 0; i < 12; ++i) trace.steps.push_back(DecodeStep{i % 5 == 0 ? 0 : 3 + i, i % 3});
  for (const char* impl : {"npu_vanilla", "npu_graph", "npu_sam", "coordgen", "npu_pld"}) {
    const RequestBreakdown r = make_lm_head_policy(fmt::format("{{impl: {}, lm_head_unit: npu, prefill_lm_head_unit: npu}}", impl))->run(env, prompt, trace);
    const GraphShapes g;  // the policies' defaults: 4 blocks, 256 / 32
    const bool progressive = std::string(impl) == "npu_graph" || std::string(impl) == "coordgen";
    const PrefillResult p =
        npu_prefill(env, prompt, g, progressive ? SwitchStrategy::kProgressive : SwitchStrategy::kSynchronous);
    EXPECT_EQ(r.prefill_s, p.prefill_s) << impl;
    EXPECT_EQ(r.switch_s, p.switch_s) << impl;
    // The earlier verification, written out.
    double decode = 0;
    std::int64_t ctx = prompt;
    for (const DecodeStep& s : trace.steps) {
      const std::int64_t rows = 1 + s.draft_tokens;
      const double npu_s = env.npu.run_seconds(rows, g.decode_chunk, npu_part(env.cost.verify(g.decode_chunk, ctx)),
                                               m.weight_dtype);
      const double cpu_s = env.cpu.seconds(cpu_attention_part(env.cost.verify(rows, ctx)), m.activation_dtype);
      decode += npu_s + cpu_s;
      ctx += 1 + s.accepted;
    }
    EXPECT_EQ(r.decode_s, decode) << impl;
    EXPECT_DOUBLE_EQ(phase_seconds(r, "lm head") + phase_seconds(r, "prefill lm head"), 0.0) << impl;
    // With both on the CPU the same request costs more: an fp32 head read whole on the CPU each step.
    const RequestBreakdown c =
        make_lm_head_policy(fmt::format("{{impl: {}, lm_head_unit: cpu, prefill_lm_head_unit: cpu}}", impl))->run(env, prompt, trace);
    EXPECT_GT(c.decode_s, r.decode_s) << impl;
    EXPECT_GT(phase_seconds(c, "lm head"), 0.0) << impl;
    EXPECT_GT(phase_seconds(c, "prefill lm head"), 0.0) << impl;
  }
}

}  // namespace
}  // namespace mobisim::policies::specdec
