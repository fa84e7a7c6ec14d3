// CoordGen policies: NPU verification padded to G_d's chunk with attention on the CPU (hand
// counts on an execution-overhead-bound NPU), the section 4.1 names, EAGLE's 5.5-token cap, bad
// configurations, and the coordgen experiment end to end on QMSum when the shared data is present.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "experiments/simulation.h"
#include "policies/specdec/sd_policies.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "sim/registry.h"
#include "test_specdec_util.h"
#include "test_util.h"

namespace mobisim::policies::specdec {
namespace {

models::ModelSpec tiny_model() { return mobisim::testing::tiny_transformer_spec(); }

// Every NPU execution costs ~1 s (overhead), graph loads 0.5 s per layer; the CPU is ~free.
SpecDecEnv overhead_env() {
  devices::NpuSpec n = mobisim::testing::one_second_per_execution_npu();
  devices::ComputeUnitSpec c;
  c.peak_tflops[models::DType::kF32] = c.peak_tflops[models::DType::kF16] = 1000;
  c.mem_bandwidth_gbps = 1000;
  c.active_power_w = 1;
  c.single_thread_power_w = 1;  // one thread draws what the pool does: the energies below count 1 W
  return SpecDecEnv{n, c, 0.5, models::CostModel(tiny_model()), models::CostModel(tiny_model())};
}

std::unique_ptr<SpecDecPolicy> make(const std::string& yaml) {
  return Registry<SpecDecPolicy>::instance().create(load_yaml_string(yaml, "test"), ConfigSource{});
}

TEST(SpecdecPolicies, NpuVerificationIsPaddedToTheDecodeGraph) {
  const SpecDecEnv env = overhead_env();
  // 1..32 rows: one execution of the 32-token graph; 33 rows: two.
  EXPECT_NEAR(npu_verify_seconds(env, 1, 100, 32, LmHeadUnit::kNpu, models::DType::kF32), 1.0, 1e-3);
  EXPECT_NEAR(npu_verify_seconds(env, 32, 100, 32, LmHeadUnit::kNpu, models::DType::kF32), 1.0, 1e-3);
  EXPECT_NEAR(npu_verify_seconds(env, 33, 100, 32, LmHeadUnit::kNpu, models::DType::kF32), 2.0, 1e-3);
  EXPECT_NEAR(npu_verify_seconds(env, 64, 100, 64, LmHeadUnit::kNpu, models::DType::kF32), 1.0, 1e-3);
  // The CPU part is the attention of the real rows only: it grows with rows, not with the padding.
  const auto [npu1, cpu1] = npu_verify_split(env, 1, 100, 32, LmHeadUnit::kNpu);
  const auto [npu8, cpu8] = npu_verify_split(env, 8, 100, 32, LmHeadUnit::kNpu);
  EXPECT_DOUBLE_EQ(npu1, npu8);
  EXPECT_GT(cpu8, cpu1);
  EXPECT_GT(cpu1, 0);
  EXPECT_DOUBLE_EQ(npu_verify_seconds(env, 0, 100, 32, LmHeadUnit::kNpu, models::DType::kF32), 0.0);
}

TEST(SpecdecPolicies, SectionFourOneNamesAreRegistered) {
  for (const char* n : {"npu_vanilla", "cpu_vanilla", "npu_graph", "npu_sam", "cpu_sam", "npu_pld", "npu_sam_graph",
                        "coordgen", "npu_eagle", "cpu_eagle", "pld_ours", "sam_ours"})
    EXPECT_TRUE(Registry<SpecDecPolicy>::instance().contains(n)) << n;
}

DecodeTrace trace_of(int steps, int draft, int accepted) {
  DecodeTrace t;
  t.steps.assign(steps, DecodeStep{draft, accepted});
  return t;
}

TEST(SpecdecPolicies, HandCountedRequestOnTheOverheadBoundNpu) {
  const SpecDecEnv env = overhead_env();
  // 256-token prompt: one G_p execution per block; 4 layers in 2 blocks; loads 1 s per block.
  // The 1 s execution overhead is per pass through the whole model (as a decode step makes), so
  // each block's execution carries half of it.
  const std::string shape = "prefill_chunk: 256, decode_chunk: 32, blocks: 2";
  auto vanilla = make("{impl: npu_vanilla, " + shape + "}");
  const RequestBreakdown v = vanilla->run(env, 256, trace_of(10, 0, 0));
  // Prefill: 2 blocks x 1 execution x 0.5 s = 1 s; synchronous switch: 2 blocks x 1 s; 10 decode
  // steps x 1 s.
  EXPECT_NEAR(v.prefill_s, 1.0, 1e-2);
  EXPECT_NEAR(v.switch_s, 2.0, 1e-2);
  EXPECT_NEAR(v.decode_s, 10.0, 1e-2);
  EXPECT_EQ(v.output_tokens, 10);
  // SD: 10 output tokens in 2 steps (4 accepted + bonus each) of 31-token drafts: 2 executions.
  auto sam = make("{impl: npu_sam, " + shape + "}");
  const RequestBreakdown s = sam->run(env, 256, trace_of(2, 31, 4));
  EXPECT_EQ(s.output_tokens, 10);
  EXPECT_NEAR(s.decode_s, 2.0, 1e-2);
  EXPECT_DOUBLE_EQ(s.mean_accepted, 4.0);
  EXPECT_LT(s.ms_per_token(), v.ms_per_token());
  // CoordGen charges calibration (2 ms per input token) and keeps the calibrated tree in memory;
  // sequential: all of it on the critical path.
  auto cg = make("{impl: coordgen, calibration_overlap: sequential, " + shape + "}");
  const RequestBreakdown c = cg->run(env, 256, trace_of(2, 31, 4));
  EXPECT_NEAR(c.calibration_s, 0.512, 1e-9);
  EXPECT_NEAR(c.calibration_cpu_s, 0.512, 1e-9);
  EXPECT_GT(c.peak_memory_bytes, s.peak_memory_bytes);
  // CPU vanilla keeps a second copy of the weights.
  auto cpu = make("{impl: cpu_vanilla, " + shape + "}");
  EXPECT_GT(cpu->run(env, 256, trace_of(10, 0, 0)).peak_memory_bytes,
            v.peak_memory_bytes + 0.99 * env.cost.spec().weight_bytes() -
                2 * env.cost.spec().params_per_layer() * models::dtype_bytes(env.cost.spec().weight_dtype));
  // Phases replay the same time on the units.
  double sum = 0;
  for (const auto& ph : c.phases) sum += ph.seconds;
  EXPECT_NEAR(sum, c.total_s(), 1e-9);
}

// CPU decoding runs the CPU's own copy of the weights (SpecDecEnv::cpu_cost; mllm decodes with a
// Q4_0_4x4 file beside the NPU's int8 one): on this bandwidth-bound CPU, an int8 copy of the fp16
// model saves exactly its weight bytes per step over the CPU's bandwidth and holds that much less
// memory, while the NPU policies do not see it.
TEST(SpecdecPolicies, CpuPoliciesDecodeWithTheCpuCopyOfTheWeights) {
  SpecDecEnv same = overhead_env();
  SpecDecEnv own = overhead_env();
  models::ModelSpec int8 = tiny_model();
  int8.weight_dtype = models::DType::kInt8;
  own.cpu_cost = models::CostModel(int8);
  own.cpu.peak_tflops[models::DType::kInt8] = 1000;
  const std::string shape = "prefill_chunk: 256, decode_chunk: 32, blocks: 2";
  const double saved_per_step = same.cost.decode(300).weight_bytes() - own.cpu_cost.decode(300).weight_bytes();
  ASSERT_GT(saved_per_step, 0);
  for (const char* impl : {"cpu_vanilla", "cpu_sam"}) {
    auto p = make(fmt::format("{{impl: {}, {}}}", impl, shape));
    const RequestBreakdown a = p->run(same, 256, trace_of(10, 0, 0));
    const RequestBreakdown b = p->run(own, 256, trace_of(10, 0, 0));
    EXPECT_NEAR(a.decode_s - b.decode_s, 10 * saved_per_step / 1e12, 1e-15) << impl;
    EXPECT_NEAR(a.peak_memory_bytes - b.peak_memory_bytes, same.cost.spec().weight_bytes() - int8.weight_bytes(), 1e-6)
        << impl;
  }
  auto npu = make("{impl: npu_vanilla, " + shape + "}");
  EXPECT_DOUBLE_EQ(npu->run(same, 256, trace_of(10, 0, 0)).total_s(), npu->run(own, 256, trace_of(10, 0, 0)).total_s());
}

// Calibration pipelined with the chunked prefill (specdec_policy.h), worked by hand.
TEST(SpecdecPolicies, CalibrationPipelineFinishIsTheTwoStageFormula) {
  // Chunks ready at 1, 2, 3 s; sampling 1.5, 0.2, 2 s: F0 = 2.5, F1 = max(2.5, 2) + 0.2 = 2.7,
  // F2 = max(2.7, 3) + 2 = 5.
  EXPECT_DOUBLE_EQ(pipeline_finish_s({1, 2, 3}, {1.5, 0.2, 2}), 5.0);
  EXPECT_DOUBLE_EQ(pipeline_finish_s({}, {}), 0.0);
  EXPECT_THROW(pipeline_finish_s({1}, {}), InputError);
}

devices::DeviceProfile two_unit_device() {
  devices::DeviceProfile d;
  d.name = "toy";
  const SpecDecEnv env = overhead_env();
  d.compute["cpu"] = env.cpu;
  d.npu = env.npu;
  d.dram = devices::DramSpec{8, 1e6, 0};  // a bus so wide that it never slows a unit
  return d;
}

Phase main_phase(const char* unit, double s, const char* label) {
  Phase ph;
  ph.unit = unit;
  ph.seconds = s;
  ph.label = label;
  return ph;
}
Phase sampling(double s, int after) {
  Phase ph = main_phase("cpu", s, "calibration");
  ph.background = true;
  ph.after = after;
  ph.priority = 1;
  return ph;
}

TEST(SpecdecPolicies, PipelinedCalibrationOnTheDeviceMatchesTheFormula) {
  // NPU-only prefill chunks of 1 s (ready at 1, 2, 3 s), sampling 1.5, 0.2, 2 s on the idle CPU,
  // then a 0.5 s decoding step that needs the calibrated tree: it starts at F2 = 5 s.
  std::vector<Phase> ph{main_phase("npu", 1, "prefill"), main_phase("npu", 1, "prefill"),
                        main_phase("npu", 1, "prefill")};
  ph.push_back(sampling(1.5, 0));
  ph.push_back(sampling(0.2, 1));
  ph.push_back(sampling(2.0, 2));
  ph.push_back(main_phase("npu", 0.5, "verify"));
  ph.back().join = true;
  sim::StatGroup stats("toy");
  ReplayResult out;
  {
    experiments::SimulatedRun run(two_unit_device(), stats);
    run.start(replay_phases(run.device(), ph, out), "request");
    run.run();
    EXPECT_NEAR(run.device().busy_seconds("cpu"), 3.7, 1e-9);  // every sampling second charged
    EXPECT_NEAR(run.device().busy_seconds("npu"), 3.5, 1e-9);
  }
  EXPECT_NEAR(out.latency_s, pipeline_finish_s({1, 2, 3}, {1.5, 0.2, 2}) + 0.5, 1e-9);
  EXPECT_NEAR(out.join_wait_s, 5.0 - 3.0, 1e-9);
}

TEST(SpecdecPolicies, PipelinedCalibrationContendsWithPrefillAttention) {
  // Two chunks: NPU 1 s then CPU attention 0.5 s each. Chunk 0's sampling (1.2 s in 0.3 s slices)
  // runs 1.5-2.7; chunk 1's attention asks for the CPU at 2.5, waits for the running slice (to
  // 2.7) and runs 2.7-3.2; chunk 1's sampling (0.6 s) runs 3.2-3.8; the decoding step waits for
  // it: 3.8-4.3.
  std::vector<Phase> ph{main_phase("npu", 1, "prefill"), main_phase("cpu", 0.5, "prefill attention"),
                        main_phase("npu", 1, "prefill"), main_phase("cpu", 0.5, "prefill attention")};
  for (int i = 0; i < 4; ++i) ph.push_back(sampling(0.3, 1));
  for (int i = 0; i < 2; ++i) ph.push_back(sampling(0.3, 3));
  ph.push_back(main_phase("npu", 0.5, "verify"));
  ph.back().join = true;
  sim::StatGroup stats("toy");
  ReplayResult out;
  {
    experiments::SimulatedRun run(two_unit_device(), stats);
    run.start(replay_phases(run.device(), ph, out), "request");
    run.run();
  }
  EXPECT_NEAR(out.latency_s, 4.3, 1e-9);
  EXPECT_NEAR(out.join_wait_s, 0.6, 1e-9);
  // Without the slice wait, the idle-CPU pipeline exposes 0.8 s of the 1.8 s of sampling:
  // 1.2 - 1.0 (chunk 1's NPU time) + 0.6. The replay spends the same 0.8 s (0.2 wait + 0.6 join).
  PrefillResult p;
  p.slots = {{0, 1.0, 0.5, 1.5}, {1, 1.0, 0.5, 3.0}};
  p.chunk_end_s = {1.5, 3.0};
  EXPECT_NEAR(calibration_tail_on_idle_cpu_s(p, {1.2, 0.6}), 0.8, 1e-12);
  p.switch_s = 0.5;  // an exposed switch leaves the CPU idle too
  EXPECT_NEAR(calibration_tail_on_idle_cpu_s(p, {1.2, 0.6}), 0.3, 1e-12);
}

TEST(SpecdecPolicies, CoordgenPipelinedCalibrationHidesBehindPrefillAndSwitch) {
  const SpecDecEnv env = overhead_env();
  // 512-token prompt: 2 chunks x 2 blocks of 0.5 s NPU executions (half the whole-model overhead
  // each; attention ~0: the CPU is ~free), chunk ends 1 s and 2 s; synchronous switch 2 x 1 s.
  // Sampling 10 ms/token: 2.56 s per chunk. Two-stage pipeline: F1 = max(1 + 2.56, 2) + 2.56 = 6.12 s;
  // prefill + switch = 4 s: 2.12 s exposed.
  const std::string shape =
      "prefill_chunk: 256, decode_chunk: 32, blocks: 2, switch: synchronous, calibration_ms_per_token: 10";
  const RequestBreakdown pipe = make("{impl: coordgen, " + shape + "}")->run(env, 512, trace_of(2, 31, 4));
  const RequestBreakdown seq =
      make("{impl: coordgen, calibration_overlap: sequential, " + shape + "}")->run(env, 512, trace_of(2, 31, 4));
  EXPECT_NEAR(pipe.prefill_s + pipe.switch_s, 4.0, 1e-2);
  EXPECT_NEAR(pipe.calibration_s, pipeline_finish_s({1, 2}, {2.56, 2.56}) - 4.0, 1e-2);
  EXPECT_NEAR(seq.calibration_s, 5.12, 1e-9);
  EXPECT_NEAR(pipe.calibration_cpu_s, seq.calibration_cpu_s, 1e-12);
  EXPECT_NEAR(seq.total_s() - pipe.total_s(), 5.12 - pipe.calibration_s, 1e-9);
  // The same request replayed on the device: sampling at 2 ms/token hides completely.
  const RequestBreakdown cheap =
      make("{impl: coordgen, prefill_chunk: 256, decode_chunk: 32, blocks: 2, switch: synchronous}")
          ->run(env, 512, trace_of(2, 31, 4));
  EXPECT_NEAR(cheap.calibration_s, 0.0, 1e-12);
  devices::DeviceProfile dev = two_unit_device();
  sim::StatGroup stats("toy");
  ReplayResult out;
  {
    experiments::SimulatedRun run(dev, stats);
    run.start(replay_phases(run.device(), pipe.phases, out), "request");
    run.run();
  }
  EXPECT_NEAR(out.latency_s, pipe.total_s(), 1e-3);
  // Chunk 1's two attention phases and the prefill's CPU LM head after them (~0 s each) each wait for
  // one running 10 ms slice: 30 ms of the exposed sampling moves into the prefill, the decoder waits the rest.
  EXPECT_NEAR(out.join_wait_s, pipe.calibration_s - 3 * 0.010, 1e-3);
  EXPECT_THROW(make("{impl: coordgen, calibration_overlap: sometimes}"), ConfigError);
  EXPECT_THROW(make("{impl: coordgen, calibration_slice_tokens: 0}"), ConfigError);
}

TEST(SpecdecPolicies, EagleAcceptsAtMostFiveAndAHalfTokensPerStep) {
  const SpecDecEnv env = overhead_env();
  auto eagle = make("{impl: npu_eagle, prefill_chunk: 256, decode_chunk: 32, blocks: 2}");
  const RequestBreakdown e = eagle->run(env, 256, trace_of(110, 0, 0));
  EXPECT_EQ(e.output_tokens, 110);
  EXPECT_EQ(e.steps, 20);  // ceil(110 / 5.5)
  // Each step: 6 draft-model passes (1 execution each) + one verification execution.
  EXPECT_NEAR(e.draft_s, 20 * 6.0, 0.1);
  EXPECT_NEAR(e.decode_s, 20 * 1.0, 0.1);
}

TEST(SpecdecPolicies, BadConfigurationsAreRefused) {
  EXPECT_THROW(make("{impl: coordgen, draft_budget: 0}"), ConfigError);
  EXPECT_THROW(make("{impl: coordgen, decode_chunk: 32, draft_budget: 40}"), ConfigError);
  EXPECT_THROW(make("{impl: npu_graph, prefill_chunk: 32, decode_chunk: 64}"), ConfigError);
  EXPECT_THROW(make("{impl: npu_graph, switch: sometimes}"), ConfigError);
  EXPECT_THROW(make("{impl: npu_sam, retriever: rest}"), ConfigError);
  const SpecDecEnv env = overhead_env();
  auto many_blocks = make("{impl: npu_graph, blocks: 8}");
  EXPECT_THROW(many_blocks->run(env, 100, trace_of(1, 0, 0)), ConfigError);  // 8 blocks, 4 layers
}

// End to end on QMSum (needs ../shared): SAM accepts more than PLD on `rag` (history store of the
// user's earlier answers), reuse raises both, and the run writes its summary.
TEST(SpecdecPolicies, ExperimentOnQmsumShowsTableFourDirection) {
  const std::string shared = mobisim::testing::shared_dir();
  const std::string tok = shared + "/models/llama2-tokenizer.model";
  if (!std::filesystem::exists(shared + "/data/qmsum/val") || !std::filesystem::exists(tok))
    GTEST_SKIP() << "QMSum or the Llama 2 tokenizer not under " << shared;
  mobisim::testing::TempDir dir("coordgen");
  const std::string trace = dir.file("qmsum.h5");
  auto r = mobisim::testing::run_mobisim("trace import qmsum --dir '" + shared + "/data/qmsum' --split val --tokenizer '" +
                                         tok + "' --max-meetings 8 --out '" + trace + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string cfg = dir.file("t4.yaml");
  std::ofstream(cfg) << "name: t4\nexperiment:\n  impl: coordgen\n  device: redmi-k60-pro\n  model: qwen2.5-0.5b\n"
                     << "  workload: {trace: " << trace << ", tokenizer: " << tok << ", task: rag}\n"
                     << "  policies:\n    - {impl: npu_pld, label: PLD}\n    - {impl: npu_pld, label: PLDr, reuse: true}\n"
                     << "    - {impl: npu_sam, label: SAM}\n    - {impl: npu_sam, label: SAMr, reuse: true}\n";
  r = mobisim::testing::run_mobisim("run '" + cfg + "' --no-plot --output '" + dir.file("t4.h5") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream csv(dir.file("t4_summary.csv"));
  std::string header, line;
  std::getline(csv, header);
  std::map<std::string, double> acc;
  while (std::getline(csv, line)) {
    std::stringstream ss(line);
    std::string cell;
    std::vector<std::string> cells;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    ASSERT_GE(cells.size(), 5u) << line;
    acc[cells[0]] = std::stod(cells[4]);  // policy, requests, output_tokens, ms_per_token, accepted_per_step
  }
  ASSERT_EQ(acc.size(), 4u) << header;
  EXPECT_GT(acc["SAM"], acc["PLD"]);
  EXPECT_GT(acc["PLDr"], acc["PLD"]);
  EXPECT_GT(acc["SAMr"], acc["SAM"]);

  // The `summary` task (one general query per meeting): with the meeting's specific-query answers
  // as the user's history store, SAM accepts more than PLD and reuse raises both; without them
  // SAM has no history and does no better than PLD.
  for (const bool history : {true, false}) {
    std::ofstream(cfg) << "name: t4\nexperiment:\n  impl: coordgen\n  device: redmi-k60-pro\n  model: qwen2.5-0.5b\n"
                       << "  workload: {trace: " << trace << ", tokenizer: " << tok
                       << ", task: summary, history_from_other_task: " << (history ? "true" : "false") << "}\n"
                       << "  policies:\n    - {impl: npu_pld, label: PLD}\n    - {impl: npu_pld, label: PLDr, reuse: true}\n"
                       << "    - {impl: npu_sam, label: SAM}\n    - {impl: npu_sam, label: SAMr, reuse: true}\n";
    r = mobisim::testing::run_mobisim("run '" + cfg + "' --no-plot --force --output '" + dir.file("t4s.h5") + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream scsv(dir.file("t4s_summary.csv"));
    std::getline(scsv, header);
    acc.clear();
    while (std::getline(scsv, line)) {
      std::stringstream ss(line);
      std::string cell;
      std::vector<std::string> cells;
      while (std::getline(ss, cell, ',')) cells.push_back(cell);
      ASSERT_GE(cells.size(), 5u) << line;
      acc[cells[0]] = std::stod(cells[4]);
    }
    ASSERT_EQ(acc.size(), 4u) << header;
    if (history) {
      EXPECT_GT(acc["SAM"], 1.5 * acc["PLD"]);
    } else {
      EXPECT_LE(acc["SAM"], acc["PLD"] * 1.05);
    }
    EXPECT_GT(acc["PLDr"], acc["PLD"]);
    EXPECT_GT(acc["SAMr"], acc["SAM"]);
  }
}

}  // namespace
}  // namespace mobisim::policies::specdec

namespace mobisim::policies::specdec {
namespace {

// The kernel workload: stories260K writes contexts and outputs; every policy's drafting runs on the
// real model (the driver fails if any output differs from greedy decoding).
TEST(SpecdecPolicies, KernelWorkloadRunsLosslesslyEndToEnd) {
  const std::string model = mobisim::testing::shared_dir() + "/models/stories260K.bin";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "real data not present: " << model;
  mobisim::testing::TempDir dir("coordgen-kernel");
  const std::string cfg = dir.file("k.yaml");
  std::ofstream(cfg) << "name: k\nexperiment:\n  impl: coordgen\n  device: oneplus-13\n  model: qwen2.5-0.5b\n"
                     << "  workload: {kernel_model: " << model
                     << ", kernel_users: 2, kernel_requests: 2, max_context_tokens: 96, max_output_tokens: 24}\n"
                     << "  policies:\n    - {impl: npu_vanilla}\n    - {impl: coordgen}\n"
                     << "    - {impl: npu_pld, calibrate: true, reuse: true}\n";
  auto r = mobisim::testing::run_mobisim("run '" + cfg + "' --no-plot --output '" + dir.file("k.h5") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("coordgen"), std::string::npos) << r.output;
  // Draft-length distribution (section 2.3, Figure 6): one histogram per retrieval-drafting policy
  // (none for plain decoding) that counts every verification once, whose mean is the summary's
  // drafted_per_step and whose cumulative fraction ends at 1.
  {
    h5::Reader f(dir.file("k.h5"));
    const auto pol = f.strings("/tables/draft_lengths/policy");
    const auto len = f.ints("/tables/draft_lengths/draft_tokens", pol.size());
    const auto steps = f.ints("/tables/draft_lengths/steps", pol.size());
    const auto cum = f.doubles("/tables/draft_lengths/cumulative_fraction", pol.size());
    const auto sum_pol = f.strings("/summary/policy");
    const auto drafted = f.doubles("/summary/drafted_per_step", sum_pol.size());
    EXPECT_EQ(std::count(pol.begin(), pol.end(), "npu_vanilla"), 0);
    for (const std::string label : {"coordgen", "npu_pld"}) {
      std::int64_t n = 0, tokens = 0;
      double last_cum = 0;
      for (std::size_t i = 0; i < pol.size(); ++i)
        if (pol[i] == label) n += steps[i], tokens += steps[i] * len[i], last_cum = cum[i];
      const auto rec_steps = f.ints("/runs/" + label + "/records/steps");
      std::int64_t expected = 0;
      for (auto v : rec_steps) expected += v;
      EXPECT_EQ(n, expected) << label;
      EXPECT_NEAR(last_cum, 1.0, 1e-12) << label;
      const auto at = std::find(sum_pol.begin(), sum_pol.end(), label) - sum_pol.begin();
      ASSERT_LT(static_cast<std::size_t>(at), sum_pol.size()) << label;
      EXPECT_NEAR(static_cast<double>(tokens) / static_cast<double>(n), drafted[at], 1e-9) << label;
    }
  }
  // A trace workload and a kernel workload at once is refused.
  std::ofstream(cfg) << "name: k\nexperiment:\n  impl: coordgen\n  device: oneplus-13\n  model: qwen2.5-0.5b\n"
                     << "  workload: {kernel_model: " << model << ", trace: x.h5}\n  policies: [{impl: coordgen}]\n";
  r = mobisim::testing::run_mobisim("run '" + cfg + "' --no-plot --output '" + dir.file("k2.h5") + "'");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("exactly one of"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mobisim::policies::specdec

namespace mobisim::policies::specdec {
namespace {

std::map<std::string, std::vector<std::string>> read_csv_rows(const std::string& path, std::size_t key_col) {
  std::ifstream csv(path);
  std::string line;
  std::getline(csv, line);  // header
  std::map<std::string, std::vector<std::string>> rows;
  while (std::getline(csv, line)) {
    std::stringstream ss(line);
    std::string cell;
    std::vector<std::string> cells;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    if (cells.size() > key_col) rows[cells[key_col]] = cells;
  }
  return rows;
}

// Figure 8's driver: synchronous switching adds exactly the 28 layer loads after the prefill, the
// exact search is never behind the greedy, and a G_d larger than G_p is refused with exit code 3.
TEST(SpecdecPolicies, ScheduleExperimentEndToEnd) {
  mobisim::testing::TempDir dir("coordgen-sched");
  const std::string cfg = dir.file("s.yaml");
  std::ofstream(cfg) << "name: s\nexperiment:\n  impl: coordgen_schedule\n  device: redmi-k60-pro\n"
                        "  model: qwen2.5-1.5b\n  prompt_tokens: [512]\n  blocks: 4\n"
                        "  strategies: [synchronous, progressive, exact]\n";
  auto r = mobisim::testing::run_mobisim("run '" + cfg + "' --no-plot --output '" + dir.file("s.h5") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // strategy, prompt_tokens, prefill_end_s, switch_end_s, latency_s, ...
  const auto rows = read_csv_rows(dir.file("s_summary.csv"), 0);
  ASSERT_EQ(rows.size(), 3u);
  const auto& sync = rows.at("synchronous");
  EXPECT_NEAR(std::stod(sync[3]) - std::stod(sync[2]), 28 * 0.040, 1e-6);  // K60: 40 ms per layer
  EXPECT_LE(std::stod(rows.at("exact")[4]), std::stod(rows.at("progressive")[4]) + 1e-9);
  std::ofstream(cfg) << "name: s\nexperiment:\n  impl: coordgen_schedule\n  device: redmi-k60-pro\n"
                        "  model: qwen2.5-1.5b\n  prefill_chunk: 32\n  decode_chunk: 64\n";
  r = mobisim::testing::run_mobisim("run '" + cfg + "' --no-plot --output '" + dir.file("s2.h5") + "'");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("larger than the prefill graph"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mobisim::policies::specdec
