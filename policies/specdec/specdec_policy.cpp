#include "policies/specdec/specdec_policy.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/error.h"

namespace mobisim::policies::specdec {

std::pair<double, double> npu_verify_split(const SpecDecEnv& env, std::int64_t rows, std::int64_t context,
                                           int graph_chunk) {
  if (rows <= 0) return {0.0, 0.0};
  const auto& spec = env.cost.spec();
  // Linear layers: ceil(rows / c) padded executions of the c-token graph.
  const models::Work chunk_work = env.cost.verify(graph_chunk, context);
  const double npu_s = env.npu.run_seconds(rows, graph_chunk, npu_part(chunk_work), spec.weight_dtype);
  // Attention of the real rows (not the padding) stays on the CPU (mllm, footnote 2).
  const double cpu_s = env.cpu.seconds(cpu_attention_part(env.cost.verify(rows, context)), spec.activation_dtype);
  return {npu_s, cpu_s};
}

double npu_verify_seconds(const SpecDecEnv& env, std::int64_t rows, std::int64_t context, int graph_chunk) {
  const auto [npu_s, cpu_s] = npu_verify_split(env, rows, context, graph_chunk);
  return npu_s + cpu_s;
}

double cpu_verify_seconds(const SpecDecEnv& env, std::int64_t rows, std::int64_t context) {
  if (rows <= 0) return 0.0;
  return env.cpu.seconds(env.cost.verify(rows, context), env.cost.spec().weight_dtype);
}

ParamSchema knob_schema() {
  ParamSchema s;
  s.integer("blocks", 4, "blocks of layers the graphs are switched in (section 3.2)").at_least(1);
  s.integer("prefill_chunk", 256, "chunk of the prefill graph G_p").at_least(1).with_unit("tokens");
  s.integer("decode_chunk", 32, "chunk of the decoding graph G_d (<= prefill_chunk)").at_least(1).with_unit("tokens");
  s.integer("draft_budget", 31, "draft tokens per verification (G_d chunk minus the pending token)")
      .at_least(1)
      .with_unit("tokens");
  s.real("calibration_ms_per_token", 2.0, "in-context calibration cost per input token (document: ~2 ms)")
      .non_negative()
      .with_unit("ms");
  s.real("draft_ms_per_step", 1.0, "retrieval and tree construction per decoding step (document: < 3 ms)")
      .non_negative()
      .with_unit("ms");
  s.real("calibration_bytes_per_node", 16, "memory per calibrated-tree node").non_negative().with_unit("bytes");
  return s;
}

PolicyKnobs knobs_from(const Params& p) {
  PolicyKnobs k;
  k.graphs.blocks = static_cast<int>(p.integer("blocks"));
  k.graphs.prefill_chunk = static_cast<int>(p.integer("prefill_chunk"));
  k.graphs.decode_chunk = static_cast<int>(p.integer("decode_chunk"));
  if (k.graphs.decode_chunk > k.graphs.prefill_chunk)
    throw ConfigError(fmt::format("{}: decode_chunk {} is larger than prefill_chunk {}",
                                  p.source().where(p.yaml()), k.graphs.decode_chunk, k.graphs.prefill_chunk));
  k.draft_budget = static_cast<int>(p.integer("draft_budget"));
  k.calibration_ms_per_token = p.real("calibration_ms_per_token");
  k.draft_ms_per_step = p.real("draft_ms_per_step");
  k.calibration_bytes_per_node = p.real("calibration_bytes_per_node");
  return k;
}

PrefillResult npu_prefill(const SpecDecEnv& env, std::int64_t prompt_tokens, const GraphShapes& g,
                          std::optional<SwitchStrategy> switch_strategy) {
  const ScheduleProblem p = make_schedule_problem(env.npu, env.cpu, env.cost, prompt_tokens, g);
  const GraphSchedule s = switch_strategy ? schedule(p, *switch_strategy) : schedule_both_resident(p);
  PrefillResult r;
  r.prefill_s = s.prefill_end_s;
  r.switch_s = std::max(0.0, s.latency_s() - s.prefill_end_s);
  r.peak_npu_bytes = switch_strategy ? s.peak_npu_bytes : p.total_weight_bytes();
  // Busy time split: attention (identical on both graphs) on the CPU, the rest on the NPU.
  for (int c = 0; c < p.chunks; ++c) {
    const models::Work w = env.cost.prefill(models::PrefillShape{g.prefill_chunk, std::int64_t{c} * g.prefill_chunk, 0, 0});
    r.cpu_s += env.cpu.seconds(cpu_attention_part(w), env.cost.spec().activation_dtype);
  }
  r.npu_s = std::max(0.0, s.prefill_end_s - r.cpu_s);
  return r;
}

double request_energy_j(const SpecDecEnv& env, double total_s, double npu_busy_s, double cpu_busy_s) {
  const double npu = env.npu.active_power_w * npu_busy_s + env.npu.idle_power_w * std::max(0.0, total_s - npu_busy_s);
  const double cpu = env.cpu.active_power_w * cpu_busy_s + env.cpu.idle_power_w * std::max(0.0, total_s - cpu_busy_s);
  return npu + cpu + env.base_power_w * total_s;
}

}  // namespace mobisim::policies::specdec
