#include "policies/specdec/sd_policies.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/error.h"
#include "sim/registry.h"

namespace mobisim::policies::specdec {

namespace {

ParamSchema with_switch(ParamSchema s, SwitchStrategy def) {
  s.text("switch", std::string(to_string(def)), "how G_d replaces G_p (graph_schedule.h)").in(switch_strategy_names());
  return s;
}

std::int64_t output_tokens(const DecodeTrace& t) {
  std::int64_t n = 0;
  for (const auto& s : t.steps) n += 1 + s.accepted;
  return n;
}

// Parameters of one vocabulary table (the embedding table, or the LM head): vocab x hidden.
double vocab_table_params(const models::ModelSpec& s) { return static_cast<double>(s.vocab) * s.hidden; }

// The embedding table and the classifier as ModelSpec::weight_bytes() counts them (tied: one table,
// at the classifier's dtype; untied: the table at the linear layers' dtype, the head at the classifier's).
double spec_vocab_tables_bytes(const models::ModelSpec& s) {
  const double t = vocab_table_params(s);
  return s.tied_embeddings ? t * s.classifier_weight_bytes()
                           : t * (s.linear_weight_bytes() + s.classifier_weight_bytes());
}

// What the NPU model's runtime holds beyond the spec's count of its weights: mllm keeps the embedding
// table and the LM head as two CPU tensors at their own dtypes (PolicyKnobs), not one int8 table.
double npu_model_tables_extra_bytes(const SpecDecEnv& env, const PolicyKnobs& k) {
  const models::ModelSpec& s = env.cost.spec();
  return vocab_table_params(s) * (models::dtype_bytes(k.embedding_dtype) + models::dtype_bytes(k.npu_lm_head_dtype)) -
         spec_vocab_tables_bytes(s);
}

// The CPU's own copy of the weights, kept beside the NPU graphs' when decoding runs on the CPU: its
// blocks and final norm as the CPU spec stores them, its own embedding table (PolicyKnobs::
// embedding_dtype) and its own LM head at the CPU spec's classifier dtype.
double cpu_weights_bytes(const SpecDecEnv& env, const PolicyKnobs& k) {
  const models::ModelSpec& s = env.cpu_cost.spec();
  return s.weight_bytes() - spec_vocab_tables_bytes(s) +
         vocab_table_params(s) * (models::dtype_bytes(k.embedding_dtype) + s.classifier_weight_bytes());
}

// Decoding steps of a trace on the NPU's G_d graph (chunk c) or on the CPU.
void add_phase(RequestBreakdown& r, const char* unit, double seconds, const char* label) {
  if (seconds <= 0) return;
  (std::string(unit) == "npu" ? r.npu_busy_s : r.cpu_busy_s) += seconds;
  Phase ph;
  ph.unit = unit;
  ph.seconds = seconds;
  ph.label = label;
  r.phases.push_back(std::move(ph));
}

// Host code on the runtime's calling thread (sampling, retrieval drafting): one CPU core busy, at
// the CPU's single-thread power (specdec_policy.h, Energy).
Phase single_thread_cpu_phase(const SpecDecEnv& env, double seconds, const char* label) {
  Phase ph;
  ph.unit = "cpu";
  ph.seconds = seconds;
  ph.label = label;
  ph.power_w = env.cpu.single_thread_power();
  return ph;
}
void add_single_thread_phase(const SpecDecEnv& env, RequestBreakdown& r, double seconds, const char* label) {
  if (seconds <= 0) return;
  r.cpu_busy_s += seconds;
  r.cpu_single_thread_s += seconds;
  r.phases.push_back(single_thread_cpu_phase(env, seconds, label));
}

// One stretch of QNN graph executions on the NPU. With `polled` (PolicyKnobs::npu_rpc_polling), the
// runtime's calling thread spins on the CPU for its whole length (specdec_policy.h, Energy): the
// NPU phase draws the NPU's active power plus that core's (rpc_polling_power_w).
void add_npu_execution(const SpecDecEnv& env, bool polled, RequestBreakdown& r, double seconds, const char* label) {
  if (seconds <= 0) return;
  add_phase(r, "npu", seconds, label);
  if (!polled) return;
  r.npu_polled_s += seconds;
  r.phases.back().power_w = env.npu.active_power_w + rpc_polling_power_w(env);
}

// One verification of `rows` rows on the NPU's graphs of `chunk`: the graphs, the CPU attention beside
// them (footnote 2) and, with lm_head_unit cpu, the final norm and LM head on the CPU after the last
// graph (specdec_policy.h).
void add_npu_verification(const SpecDecEnv& env, const PolicyKnobs& k, std::int64_t rows, std::int64_t context,
                          int chunk, RequestBreakdown& r) {
  const auto [npu_s, cpu_s] = npu_verify_split(env, rows, context, chunk, k.lm_head_unit);
  const double head_s = npu_verify_head_seconds(env, rows, chunk, k.lm_head_unit, k.npu_lm_head_dtype);
  r.decode_s += npu_s + cpu_s + head_s;
  add_npu_execution(env, k.npu_rpc_polling, r, npu_s, "verify");
  add_phase(r, "cpu", cpu_s, "attention");
  add_phase(r, "cpu", head_s, "lm head");
}

void add_decode(const SpecDecEnv& env, const PolicyKnobs& k, DecodeUnit unit, int chunk, std::int64_t prompt_tokens,
                const DecodeTrace& trace, double draft_s_per_step, RequestBreakdown& r) {
  std::int64_t ctx = prompt_tokens;
  double accepted = 0, drafted = 0;
  for (const auto& s : trace.steps) {
    const std::int64_t rows = 1 + s.draft_tokens;
    drafted += s.draft_tokens;
    if (draft_s_per_step > 0) {
      add_single_thread_phase(env, r, draft_s_per_step, "draft");
      r.draft_s += draft_s_per_step;
    }
    if (unit == DecodeUnit::kNpu) {
      add_npu_verification(env, k, rows, ctx, chunk, r);
    } else {
      const double t = cpu_verify_seconds(env, rows, ctx);
      r.decode_s += t;
      add_phase(r, "cpu", t, "verify");
    }
    ctx += 1 + s.accepted;
    accepted += s.accepted;
  }
  r.steps = static_cast<std::int64_t>(trace.steps.size());
  r.mean_accepted = r.steps ? accepted / static_cast<double>(r.steps) : 0.0;
  r.mean_drafted = r.steps ? drafted / static_cast<double>(r.steps) : 0.0;
  r.output_tokens = output_tokens(trace);
}

// Chunked NPU prefill, slot by slot (NPU part, then its attention on the CPU), then the exposed
// graph switch. Returns the prefill with, per chunk, the index of its last phase (its logits exist
// once that phase has run).
PrefillResult add_prefill(const SpecDecEnv& env, std::int64_t prompt_tokens, const PolicyKnobs& k,
                          std::optional<SwitchStrategy> sw, RequestBreakdown& r, std::vector<int>* chunk_last_phase) {
  PrefillResult p = npu_prefill(env, prompt_tokens, k.graphs, sw);
  r.prefill_s = p.prefill_s;
  r.switch_s = p.switch_s;
  if (chunk_last_phase) chunk_last_phase->assign(p.chunk_end_s.size(), -1);
  for (const auto& slot : p.slots) {
    add_npu_execution(env, k.npu_rpc_polling, r, slot.npu_s, "prefill");
    add_phase(r, "cpu", slot.cpu_s, "prefill attention");
    if (chunk_last_phase && !r.phases.empty())
      (*chunk_last_phase)[static_cast<std::size_t>(slot.chunk)] = static_cast<int>(r.phases.size()) - 1;
  }
  // mllm's final norm and LM head after the last chunk's last graph, on the CPU (specdec_policy.h): the
  // norm of that chunk's rows, the head of the one row whose logits give the first token.
  if (k.prefill_lm_head_unit == LmHeadUnit::kCpu) {
    p.lm_head_s = cpu_lm_head_seconds(env, k.graphs.prefill_chunk, 1, k.npu_lm_head_dtype);
    p.prefill_s += p.lm_head_s;
    r.prefill_s = p.prefill_s;
    p.cpu_s += p.lm_head_s;
    add_phase(r, "cpu", p.lm_head_s, "prefill lm head");
  }
  add_phase(r, "npu", p.switch_s, "graph switch");
  // The graphs' weights at their peak, with the runtime's embedding table and LM head in place of
  // the spec's one table.
  r.peak_memory_bytes = p.peak_npu_bytes + npu_model_tables_extra_bytes(env, k);
  return p;
}

// In-context calibration's sampling (specdec_policy.h): pipelined behind the prefill's chunks as a
// background CPU stream, or one phase after prefill + switch. Returns whether the next main-chain
// phase must join the background stream.
bool add_calibration(const SpecDecEnv& env, const PolicyKnobs& k, std::int64_t prompt_tokens, const PrefillResult& p,
                     const std::vector<int>& chunk_last_phase, RequestBreakdown& r) {
  const double s_per_token = k.calibration_ms_per_token * 1e-3;
  r.calibration_cpu_s = s_per_token * static_cast<double>(prompt_tokens);
  if (k.calibration_overlap == CalibrationOverlap::kSequential || r.calibration_cpu_s <= 0) {
    r.calibration_s = r.calibration_cpu_s;
    add_single_thread_phase(env, r, r.calibration_s, "calibration");
    return false;
  }
  std::vector<double> work;
  for (std::size_t c = 0; c < p.chunk_tokens.size(); ++c) {
    const std::int64_t n = p.chunk_tokens[c];
    work.push_back(s_per_token * static_cast<double>(n));
    for (std::int64_t t = 0; t < n; t += k.calibration_slice_tokens) {
      const auto slice = std::min<std::int64_t>(k.calibration_slice_tokens, n - t);
      Phase ph = single_thread_cpu_phase(env, s_per_token * static_cast<double>(slice), "calibration");
      ph.background = true;
      ph.after = chunk_last_phase[c];
      ph.priority = 1;
      r.phases.push_back(std::move(ph));
    }
  }
  r.cpu_busy_s += r.calibration_cpu_s;
  r.cpu_single_thread_s += r.calibration_cpu_s;
  // Sampling in the CPU's idle time during prefill + switch; the rest is exposed (the device replay
  // measures it again, with the attention's waits for a running slice).
  r.calibration_s = calibration_tail_on_idle_cpu_s(p, work);
  return true;
}

void finish(const SpecDecEnv& env, std::int64_t prompt_tokens, RequestBreakdown& r) {
  r.energy_j =
      request_energy_j(env, r.total_s(), r.npu_busy_s, r.cpu_busy_s, r.cpu_single_thread_s) +
      r.npu_polled_s * rpc_polling_power_w(env);
  // K/V cache of the whole request, prompt and output (CPU-side attention holds it once).
  r.peak_memory_bytes +=
      env.cost.spec().kv_bytes_per_token() * static_cast<double>(prompt_tokens + r.output_tokens);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
PlainDecodePolicy::PlainDecodePolicy(const Params& p, std::string name, DecodeUnit unit, SwitchStrategy sw)
    : name_(std::move(name)), unit_(unit), switch_(sw), k_(knobs_from(p)) {
  if (unit_ == DecodeUnit::kNpu) switch_ = parse_switch_strategy(p.text("switch"));
}

ParamSchema PlainDecodePolicy::schema(SwitchStrategy default_switch) {
  return with_switch(knob_schema(), default_switch);
}

RequestBreakdown PlainDecodePolicy::run(const SpecDecEnv& env, std::int64_t prompt_tokens,
                                        const DecodeTrace& trace) const {
  RequestBreakdown r;
  if (unit_ == DecodeUnit::kNpu) {
    add_prefill(env, prompt_tokens, k_, switch_, r, nullptr);
    add_decode(env, k_, unit_, k_.graphs.decode_chunk, prompt_tokens, trace, 0.0, r);
  } else {
    add_prefill(env, prompt_tokens, k_, std::nullopt, r, nullptr);
    r.peak_memory_bytes += cpu_weights_bytes(env, k_);
    add_decode(env, k_, unit_, 1, prompt_tokens, trace, 0.0, r);
  }
  finish(env, prompt_tokens, r);
  return r;
}

// ---------------------------------------------------------------------------------------------
RetrievalSdPolicy::RetrievalSdPolicy(const Params& p, std::string name, DecodeUnit unit)
    : name_(std::move(name)), unit_(unit), switch_(parse_switch_strategy(p.text("switch"))), k_(knobs_from(p)) {
  drafter_.retriever = parse_retriever(p.text("retriever"));
  drafter_.budget = k_.draft_budget;
  drafter_.min_match = static_cast<int>(p.integer("min_match"));
  drafter_.sam_length = parse_sam_draft_length(p.text("sam_draft_length"));
  drafter_.calibrate = p.boolean("calibrate");
  drafter_.reuse = p.boolean("reuse");
  drafter_.calibration.top_n = static_cast<int>(p.integer("calibration_top_n"));
  drafter_.calibration.max_depth = static_cast<int>(p.integer("calibration_depth"));
  drafter_.calibration.bytes_per_node = k_.calibration_bytes_per_node;
  drafter_.reuse_options.cumulative_threshold = static_cast<int>(p.integer("reuse_threshold"));
  if (unit_ == DecodeUnit::kNpu && k_.draft_budget + 1 > k_.graphs.decode_chunk)
    throw ConfigError(fmt::format("{}: draft_budget {} + the pending token exceeds the decode graph's chunk {}",
                                  p.source().where(p.yaml()), k_.draft_budget, k_.graphs.decode_chunk));
  drafter_.validate();
}

ParamSchema RetrievalSdPolicy::schema(const std::string& retriever, SwitchStrategy sw, bool coordgen) {
  ParamSchema s = with_switch(knob_schema(), sw);
  s.text("retriever", retriever, "pld (local context) or sam (history store + local context)").in({"pld", "sam"});
  s.integer("min_match", 1,
            "shortest context match (PLD n-gram / SAM suffix) a draft is taken from; weaker matches draft nothing")
      .at_least(1)
      .with_unit("tokens");
  s.text("sam_draft_length", std::string("budget"),
         "SAM draft length: budget (what follows the match, up to draft_budget) or mllm (mllm's CPU speculative "
         "decoding, Draft.hpp gen_draft: max(9, min(39, 4 x match length)) tokens, up to draft_budget; "
         "retrieval_drafter.h)")
      .in({"budget", "mllm"});
  s.boolean("calibrate", coordgen, "in-context distribution calibration (section 3.3)");
  s.boolean("reuse", coordgen, "draft reuse (section 3.4, eq. 3)");
  s.integer("calibration_top_n", 3, "next tokens sampled per context position").at_least(1);
  s.integer("calibration_depth", 4, "depth of the calibrated token tree").at_least(1);
  s.integer("reuse_threshold", 32, "cumulative draft length beyond which reused segments are dropped")
      .at_least(1)
      .with_unit("tokens");
  return s;
}

RequestBreakdown RetrievalSdPolicy::run(const SpecDecEnv& env, std::int64_t prompt_tokens,
                                        const DecodeTrace& trace) const {
  RequestBreakdown r;
  std::vector<int> chunk_last_phase;
  const PrefillResult p = add_prefill(env, prompt_tokens, k_,
                                      unit_ == DecodeUnit::kNpu ? std::optional(switch_) : std::nullopt, r,
                                      &chunk_last_phase);
  if (unit_ == DecodeUnit::kCpu) r.peak_memory_bytes += cpu_weights_bytes(env, k_);
  bool join = false;
  if (drafter_.calibrate) {
    join = add_calibration(env, k_, prompt_tokens, p, chunk_last_phase, r);
    // Calibrated tree: at most top_n^depth nodes per context position, bounded by max_nodes.
    const double per_pos = std::pow(drafter_.calibration.top_n, drafter_.calibration.max_depth);
    r.peak_memory_bytes += std::min<double>(drafter_.calibration.max_nodes, per_pos * prompt_tokens) *
                           drafter_.calibration.bytes_per_node;
  }
  const std::size_t first_decode_phase = r.phases.size();
  add_decode(env, k_, unit_, k_.graphs.decode_chunk, prompt_tokens, trace, k_.draft_ms_per_step * 1e-3, r);
  // Drafting needs the calibrated tree: the first decoding step waits for the sampling.
  if (join && first_decode_phase < r.phases.size()) r.phases[first_decode_phase].join = true;
  finish(env, prompt_tokens, r);
  return r;
}

// ---------------------------------------------------------------------------------------------
double eagle_drafter_bytes(const models::ModelSpec& target, const PolicyKnobs& k) {
  // EAGLE-2's drafter (SafeAILab/EAGLE eagle/model/cnets1.py, Model): one decoder layer, the fc that
  // fuses token embedding and feature ([2 hidden -> hidden] plus bias), both cast to the target's
  // dtype (ea_model.py), and its own embedding table loaded from the target's; it drafts through the
  // target's LM head (no copy of its own).
  const double fc_params = 2.0 * target.hidden * target.hidden + target.hidden;
  return (static_cast<double>(target.params_per_layer()) + fc_params) * target.linear_weight_bytes() +
         target.lora_bytes_per_layer() + vocab_table_params(target) * models::dtype_bytes(k.embedding_dtype);
}

EaglePolicy::EaglePolicy(const Params& p, std::string name, DecodeUnit unit)
    : name_(std::move(name)), unit_(unit), k_(knobs_from(p)) {
  tokens_per_step_ = p.real("tokens_per_step");
  draft_depth_ = static_cast<int>(p.integer("draft_depth"));
  draft_topk_ = static_cast<int>(p.integer("draft_topk"));
}

ParamSchema EaglePolicy::schema() {
  ParamSchema s = with_switch(knob_schema(), SwitchStrategy::kSynchronous);
  s.real("tokens_per_step", 5.5, "tokens per verification (EAGLE-2's reported maximum acceptance)").at_least(1);
  s.integer("draft_depth", 6, "draft-model forward passes per step (tree depth)").at_least(1);
  s.integer("draft_topk", 10, "tokens expanded per draft-model pass").at_least(1);
  return s;
}

RequestBreakdown EaglePolicy::run(const SpecDecEnv& env, std::int64_t prompt_tokens, const DecodeTrace& trace) const {
  RequestBreakdown r;
  // The drafter runs with the target's weights on the unit that decodes.
  const models::CostModel& target = unit_ == DecodeUnit::kNpu ? env.cost : env.cpu_cost;
  const auto& spec = target.spec();
  if (unit_ == DecodeUnit::kNpu) {
    add_prefill(env, prompt_tokens, k_, parse_switch_strategy("synchronous"), r, nullptr);
  } else {
    add_prefill(env, prompt_tokens, k_, std::nullopt, r, nullptr);
    r.peak_memory_bytes += cpu_weights_bytes(env, k_);
  }
  const std::int64_t n = output_tokens(trace);
  const auto steps = static_cast<std::int64_t>(std::ceil(static_cast<double>(n) / tokens_per_step_));
  // One step: draft_depth passes of (one layer + LM head) over draft_topk tokens, then verification
  // of draft_budget tokens on the target.
  const models::Work full = target.verify(draft_topk_, prompt_tokens);
  models::Work draft_pass;
  for (const auto& op : full.ops) {
    models::Op o = op;
    const bool head = op.kind == models::OpKind::kLmHead || op.kind == models::OpKind::kFinalNorm ||
                      op.kind == models::OpKind::kEmbed;
    if (!head) {
      const double f = 1.0 / spec.n_layers;
      o.flops *= f, o.weight_bytes *= f, o.act_bytes *= f, o.kv_read_bytes *= f, o.kv_write_bytes *= f;
    }
    draft_pass.ops.push_back(o);
  }
  std::int64_t ctx = prompt_tokens;
  for (std::int64_t i = 0; i < steps; ++i) {
    double draft = 0;
    if (unit_ == DecodeUnit::kNpu) {
      // Each pass: the drafter's layer on the NPU graph, then (lm_head_unit cpu) the target's LM head of
      // its draft_topk rows on the CPU, as a verification's (specdec_policy.h).
      const double draft_npu =
          draft_depth_ * env.npu.run_seconds(draft_topk_, k_.graphs.decode_chunk,
                                             npu_graph_part(draft_pass, k_.lm_head_unit), spec.weight_dtype);
      const double draft_head =
          draft_depth_ * npu_verify_head_seconds(env, draft_topk_, k_.graphs.decode_chunk, k_.lm_head_unit,
                                                 k_.npu_lm_head_dtype);
      draft = draft_npu + draft_head;
      add_npu_execution(env, k_.npu_rpc_polling, r, draft_npu, "draft model");
      add_phase(r, "cpu", draft_head, "draft lm head");
      add_npu_verification(env, k_, 1 + k_.draft_budget, ctx, k_.graphs.decode_chunk, r);
    } else {
      draft = draft_depth_ * env.cpu.seconds(draft_pass, spec.weight_dtype);
      add_phase(r, "cpu", draft, "draft model");
      const double v = cpu_verify_seconds(env, 1 + k_.draft_budget, ctx);
      r.decode_s += v;
      add_phase(r, "cpu", v, "verify");
    }
    r.draft_s += draft;
    ctx += static_cast<std::int64_t>(tokens_per_step_);
  }
  r.steps = steps;
  r.output_tokens = n;
  r.mean_accepted = tokens_per_step_ - 1.0;
  r.mean_drafted = k_.draft_budget;
  r.peak_memory_bytes += eagle_drafter_bytes(spec, k_);
  finish(env, prompt_tokens, r);
  return r;
}

// ---------------------------------------------------------------------------------------------
#define MOBISIM_SPECDEC_PLAIN(Cls, regname, unit, sw, doc)                                     \
  class Cls : public PlainDecodePolicy {                                                        \
   public:                                                                                      \
    explicit Cls(const Params& p) : PlainDecodePolicy(p, regname, unit, sw) {}                  \
    static ParamSchema schema() { return PlainDecodePolicy::schema(sw); }                       \
  };                                                                                            \
  MOBISIM_REGISTER(SpecDecPolicy, Cls, regname, doc)

#define MOBISIM_SPECDEC_RSD(Cls, regname, unit, retr, sw, coord, doc)                           \
  class Cls : public RetrievalSdPolicy {                                                        \
   public:                                                                                      \
    explicit Cls(const Params& p) : RetrievalSdPolicy(p, regname, unit) {}                      \
    static ParamSchema schema() { return RetrievalSdPolicy::schema(retr, sw, coord); }          \
  };                                                                                            \
  MOBISIM_REGISTER(SpecDecPolicy, Cls, regname, doc)

#define MOBISIM_SPECDEC_EAGLE(Cls, regname, unit, doc)                                          \
  class Cls : public EaglePolicy {                                                              \
   public:                                                                                      \
    explicit Cls(const Params& p) : EaglePolicy(p, regname, unit) {}                            \
    static ParamSchema schema() { return EaglePolicy::schema(); }                               \
  };                                                                                            \
  MOBISIM_REGISTER(SpecDecPolicy, Cls, regname, doc)

MOBISIM_SPECDEC_PLAIN(NpuVanilla, "npu_vanilla", DecodeUnit::kNpu, SwitchStrategy::kSynchronous,
                      "NPU prefill on G_p, synchronous switch to G_d, token-by-token NPU decode (CoordGen 4.1 (1)).")
MOBISIM_SPECDEC_PLAIN(NpuGraph, "npu_graph", DecodeUnit::kNpu, SwitchStrategy::kProgressive,
                      "+G: NPU vanilla with progressive graph scheduling (Table 3).")
MOBISIM_SPECDEC_PLAIN(CpuVanilla, "cpu_vanilla", DecodeUnit::kCpu, SwitchStrategy::kSynchronous,
                      "NPU prefill, CPU decode with separate CPU weights (CoordGen 4.1 (2)).")
MOBISIM_SPECDEC_RSD(NpuSam, "npu_sam", DecodeUnit::kNpu, "sam", SwitchStrategy::kSynchronous, false,
                    "+SD: SAM drafting (history + local context) verified on the NPU (4.1 (3)).")
MOBISIM_SPECDEC_RSD(CpuSam, "cpu_sam", DecodeUnit::kCpu, "sam", SwitchStrategy::kSynchronous, false,
                    "SAM drafting verified on the CPU after NPU prefill (4.1 (4)).")
MOBISIM_SPECDEC_RSD(NpuPld, "npu_pld", DecodeUnit::kNpu, "pld", SwitchStrategy::kSynchronous, false,
                    "Prompt-lookup drafting (local context only) verified on the NPU.")
MOBISIM_SPECDEC_RSD(NpuSamGraph, "npu_sam_graph", DecodeUnit::kNpu, "sam", SwitchStrategy::kProgressive, false,
                    "+G+SD: SAM on the NPU with progressive graph scheduling (Table 3).")
MOBISIM_SPECDEC_RSD(CoordGenPolicy, "coordgen", DecodeUnit::kNpu, "sam", SwitchStrategy::kProgressive, true,
                    "CoordGen: progressive graph scheduling + SAM + in-context calibration + draft reuse.")
MOBISIM_SPECDEC_RSD(PldOurs, "pld_ours", DecodeUnit::kNpu, "pld", SwitchStrategy::kSynchronous, true,
                    "Table 4's PLD+ours: prompt lookup + in-context calibration + draft reuse (on the NPU).")
MOBISIM_SPECDEC_RSD(SamOurs, "sam_ours", DecodeUnit::kNpu, "sam", SwitchStrategy::kSynchronous, true,
                    "Table 4's SAM+ours: SAM + in-context calibration + draft reuse (on the NPU, no +G).")
MOBISIM_SPECDEC_EAGLE(NpuEagle, "npu_eagle", DecodeUnit::kNpu,
                      "EAGLE-2 simulated on the NPU: 1-layer drafter with its own embedding table, 5.5 tokens per step (4.1 (5)).")
MOBISIM_SPECDEC_EAGLE(CpuEagle, "cpu_eagle", DecodeUnit::kCpu,
                      "EAGLE-2 simulated on the CPU after NPU prefill (4.1 (6)).")

}  // namespace mobisim::policies::specdec
