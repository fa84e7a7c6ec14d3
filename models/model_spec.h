#pragma once
// Transformer model specifications (dimensions and dtypes), loaded from
// configs/models/*.yaml. The same spec drives the cost model (how much work a
// step is) and, for small models, the real kernel (doing the work).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/params.h"

namespace mobisim::models {

// int6: 6-bit integer weights (GGML's Q6_K, which mllm's quantiser writes for some projections of a
// Q4_K model); like int4 it computes on the int8 arithmetic.
enum class DType { kF32, kF16, kBF16, kF8, kInt8, kInt4, kInt6 };
double dtype_bytes(DType t);
DType parse_dtype(const std::string& name);  // "fp32", "fp16", "bf16", "fp8", "int8", "int4", "int6"
const char* to_string(DType t);
std::vector<std::string> dtype_names();

// The linear layers a block can have, by the names configs use for them: seven in a gated FFN block,
// six in a plain one (no ffn_gate; ModelSpec::linear_layers_per_block).
enum class Projection { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kProjections = 7;
const char* to_string(Projection p);  // "q_proj", "k_proj", "v_proj", "o_proj", "ffn_gate", "ffn_up", "ffn_down"
std::vector<std::string> projection_names();

// The FFN of a block. gated: act(x W_gate) * (x W_up), then W_down, three matrices d x ffn_hidden (SwiGLU of
// Llama/Qwen/ChatGLM2, GeGLU of Gemma). plain: act(x W_up), then W_down, two matrices (GELU of ChatGLM-6B v1,
// Phi-2, GPT-2, Falcon; ReLU of OPT).
enum class FfnKind { kGated, kPlain };
const char* to_string(FfnKind k);  // "gated", "plain"
std::vector<std::string> ffn_kind_names();

struct ModelSpec {
  std::string name;
  std::string family;         // llama, qwen2, mistral, ...
  int n_layers = 0;
  int hidden = 0;             // model width d
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn_hidden = 0;         // FFN intermediate size: the outputs of W_up (and of W_gate), the input of W_down
  FfnKind ffn = FfnKind::kGated;
  int vocab = 0;
  bool tied_embeddings = true;
  bool qkv_bias = false;      // Qwen: biases on the Q/K/V projections
  double rope_theta = 10000.0;
  DType weight_dtype = DType::kF16;
  DType activation_dtype = DType::kF16;
  DType kv_dtype = DType::kF16;
  // Groupwise weight quantisation (int4/int8 schemes such as ExecuTorch's 8da4w or GGUF's Q4_0): one
  // scale of `weight_scale_dtype` per `weight_group_size` weights of every linear layer. 0 counts the
  // dtype's bytes alone (the profiles fitted before this existed). With fp32 scales, int4 in groups
  // of 32 reads 0.625 bytes per weight (25% over the 0.5 of the weights alone), in groups of 128
  // 0.531 (6%): decode streams the scales with the weights.
  int weight_group_size = 0;
  DType weight_scale_dtype = DType::kF32;
  // The classifier (LM head, and the embedding it is tied to) when a scheme keeps it at another
  // precision (ExecuTorch's SpinQuant / QAT+LoRA exports: 8-bit output layer over 4-bit linears);
  // unset, it is stored like the linear layers.
  std::optional<DType> classifier_dtype;
  // Low-rank adapters kept beside quantised linears (Meta's QAT+LoRA Llama 3.2 exports: rank 16 on all
  // seven projections of every block, in floating point over int4 weights). Each adapted linear
  // [in -> out] adds A [in -> r] and B [r -> out]: r * (in + out) weights of `lora_dtype`, two more
  // matrix products per token, and two more kernel calls. 0: no adapters.
  int lora_rank = 0;
  DType lora_dtype = DType::kF32;
  // Projections a quantisation recipe stores at another dtype than `weight_dtype` (group scales as
  // configured), e.g. mllm's Q4_K files keep v_proj and down_proj in Q6_K: {v_proj: int6, ffn_down: int6}.
  // Such a projection reads its own bytes and runs on that dtype's kernels. Unset: `weight_dtype`.
  std::array<std::optional<DType>, kProjections> projection_dtypes{};

  int q_dim() const { return n_heads * head_dim; }
  // Whether a block has this linear layer (a plain FFN has no gate).
  bool has_projection(Projection p) const { return p != Projection::kGate || ffn == FfnKind::kGated; }
  // The linear layers of one block: Wq, Wk, Wv, Wo and the FFN's matrices (7 gated, 6 plain).
  int linear_layers_per_block() const { return 4 + ffn_matrices(); }
  // The FFN's matrices d x ffn_hidden: up and down, and the gate when gated.
  int ffn_matrices() const { return ffn == FfnKind::kGated ? 3 : 2; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // Parameters of one transformer block (projections, FFN matrices, two norms, QKV biases).
  std::int64_t params_per_layer() const;
  // Embedding table + (untied) classifier + final norm.
  std::int64_t params_outside_layers() const;
  std::int64_t total_params() const;
  // Adapter weights of one block (0 without adapters): r * (in + out) over the block's linear layers.
  std::int64_t lora_params_per_layer() const;
  double lora_bytes_per_layer() const { return static_cast<double>(lora_params_per_layer()) * dtype_bytes(lora_dtype); }
  // Bytes per weight of a linear layer inside the blocks, group scales included.
  double linear_weight_bytes() const;
  // The same for one projection (its recipe dtype when it has one), and the dtype its kernels run at
  // when that differs from the pass's weights (unset: the pass's).
  double projection_weight_bytes(Projection p) const;
  std::optional<DType> projection_dtype(Projection p) const { return projection_dtypes[static_cast<int>(p)]; }
  // Bytes per weight of the classifier (and of the embedding table when tied).
  double classifier_weight_bytes() const;
  // Every weight at its stored precision (blocks, adapters, embedding table, classifier).
  double weight_bytes() const;
  // K and V of one token across all layers.
  double kv_bytes_per_token(DType t) const { return 2.0 * n_layers * kv_dim() * dtype_bytes(t); }
  double kv_bytes_per_token() const { return kv_bytes_per_token(kv_dtype); }
  // Q, K and V of one token across all layers (what PerCache's knowledge bank stores).
  double qkv_bytes_per_token(DType t) const {
    return static_cast<double>(n_layers) * (q_dim() + 2.0 * kv_dim()) * dtype_bytes(t);
  }
  // Hidden state (layer input) of one token across all layers (what KVPR transfers to recompute).
  double hidden_bytes_per_token(DType t) const { return static_cast<double>(n_layers) * hidden * dtype_bytes(t); }

  // Every field with its effective value (base expanded, defaults filled), stored with results.
  YAML::Node resolved;

  static ParamSchema schema();
  static ModelSpec from_params(const Params& p);
};

// Loads a built-in profile by name ("llama-3.2-3b") or a YAML file by path.
ModelSpec load_model_spec(const std::string& name_or_path);
// Loads from a YAML node: a name (string) or an inline mapping.
ModelSpec load_model_spec(const YAML::Node& node, const ConfigSource& source);
std::vector<std::string> builtin_model_names();

}  // namespace mobisim::models
