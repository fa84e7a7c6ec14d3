#pragma once
// How much work a transformer step is: the operators of a prefill, a decode
// step, a draft verification or a KV recomputation, each with its FLOPs and the
// bytes it moves, so that a device can turn them into time and a policy can skip
// exactly the operators it saves.
//
// FLOP convention (the real kernel in models/kernel counts the same way; a test
// checks they agree operator by operator):
//   matmul x[m,k] @ W[k,n]          2*m*k*n        (+ m*n for a bias add)
//   RMSNorm of m vectors of dim d   4*m*d          (square, sum, scale, weight)
//   RoPE on m vectors of dim d      3*m*d          (6 per rotated pair)
//   attention scores                2*head_dim     per (query, head, key) pair attended
//   softmax (incl. 1/sqrt(hd))      5              per (query, head, key) pair
//   attention context               2*head_dim     per (query, head, key) pair
//   residual add                    m*d            (two per layer)
//   SwiGLU activation silu(g)*u     5*m*ffn        (gated FFN: neg, exp, add, divide for silu; the product)
//   GELU activation of a plain FFN  9*m*ffn        (tanh form 0.5x(1+tanh(c x(1+0.044715x^2))): 8 arithmetic,
//                                                   tanh counted as 1, like exp; ChatGLM-6B's gelu, Phi-2's
//                                                   gelu_new. ASSUMED for every plain FFN: erf-GELU or OPT's
//                                                   ReLU cost less, all < 0.5% of the FFN's 4*m*d*ffn at d >= 1024)
//   embedding lookup                0 FLOPs        (bytes only)
//   LM head                         2*t*d*vocab    for the t positions whose logits are needed
//   LoRA adapters (rank r)          2*m*r*(in+out) per adapted linear, + m*out to add the update
// Causal attention: query i of a chunk of n new tokens after c cached ones
// attends c+i+1 keys (itself included), n*c + n(n+1)/2 pairs in total.
//
// Bytes: weights are read once per call (weight-stationary over the tokens of a
// call), K/V of the attended context is read once per call and layer, new K/V
// written once, activations read and written once per operator.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/model_spec.h"

namespace mobisim::models {

enum class OpKind : int {
  kEmbed,
  kAttnNorm,
  kQProj,
  kKProj,
  kVProj,
  kRope,
  kAttnScore,
  kSoftmax,
  kAttnContext,
  kOProj,
  kResidual,
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnAct,
  kFfnDown,
  kFinalNorm,
  kLmHead,
  kLora,  // low-rank adapters of all linear layers of a block (ModelSpec::lora_rank > 0 only)
  kCount
};
const char* to_string(OpKind k);
inline constexpr int kOpKinds = static_cast<int>(OpKind::kCount);
// The attention operators proper (scores, softmax, weighted values): they touch no weights, and
// runtimes often run them on other kernels (or another unit) than the linear layers.
inline constexpr bool is_attention(OpKind k) {
  return k == OpKind::kAttnScore || k == OpKind::kSoftmax || k == OpKind::kAttnContext;
}

// One operator summed over all layers it runs in.
struct Op {
  OpKind kind = OpKind::kEmbed;
  double flops = 0;
  double weight_bytes = 0;
  double act_bytes = 0;
  double kv_read_bytes = 0;
  double kv_write_bytes = 0;
  int layers = 1;  // kernel calls summed here (for per-call overheads): one per layer instance, or more
                   // where an operator is several kernels per layer (LoRA: A and B of each linear)
  std::int64_t tokens = 0;  // query tokens processed per layer (1 = matrix-vector work)
  // The precision it computes at when that differs from the pass's weights (adapters in floating
  // point beside int4 linears); unset, the pass's.
  std::optional<DType> dtype;
  // The dtype its weights are stored at when a runtime picks another kernel by it (the LM head of a GGUF
  // file keeps its classifier at another type than the linears: llama.cpp's Q4_0 files hold a Q6_K
  // output tensor); unset: the pass's. Only the storage: the arithmetic stays the pass's (`dtype`).
  std::optional<DType> stored_dtype{};
  double bytes() const { return weight_bytes + act_bytes + kv_read_bytes + kv_write_bytes; }
};

// A list of operators; totals are sums over them.
struct Work {
  std::vector<Op> ops;
  double flops() const;
  double bytes() const;
  double weight_bytes() const;
  double kv_read_bytes() const;
  double flops_of(OpKind k) const;
  Work& operator+=(const Work& other);
  // The part of the work done by `layers` of the model's layers (for per-block scheduling).
  Work scaled(double fraction) const;
};

// What a prefill call computes. Positions are absolute: [0, n_cached) have K/V
// present (nothing is computed for them); [n_cached, n_cached + n_new) are new.
// Of the new positions, the first `n_reused_qkv` come with Q/K/V provided
// (PerCache's QKV reuse): their projections and RoPE are skipped, attention and
// FFN still run for them.
struct PrefillShape {
  std::int64_t n_new = 0;
  std::int64_t n_cached = 0;
  std::int64_t n_reused_qkv = 0;
  std::int64_t logit_tokens = 1;   // positions whose logits are computed
};

class CostModel {
 public:
  explicit CostModel(ModelSpec spec) : spec_(std::move(spec)) {}
  const ModelSpec& spec() const { return spec_; }

  Work prefill(const PrefillShape& shape) const;
  // The same into `out` (cleared first), reusing its storage: for per-token loops.
  void prefill(const PrefillShape& shape, Work& out) const;
  Work prefill(std::int64_t n_new, std::int64_t n_cached = 0) const { return prefill(PrefillShape{n_new, n_cached}); }
  // One decode step: a single new token attending `context` cached tokens plus itself.
  Work decode(std::int64_t context) const { return prefill(PrefillShape{1, context, 0, 1}); }
  // Verification of d draft tokens after `context` tokens in one pass. `attended_pairs_within_draft`
  // is the number of (draft query, draft key) pairs the tree mask allows (a chain: d(d+1)/2);
  // pass -1 for a chain. Logits are computed for all d positions.
  Work verify(std::int64_t d, std::int64_t context, std::int64_t attended_pairs_within_draft = -1) const;
  // K/V of `l` positions rebuilt from stored layer inputs (KVPR): norm + K/V projections + K RoPE.
  Work kv_recompute(std::int64_t l) const;
  // RMSNorm + Q projection + RoPE of `s` positions from stored layer inputs, needed when attention
  // must run over them (KVPR's Q-aware form). Combined with kv_recompute(l), the norm of [0, l) is
  // charged twice (4*l*d per layer: negligible next to the projections).
  Work q_projection(std::int64_t s) const;

  // Attention pairs of a causal chunk: n*c + n(n+1)/2.
  static std::int64_t causal_pairs(std::int64_t n_new, std::int64_t n_cached);

 private:
  void add_layer_ops(Work& w, std::int64_t n_proj_qkv, std::int64_t n_queries, std::int64_t kv_read_tokens,
                     std::int64_t pairs) const;
  void add_lora_op(Work& w, std::int64_t n_q, std::int64_t n_kv, std::int64_t n_rest) const;
  ModelSpec spec_;
};

}  // namespace mobisim::models
