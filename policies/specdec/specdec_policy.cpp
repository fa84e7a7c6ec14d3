#include "policies/specdec/specdec_policy.h"

#include <fmt/format.h>

#include <algorithm>

#include "policies/specdec/phase_replay.h"
#include "sim/error.h"
#include "sim/event.h"

namespace mobisim::policies::specdec {

const char* to_string(LmHeadUnit u) { return u == LmHeadUnit::kCpu ? "cpu" : "npu"; }

LmHeadUnit parse_lm_head_unit(const std::string& name) {
  if (name == "cpu") return LmHeadUnit::kCpu;
  if (name == "npu") return LmHeadUnit::kNpu;
  throw ConfigError(fmt::format("unknown lm_head_unit '{}' (expected cpu or npu)", name));
}

models::Work cpu_lm_head_work(const models::ModelSpec& s, std::int64_t norm_rows, std::int64_t logit_rows,
                              models::DType dtype) {
  models::Work w;
  const double d = s.hidden, V = s.vocab, b = models::dtype_bytes(dtype);
  if (norm_rows > 0) {
    const double n = static_cast<double>(norm_rows);
    w.ops.push_back(models::Op{models::OpKind::kFinalNorm, 4 * n * d, d * b, 2 * n * d * b, 0, 0, 1, norm_rows, dtype});
  }
  if (logit_rows > 0) {
    const double t = static_cast<double>(logit_rows);
    w.ops.push_back(
        models::Op{models::OpKind::kLmHead, 2 * t * d * V, d * V * b, t * (d + V) * b, 0, 0, 1, logit_rows, dtype});
  }
  return w;
}

double cpu_lm_head_seconds(const SpecDecEnv& env, std::int64_t norm_rows, std::int64_t logit_rows, models::DType dtype) {
  return env.cpu.seconds(cpu_lm_head_work(env.cost.spec(), norm_rows, logit_rows, dtype), dtype);
}

models::Work npu_graph_part(const models::Work& w, LmHeadUnit head) {
  models::Work out = npu_part(w);
  if (head == LmHeadUnit::kNpu) return out;
  std::erase_if(out.ops, [](const models::Op& op) {
    return op.kind == models::OpKind::kFinalNorm || op.kind == models::OpKind::kLmHead;
  });
  return out;
}

std::pair<double, double> npu_verify_split(const SpecDecEnv& env, std::int64_t rows, std::int64_t context,
                                           int graph_chunk, LmHeadUnit head) {
  if (rows <= 0) return {0.0, 0.0};
  const auto& spec = env.cost.spec();
  // Linear layers: ceil(rows / c) padded executions of the c-token graph.
  const models::Work chunk_work = env.cost.verify(graph_chunk, context);
  const double npu_s = env.npu.run_seconds(rows, graph_chunk, npu_graph_part(chunk_work, head), spec.weight_dtype);
  // Attention of the real rows (not the padding) stays on the CPU (mllm, footnote 2).
  const double cpu_s = env.cpu.seconds(cpu_attention_part(env.cost.verify(rows, context)), spec.activation_dtype);
  return {npu_s, cpu_s};
}

double npu_verify_head_seconds(const SpecDecEnv& env, std::int64_t rows, int graph_chunk, LmHeadUnit head,
                               models::DType head_dtype) {
  if (rows <= 0 || head == LmHeadUnit::kNpu) return 0.0;
  const std::int64_t c = graph_chunk, padded_rows = (rows + c - 1) / c * c;
  return cpu_lm_head_seconds(env, padded_rows, rows, head_dtype);
}

double npu_verify_seconds(const SpecDecEnv& env, std::int64_t rows, std::int64_t context, int graph_chunk,
                          LmHeadUnit head, models::DType head_dtype) {
  const auto [npu_s, cpu_s] = npu_verify_split(env, rows, context, graph_chunk, head);
  return npu_s + cpu_s + npu_verify_head_seconds(env, rows, graph_chunk, head, head_dtype);
}

double cpu_verify_seconds(const SpecDecEnv& env, std::int64_t rows, std::int64_t context) {
  if (rows <= 0) return 0.0;
  return env.cpu.seconds(env.cpu_cost.verify(rows, context), env.cpu_cost.spec().weight_dtype);
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
  s.text("calibration_overlap", std::string("pipelined"),
         "pipelined: sample chunk i's logits on the CPU while the NPU prefills chunk i+1, only the tail "
         "after prefill + switch is exposed; sequential: sample after prefill + switch (specdec_policy.h)")
      .in({"pipelined", "sequential"});
  s.integer("calibration_slice_tokens", 1,
            "pipelined sampling is issued to the CPU in slices of this many tokens; the prefill's attention "
            "(higher priority) waits at most one slice")
      .at_least(1)
      .with_unit("tokens");
  s.real("draft_ms_per_step", 1.0, "retrieval and tree construction per decoding step (document: < 3 ms)")
      .non_negative()
      .with_unit("ms");
  s.boolean("npu_rpc_polling", true,
            "the calling thread spins on one CPU core through every NPU execution (mllm's QNN backend sets "
            "RPC polling 9999 us; specdec_policy.h, Energy)");
  s.text("prefill_lm_head_unit", std::string("cpu"),
         "where the final norm and LM head run after an NPU prefill: cpu (upstream mllm's NPU prefill: CPU ops "
         "after the last QNN graph, one row at npu_lm_head_dtype on the worker pool; specdec_policy.h) or npu "
         "(inside the last graph)")
      .in({"cpu", "npu"});
  s.text("lm_head_unit", std::string("npu"),
         "where the final norm and LM head run in an NPU verification, NPU decoding step and EAGLE's NPU draft "
         "pass: npu (inside the graphs: upstream mllm has no NPU verification path to read, and the document's "
         "measured 32-row verification leaves no room for a CPU fp32 head; specdec_policy.h) or cpu (upstream "
         "mllm's CPU speculative path: every real row at npu_lm_head_dtype on the worker pool)")
      .in({"cpu", "npu"});
  s.real("calibration_bytes_per_node", 16, "memory per calibrated-tree node").non_negative().with_unit("bytes");
  s.text("embedding_dtype", std::string("fp32"),
         "dtype of the runtime's embedding table, one per model copy and one in EAGLE's drafter (mllm: fp32 "
         "in its QNN and CPU files; specdec_policy.h)")
      .in(models::dtype_names());
  s.text("npu_lm_head_dtype", std::string("fp32"),
         "dtype of the NPU model's LM head, a CPU tensor of its own beside the embedding table, tied or not "
         "(mllm's QNN export leaves lm_head unquantised; specdec_policy.h)")
      .in(models::dtype_names());
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
  k.calibration_overlap = p.text("calibration_overlap") == "sequential" ? CalibrationOverlap::kSequential
                                                                         : CalibrationOverlap::kPipelined;
  k.calibration_slice_tokens = static_cast<int>(p.integer("calibration_slice_tokens"));
  k.draft_ms_per_step = p.real("draft_ms_per_step");
  k.calibration_bytes_per_node = p.real("calibration_bytes_per_node");
  k.npu_rpc_polling = p.boolean("npu_rpc_polling");
  k.embedding_dtype = models::parse_dtype(p.text("embedding_dtype"));
  k.npu_lm_head_dtype = models::parse_dtype(p.text("npu_lm_head_dtype"));
  k.lm_head_unit = parse_lm_head_unit(p.text("lm_head_unit"));
  k.prefill_lm_head_unit = parse_lm_head_unit(p.text("prefill_lm_head_unit"));
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
  // Busy time split per slot: attention (identical on both graphs) on the CPU, the rest (and any
  // wait for the block's own load) on the NPU.
  r.chunk_end_s.assign(p.chunks, 0.0);
  double previous_end = 0;
  for (const auto& c : s.computes) {
    const double attn = p.attention_s[c.block][c.chunk];
    r.slots.push_back({c.chunk, std::max(0.0, c.end_s - previous_end - attn), attn, c.end_s});
    r.cpu_s += attn;
    r.npu_s += r.slots.back().npu_s;
    r.chunk_end_s[c.chunk] = std::max(r.chunk_end_s[c.chunk], c.end_s);
    previous_end = c.end_s;
  }
  for (int c = 0; c < p.chunks; ++c)
    r.chunk_tokens.push_back(std::min<std::int64_t>(g.prefill_chunk, prompt_tokens - std::int64_t{c} * g.prefill_chunk));
  return r;
}

double pipeline_finish_s(const std::vector<double>& ready_s, const std::vector<double>& work_s) {
  if (ready_s.size() != work_s.size())
    throw InputError(fmt::format("pipeline: {} ready times for {} work items", ready_s.size(), work_s.size()));
  double finish = 0;
  for (std::size_t i = 0; i < ready_s.size(); ++i) finish = std::max(finish, ready_s[i]) + work_s[i];
  return finish;
}

double calibration_tail_on_idle_cpu_s(const PrefillResult& p, const std::vector<double>& chunk_work_s) {
  if (chunk_work_s.size() != p.chunk_end_s.size())
    throw InputError(fmt::format("calibration: {} chunk costs for {} chunks", chunk_work_s.size(), p.chunk_end_s.size()));
  double pending = 0;
  for (std::size_t i = 0; i < p.slots.size(); ++i) {
    pending = std::max(0.0, pending - p.slots[i].npu_s);  // CPU idle while the NPU computes
    const bool last_of_chunk = i + 1 == p.slots.size() || p.slots[i + 1].chunk != p.slots[i].chunk;
    if (last_of_chunk) pending += chunk_work_s[static_cast<std::size_t>(p.slots[i].chunk)];
  }
  return std::max(0.0, pending - p.switch_s);
}

// One implementation with the request pipeline's CoordGen stages (phase_replay.h).
sim::Task<void> replay_phases(devices::Device& device, const std::vector<Phase>& phases, ReplayResult& out) {
  sim::Simulator& sim = device.sim();
  const sim::Time t0 = sim.now();
  const double e0 = device.energy_j();
  PhaseReplay replay;
  replay.set(phases);
  co_await replay.prefill(device, 0);
  co_await replay.rest(device, 0);
  out.join_wait_s = replay.join_wait_s();
  out.latency_s = sim::to_seconds(sim.now() - t0);
  out.energy_j = device.energy_j() - e0;
}

void require_energy_values(const devices::DeviceProfile& phone, const std::string& who) {
  try {
    (void)phone.unit("cpu", who).single_thread_power();
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: device '{}': {}", who, phone.name, e.what()));
  }
}

double rpc_polling_power_w(const SpecDecEnv& env) {
  return std::max(0.0, env.cpu.single_thread_power() - env.cpu.idle_power_w);
}

double request_energy_j(const SpecDecEnv& env, double total_s, double npu_busy_s, double cpu_busy_s,
                        double cpu_single_thread_s) {
  if (cpu_single_thread_s < 0 || cpu_single_thread_s > cpu_busy_s)
    throw InputError(fmt::format("request energy: {} s of single-thread CPU work in {} s of CPU busy time",
                                 cpu_single_thread_s, cpu_busy_s));
  const double npu = env.npu.active_power_w * npu_busy_s + env.npu.idle_power_w * std::max(0.0, total_s - npu_busy_s);
  const double cpu = env.cpu.active_power_w * (cpu_busy_s - cpu_single_thread_s) +
                     env.cpu.single_thread_power() * cpu_single_thread_s +
                     env.cpu.idle_power_w * std::max(0.0, total_s - cpu_busy_s);
  return npu + cpu + env.base_power_w * total_s;
}

}  // namespace mobisim::policies::specdec
