#pragma once
// A Llama-architecture transformer in float32, readable the way llama2.c's run.c
// is: `Config` (dimensions), `Weights` (pointers into one owned buffer),
// `KVCache` + `RunState` (keys/values and scratch), and `forward`, built from
// rmsnorm, matmul, rope, attention and a SwiGLU FFN.
//
// One code path serves every caller: `forward` processes a chunk of n new
// tokens after the c positions already in the cache (n = 1 is a decode step).
// The hooks that policies need are options of that one path, so a reuse policy
// is checked against the very same arithmetic that plain inference runs:
//   - prefix K/V reuse: load a K/V prefix into the cache, then forward the rest;
//   - PerCache QKV reuse: `ForwardOptions::reuse` supplies Q/K/V of the first
//     L_pre chunk positions (projections skipped, RoPE counter offset by L_pre);
//   - capture of per-layer Q/K/V/hidden for a span (`ForwardOptions::capture`);
//   - tree/sequence verification (`ForwardOptions::parents`, see verify.h);
//   - attention over a per-head subset of cached positions (`kv_selector`).
// Every operator adds its FLOPs to a `FlopCounter` keyed by models::OpKind,
// counted by the convention documented in models/cost_model.h.
#include <Eigen/Core>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/cost_model.h"
#include "models/model_spec.h"

