#include "models/cost_model.h"

#include <algorithm>

#include "sim/error.h"

namespace mobisim::models {

const char* to_string(OpKind k) {
  static constexpr const char* kNames[] = {
      "embed",  "attn_norm", "q_proj",  "k_proj",   "v_proj",  "rope",     "attn_score", "softmax",    "attn_context",
      "o_proj", "residual",  "ffn_norm", "ffn_gate", "ffn_up", "ffn_act", "ffn_down",   "final_norm", "lm_head",
      "lora"};
  static_assert(std::size(kNames) == static_cast<std::size_t>(OpKind::kCount));
  return kNames[static_cast<int>(k)];
}

double Work::flops() const {
  double s = 0;
  for (const auto& o : ops) s += o.flops;
  return s;
}
double Work::bytes() const {
  double s = 0;
  for (const auto& o : ops) s += o.bytes();
  return s;
}
double Work::weight_bytes() const {
  double s = 0;
  for (const auto& o : ops) s += o.weight_bytes;
  return s;
}
double Work::kv_read_bytes() const {
  double s = 0;
  for (const auto& o : ops) s += o.kv_read_bytes;
  return s;
}
double Work::flops_of(OpKind k) const {
  double s = 0;
  for (const auto& o : ops)
    if (o.kind == k) s += o.flops;
  return s;
}

Work& Work::operator+=(const Work& other) {
  ops.insert(ops.end(), other.ops.begin(), other.ops.end());
  return *this;
}

Work Work::scaled(double fraction) const {
  Work w = *this;
  for (auto& o : w.ops) {
    o.flops *= fraction;
    o.weight_bytes *= fraction;
    o.act_bytes *= fraction;
    o.kv_read_bytes *= fraction;
    o.kv_write_bytes *= fraction;
  }
  return w;
}

std::int64_t CostModel::causal_pairs(std::int64_t n_new, std::int64_t n_cached) {
  return n_new * n_cached + n_new * (n_new + 1) / 2;
}

// Adds the per-layer operators (summed over all layers) of a pass in which
// `n_proj_qkv` positions get fresh Q/K/V projections, `n_queries` positions run
// attention and FFN, `kv_read_tokens` positions of K/V are read and `pairs`
// (query, key) pairs are attended per head.
void CostModel::add_layer_ops(Work& w, std::int64_t n_proj_qkv, std::int64_t n_queries,
                              std::int64_t kv_read_tokens, std::int64_t pairs) const {
  const ModelSpec& m = spec_;
  const double L = m.n_layers, d = m.hidden, q = m.q_dim(), kv = m.kv_dim(), f = m.ffn_hidden;
  const double hd = m.head_dim, H = m.n_heads;
  const double wb = m.linear_weight_bytes(), ab = dtype_bytes(m.activation_dtype), kb = dtype_bytes(m.kv_dtype);
  const double np = static_cast<double>(n_proj_qkv), nq = static_cast<double>(n_queries);
  const double pr = static_cast<double>(pairs);
  const int layers = m.n_layers;
  auto add = [&](OpKind k, double flops, double weights, double act, double kv_read = 0, double kv_write = 0) {
    w.ops.push_back(Op{k, L * flops, L * weights, L * act, L * kv_read, L * kv_write, layers, n_queries, std::nullopt});
  };
  // A projection: `params` weights at its recipe's bytes, on its recipe's kernels (models/model_spec.h).
  auto linear = [&](OpKind k, Projection p, double flops, double params, double act, double kv_write = 0) {
    w.ops.push_back(Op{k, L * flops, L * (params * m.projection_weight_bytes(p)), L * act, 0, L * kv_write, layers,
                       n_queries, m.projection_dtype(p)});
  };
  const double bias = m.qkv_bias ? 1.0 : 0.0;

  // The attention norm only feeds the Q/K/V projections: positions whose Q/K/V are reused
  // (PerCache crops them from the layer input, appendix B.1) skip it too.
  add(OpKind::kAttnNorm, 4 * np * d, d * wb, 2 * np * d * ab);
  if (np > 0) {
    linear(OpKind::kQProj, Projection::kQ, 2 * np * d * q + bias * np * q, d * q + bias * q, np * (d + q) * ab);
    linear(OpKind::kKProj, Projection::kK, 2 * np * d * kv + bias * np * kv, d * kv + bias * kv, np * d * ab, np * kv * kb);
    linear(OpKind::kVProj, Projection::kV, 2 * np * d * kv + bias * np * kv, d * kv + bias * kv, np * d * ab, np * kv * kb);
    add(OpKind::kRope, 3 * np * (q + kv), 0, 2 * np * (q + kv) * ab);
  }
  add(OpKind::kAttnScore, 2 * hd * H * pr, 0, nq * q * ab + H * pr * ab, kv_read_tokens * kv * kb);
  add(OpKind::kSoftmax, 5 * H * pr, 0, 2 * H * pr * ab);
  add(OpKind::kAttnContext, 2 * hd * H * pr, 0, H * pr * ab + nq * q * ab, kv_read_tokens * kv * kb);
  linear(OpKind::kOProj, Projection::kO, 2 * nq * q * d, q * d, nq * (q + d) * ab);
  add(OpKind::kResidual, 2 * nq * d, 0, 6 * nq * d * ab);
  add(OpKind::kFfnNorm, 4 * nq * d, d * wb, 2 * nq * d * ab);
  if (m.has_projection(Projection::kGate)) {
    linear(OpKind::kFfnGate, Projection::kGate, 2 * nq * d * f, d * f, nq * (d + f) * ab);
    linear(OpKind::kFfnUp, Projection::kUp, 2 * nq * d * f, d * f, nq * (d + f) * ab);
    add(OpKind::kFfnAct, 5 * nq * f, 0, 3 * nq * f * ab);  // silu(g) * u: reads g and u, writes one vector
  } else {
    linear(OpKind::kFfnUp, Projection::kUp, 2 * nq * d * f, d * f, nq * (d + f) * ab);
    add(OpKind::kFfnAct, 9 * nq * f, 0, 2 * nq * f * ab);  // GELU(u) (cost_model.h): reads u, writes one vector
  }
  linear(OpKind::kFfnDown, Projection::kDown, 2 * nq * f * d, f * d, nq * (f + d) * ab);
  add_lora_op(w, n_proj_qkv, n_proj_qkv, n_queries);
}

// The adapters beside the projections, for `n_q` positions through Wq, `n_kv` through Wk and Wv and
// `n_rest` through Wo and the FFN (a full pass: the projected positions, then every query). Each
// adapted linear [in -> out] is two products (x A, then (x A) B) and an add of the update into the
// linear's output, at the adapters' own precision.
void CostModel::add_lora_op(Work& w, std::int64_t n_q, std::int64_t n_kv, std::int64_t n_rest) const {
  const ModelSpec& m = spec_;
  if (m.lora_rank == 0) return;
  struct Adapted {
    double positions, in, out;
    int count;
  };
  const double d = m.hidden, q = m.q_dim(), kv = m.kv_dim(), f = m.ffn_hidden, r = m.lora_rank;
  const Adapted groups[] = {{static_cast<double>(n_q), d, q, 1},
                            {static_cast<double>(n_kv), d, kv, 2},
                            {static_cast<double>(n_rest), q, d, 1},
                            {static_cast<double>(n_rest), d, f, m.ffn_matrices() - 1},  // gate and up, or up
                            {static_cast<double>(n_rest), f, d, 1}};
  const double ab = dtype_bytes(m.activation_dtype), wb = dtype_bytes(m.lora_dtype);
  double flops = 0, weights = 0, act = 0;
  int calls = 0;
  for (const Adapted& g : groups) {
    if (g.positions <= 0) continue;
    flops += g.count * g.positions * (2 * r * (g.in + g.out) + g.out);
    weights += g.count * r * (g.in + g.out) * wb;
    act += g.count * g.positions * (g.in + 2 * r + 2 * g.out) * ab;  // x; x A out and back in; update, sum
    calls += 2 * g.count;
  }
  if (calls == 0) return;
  const double L = m.n_layers;
  const std::int64_t tokens = std::max({n_q, n_kv, n_rest});
  w.ops.push_back(Op{OpKind::kLora, L * flops, L * weights, L * act, 0, 0, m.n_layers * calls, tokens, m.lora_dtype});
}

// The operators before and after the layers: the embedding gather of the `n_tokens` new positions,
// then the final norm and LM head of the `logit_tokens` positions whose logits are needed.
static void add_embed_op(Work& w, const ModelSpec& m, std::int64_t n_tokens) {
  const double d = m.hidden;
  const double wb = m.tied_embeddings ? m.classifier_weight_bytes() : m.linear_weight_bytes();
  const double ab = dtype_bytes(m.activation_dtype);
  const double n = static_cast<double>(n_tokens);
  // Embedding rows are gathered, not streamed: only the rows used are read.
  w.ops.push_back(Op{OpKind::kEmbed, 0, n * d * wb, n * d * ab, 0, 0, 1, n_tokens, std::nullopt});
}

static void add_logit_ops(Work& w, const ModelSpec& m, std::int64_t logit_tokens) {
  const double d = m.hidden, V = m.vocab;
  const double wb = m.linear_weight_bytes(), head_wb = m.classifier_weight_bytes(), ab = dtype_bytes(m.activation_dtype);
  const double t = static_cast<double>(logit_tokens);
  if (logit_tokens > 0) {
    w.ops.push_back(Op{OpKind::kFinalNorm, 4 * t * d, d * wb, 2 * t * d * ab, 0, 0, 1, logit_tokens, std::nullopt});
    w.ops.push_back(Op{OpKind::kLmHead, 2 * t * d * V, d * V * head_wb, t * (d + V) * ab, 0, 0, 1, logit_tokens, std::nullopt});
    w.ops.back().stored_dtype = m.classifier_dtype;
  }
}

// At most: embedding, 15 layer operators (14 with a plain FFN), the adapters, final norm and LM head.
static constexpr std::size_t kMaxPassOps = 19;

void CostModel::prefill(const PrefillShape& s, Work& w) const {
  if (s.n_new < 0 || s.n_cached < 0 || s.n_reused_qkv < 0 || s.n_reused_qkv > s.n_new || s.logit_tokens < 0 ||
      s.logit_tokens > s.n_new)
    throw Error("internal: invalid prefill shape");
  w.ops.clear();
  if (s.n_new == 0) return;
  w.ops.reserve(kMaxPassOps);
  add_embed_op(w, spec_, s.n_new);
  add_layer_ops(w, s.n_new - s.n_reused_qkv, s.n_new, s.n_cached + s.n_new, causal_pairs(s.n_new, s.n_cached));
  add_logit_ops(w, spec_, s.logit_tokens);
}

Work CostModel::prefill(const PrefillShape& s) const {
  Work w;
  prefill(s, w);
  return w;
}

Work CostModel::verify(std::int64_t d, std::int64_t context, std::int64_t attended_pairs_within_draft) const {
  if (d <= 0) return Work{};
  const std::int64_t within = attended_pairs_within_draft < 0 ? d * (d + 1) / 2 : attended_pairs_within_draft;
  Work w;
  w.ops.reserve(kMaxPassOps);
  add_embed_op(w, spec_, d);
  add_layer_ops(w, d, d, context + d, d * context + within);
  add_logit_ops(w, spec_, d);
  return w;
}

Work CostModel::kv_recompute(std::int64_t l) const {
  Work w;
  if (l <= 0) return w;
  const ModelSpec& m = spec_;
  const double L = m.n_layers, d = m.hidden, kv = m.kv_dim(), n = static_cast<double>(l);
  const double wb = m.linear_weight_bytes(), ab = dtype_bytes(m.activation_dtype), kb = dtype_bytes(m.kv_dtype);
  const double bias = m.qkv_bias ? 1.0 : 0.0;
  auto add = [&](OpKind k, double flops, double weights, double act, double kv_write = 0) {
    w.ops.push_back(Op{k, L * flops, L * weights, L * act, 0, L * kv_write, m.n_layers, l, std::nullopt});
  };
  add(OpKind::kAttnNorm, 4 * n * d, d * wb, 2 * n * d * ab);
  for (const auto& [k, p] : {std::pair{OpKind::kKProj, Projection::kK}, std::pair{OpKind::kVProj, Projection::kV}})
    w.ops.push_back(Op{k, L * (2 * n * d * kv + bias * n * kv), L * ((d * kv + bias * kv) * m.projection_weight_bytes(p)),
                       L * (n * d * ab), 0, L * (n * kv * kb), m.n_layers, l, m.projection_dtype(p)});
  add(OpKind::kRope, 3 * n * kv, 0, 2 * n * kv * ab);
  add_lora_op(w, 0, l, 0);
  return w;
}

Work CostModel::q_projection(std::int64_t s) const {
  Work w;
  if (s <= 0) return w;
  const ModelSpec& m = spec_;
  const double L = m.n_layers, d = m.hidden, q = m.q_dim(), n = static_cast<double>(s);
  const double wb = m.linear_weight_bytes(), ab = dtype_bytes(m.activation_dtype);
  const double bias = m.qkv_bias ? 1.0 : 0.0;
  // Q is projected from the stored (un-normalised) layer inputs, so their RMSNorm runs first.
  w.ops.push_back(Op{OpKind::kAttnNorm, L * 4 * n * d, L * d * wb, L * 2 * n * d * ab, 0, 0, m.n_layers, s, std::nullopt});
  w.ops.push_back(Op{OpKind::kQProj, L * (2 * n * d * q + bias * n * q),
                     L * (d * q + bias * q) * m.projection_weight_bytes(Projection::kQ), L * n * (d + q) * ab, 0, 0,
                     m.n_layers, s, m.projection_dtype(Projection::kQ)});
  w.ops.push_back(Op{OpKind::kRope, L * 3 * n * q, 0, L * 2 * n * q * ab, 0, 0, m.n_layers, s, std::nullopt});
  add_lora_op(w, s, 0, 0);
  return w;
}

}  // namespace mobisim::models