namespace mobisim::kernel {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXf;

// How RoPE pairs the dimensions of a head: llama2.c (and GGUF "llama") rotate
// adjacent pairs (2i, 2i+1); Hugging Face Llama/Qwen (GGUF "qwen2", NeoX) rotate
// (i, i + head_dim/2).
enum class RopeLayout { kAdjacentPairs, kHalfSplit };
const char* to_string(RopeLayout r);

struct Config {
  std::string arch = "llama";   // "llama" or "qwen2" (informational; behaviour is in the fields below)
  int dim = 0;                  // model width
  int hidden_dim = 0;           // SwiGLU intermediate size
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;             // usually dim / n_heads
  int vocab_size = 0;
  int seq_len = 0;              // maximum context (KV cache capacity)
  float rope_theta = 10000.0f;
  RopeLayout rope = RopeLayout::kAdjacentPairs;
  float norm_eps = 1e-5f;
  bool tied_classifier = true;  // classifier shares the token embedding table
  bool qkv_bias = false;        // Qwen2 adds biases to the Q, K and V projections

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  int kv_mul() const { return n_heads / n_kv_heads; }
  // Number of floats the weights occupy (embedding, layers, final norm, untied classifier).
  std::int64_t n_params() const;
  // The same dimensions as a cost-model spec, so FLOPs can be compared operator by operator.
  models::ModelSpec spec() const;
  // Throws InputError (naming `source`) when the dimensions are inconsistent.
  void validate(const std::string& source) const;
};

struct LayerWeights {
  const float* rms_att = nullptr;  // [dim]
  const float* wq = nullptr;       // [q_dim, dim]   (out x in, row-major)
  const float* wk = nullptr;       // [kv_dim, dim]
  const float* wv = nullptr;       // [kv_dim, dim]
  const float* bq = nullptr;       // [q_dim] or null
  const float* bk = nullptr;       // [kv_dim] or null
  const float* bv = nullptr;       // [kv_dim] or null
  const float* wo = nullptr;       // [dim, q_dim]
  const float* rms_ffn = nullptr;  // [dim]
  const float* w1 = nullptr;       // gate [hidden_dim, dim]
  const float* w2 = nullptr;       // down [dim, hidden_dim]
  const float* w3 = nullptr;       // up   [hidden_dim, dim]
};

struct Weights {
  const float* token_embedding = nullptr;  // [vocab, dim]
  std::vector<LayerWeights> layers;
  const float* rms_final = nullptr;        // [dim]
  const float* wcls = nullptr;             // [vocab, dim] (== token_embedding when tied)
};

// An immutable model: configuration plus weights that point into `storage`.
struct Model {
  Config config;
  Weights weights;
  std::shared_ptr<const std::vector<float>> storage;
  std::string source;  // file it was loaded from, or "synthetic(seed=...)"
};

// Lays out weights in llama2.c order inside `storage` (which must hold
// config.n_params() floats plus, when qkv_bias, the biases) and wires the pointers.
Model make_model(Config config, std::shared_ptr<const std::vector<float>> storage, std::string source);
// Floats the llama2.c-order layout needs, including Q/K/V biases when present.
std::int64_t layout_floats(const Config& c);

// FLOPs per operator kind, the same keys the cost model uses.
struct FlopCounter {
  std::array<double, models::kOpKinds> flops{};
  void add(models::OpKind k, double f) { flops[static_cast<int>(k)] += f; }
  double of(models::OpKind k) const { return flops[static_cast<int>(k)]; }
  double total() const;
  void reset() { flops.fill(0.0); }
};

// Keys (after RoPE) and values of every layer for positions [0, length).
struct KVCache {
  KVCache() = default;
  explicit KVCache(const Config& c);
  int n_layers() const { return static_cast<int>(k.size()); }
  int capacity() const { return k.empty() ? 0 : static_cast<int>(k[0].rows()); }
  std::vector<Mat> k, v;  // per layer [capacity, kv_dim]
  int length = 0;
  void truncate(int n);
};

// Per-layer Q (after RoPE), K (after RoPE), V and hidden state (layer input,
// before the attention norm) for a span of positions. PerCache stores Q/K/V
// (its "QKV cache"); KVPR stores hidden states to rebuild K/V from.
struct Capture {
  int begin = 0;  // absolute position of row 0
  std::vector<Mat> q, k, v, hidden;  // per layer [rows, *]
  int rows() const { return q.empty() ? 0 : static_cast<int>(q[0].rows()); }
  // PerCache's cache slicer: rows for absolute positions [from, to).
  Capture slice(int from, int to) const;
  // Concatenates spans in order (positions continue from this one's end).
  Capture concat(const Capture& next) const;
};

// Statistics of attention restricted to a subset of cached positions, per
// (query, layer, head): the share of the full softmax mass the subset carries
// and the relative L2 error of the head's output against full attention.
struct SubsetStats {
  std::vector<double> mass;       // captured attention mass, in [0, 1]
  std::vector<double> rel_error;  // ||o_subset - o_full|| / ||o_full||
  std::vector<int> layer, head, attended;
};

// Returns which cached positions (< n_cached) query head `head` of `layer`
// attends; `q` is its post-RoPE query [head_dim]. Positions inside the current
// chunk are always attended (they are not cached yet).
using KvSelector = std::function<std::vector<int>(int layer, int head, const float* q, int n_cached)>;

enum class Logits { kNone, kLast, kAll };

struct ForwardOptions {
  Logits logits = Logits::kLast;
  // PerCache: Q/K/V of chunk rows [0, reuse->rows()) taken from here instead of
  // projected (rows are chunk-relative; absolute positions must match).
  const Capture* reuse = nullptr;
  // With reuse, RoPE position of computed row i is c + i (the offset by L_pre
  // that PerCache appendix B.1 prescribes). false: c + i - L_pre, i.e. the
  // counter restarts at 0 for the computed part, which is the bug B.1 warns of.
  bool rope_offset = true;
  // Capture Q/K/V/hidden for chunk rows [capture_from, capture_to) (-1: to the end).
  Capture* capture = nullptr;
  int capture_from = 0;
  int capture_to = -1;
  // Tree attention: parents[i] is the chunk row that row i continues (-1: the
  // last cached position). Row i attends the cache and its ancestors; its RoPE
  // position is c + depth(i). Empty: a causal sequence.
  std::span<const int> parents;
  // Attention over a chosen subset of cached positions (with statistics).
  KvSelector kv_selector;
  SubsetStats* subset_stats = nullptr;
  FlopCounter* flops = nullptr;
};

// Scratch activations, reused across calls so that a decode step allocates nothing.
struct RunState {
  Mat x, xb, q, k, v, att_out, hb, hb2, logits, scores;
  std::vector<float> att;  // one row of attention scores
  std::vector<float> lanes;  // tree attention: per-(row, head) lanes of queries, scores and outputs
  Vec rope_cos, rope_sin;
};

// Runs `tokens` at positions [cache.length, cache.length + n) and appends their
// K/V to the cache. Returns a reference to logits inside `state`: one row
// (Logits::kLast), n rows (kAll) or none. Throws InputError for token ids out
// of range and when the cache would overflow.
const Mat& forward(const Model& m, KVCache& cache, RunState& state, std::span<const int> tokens,
                   const ForwardOptions& opt = {});

// llama2.c's `forward(token, pos)`: one token at position cache.length; returns vocab logits.
const float* forward_token(const Model& m, KVCache& cache, RunState& state, int token, FlopCounter* flops = nullptr);

int argmax(const float* v, int n);
// Greedy continuation of `prompt` for `steps` tokens (prompt included in the result).
std::vector<int> generate_greedy(const Model& m, std::span<const int> prompt, int steps);

// Copies K/V rows [0, p) of `from` into a fresh cache (prefix reuse).
KVCache cache_with_prefix(const Model& m, const KVCache& from, int p);

// ---------------------------------------------------------------------------
// KVPR / Cake: assemble K/V of positions [0, s) by recomputing some from stored
// hidden states and loading the rest from a store.
// ---------------------------------------------------------------------------
// Recompute K/V of absolute positions [from, to) of one layer from its stored
// hidden states (`hidden` rows are positions hidden_begin..). Counts norm, K/V
// projections (+bias) and RoPE on K.
void recompute_kv_rows(const Model& m, int layer, const Mat& hidden, int hidden_begin, int from, int to, Mat& k_out,
                       Mat& v_out, FlopCounter* flops);
// KVPR: positions [0, l) recomputed from `store.hidden`, [l, s) copied from
// `store.k/v`; s = store.rows(). `store` must start at position 0.
KVCache kvpr_assemble(const Model& m, const Capture& store, int l, FlopCounter* flops = nullptr);

// Cake's two-pointer order: blocks are computed from the front and loaded from
// the back until the pointers meet. Each stream takes its next block as soon as
// it is free (simulated with per-block compute and load times; ties go to
// compute). Returns, per block, true when computed.
std::vector<bool> cake_order(int n_blocks, double compute_time_per_block, double load_time_per_block);
// Assembles K/V following a per-block compute/load plan (blocks of `block` positions).
KVCache cake_assemble(const Model& m, const Capture& store, int block, const std::vector<bool>& computed,
                      FlopCounter* flops = nullptr);

// Q projection (+RoPE) of positions of one layer from stored hidden states (KVPR's Q-aware form).
void q_projection_rows(const Model& m, int layer, const Mat& hidden, int hidden_begin, int from, int to, Mat& q_out,
                       FlopCounter* flops);

}  // namespace mobisim::kernel
