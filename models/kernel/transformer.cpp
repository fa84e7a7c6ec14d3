#include "models/kernel/transformer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/error.h"
#include "sim/simd.h"

namespace mobisim::kernel {

using models::OpKind;
using MapW = Eigen::Map<const Mat>;
using MapV = Eigen::Map<const Eigen::RowVectorXf>;

const char* to_string(RopeLayout r) { return r == RopeLayout::kAdjacentPairs ? "adjacent-pairs" : "half-split"; }

std::int64_t Config::n_params() const {
  const std::int64_t d = dim, h = hidden_dim, L = n_layers, q = q_dim(), kv = kv_dim(), V = vocab_size;
  std::int64_t per_layer = 2 * d + q * d + 2 * kv * d + d * q + 3 * h * d;
  if (qkv_bias) per_layer += q + 2 * kv;
  return V * d + L * per_layer + d + (tied_classifier ? 0 : V * d);
}

std::int64_t layout_floats(const Config& c) { return c.n_params(); }

models::ModelSpec Config::spec() const {
  models::ModelSpec s;
  s.name = "kernel-" + arch;
  s.family = arch;
  s.n_layers = n_layers;
  s.hidden = dim;
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.head_dim = head_dim;
  s.ffn_hidden = hidden_dim;
  s.ffn = models::FfnKind::kGated;  // llama2.c and GGUF Llama checkpoints: SwiGLU (w1, w3, w2)
  s.vocab = vocab_size;
  s.tied_embeddings = tied_classifier;
  s.qkv_bias = qkv_bias;
  s.rope_theta = rope_theta;
  s.weight_dtype = models::DType::kF32;
  s.activation_dtype = models::DType::kF32;
  s.kv_dtype = models::DType::kF32;
  return s;
}

void Config::validate(const std::string& source) const {
  auto bad = [&](const std::string& what) {
    throw InputError(fmt::format("{}: invalid model configuration: {}", source, what));
  };
  // Bounds keep every size product far from int overflow and the buffers sane.
  constexpr int kMaxDim = 1 << 16, kMaxVocab = 1 << 20, kMaxLayers = 1024, kMaxSeq = 1 << 20;
  if (dim <= 0 || dim > kMaxDim) bad(fmt::format("dim={} (expected 1..{})", dim, kMaxDim));
  if (hidden_dim <= 0 || hidden_dim > 8 * kMaxDim) bad(fmt::format("hidden_dim={}", hidden_dim));
  if (n_layers <= 0 || n_layers > kMaxLayers) bad(fmt::format("n_layers={}", n_layers));
  if (n_heads <= 0 || n_heads > dim) bad(fmt::format("n_heads={} with dim={}", n_heads, dim));
  if (n_kv_heads <= 0 || n_kv_heads > n_heads || n_heads % n_kv_heads != 0)
    bad(fmt::format("n_kv_heads={} must divide n_heads={}", n_kv_heads, n_heads));
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > kMaxDim)
    bad(fmt::format("head_dim={} (must be positive and even)", head_dim));
  if (vocab_size <= 0 || vocab_size > kMaxVocab) bad(fmt::format("vocab_size={}", vocab_size));
  if (seq_len <= 0 || seq_len > kMaxSeq) bad(fmt::format("seq_len={}", seq_len));
  if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta)) bad("rope theta must be positive");
  if (!(norm_eps > 0.0f) || !std::isfinite(norm_eps)) bad("norm eps must be positive");
}

Model make_model(Config c, std::shared_ptr<const std::vector<float>> storage, std::string source) {
  c.validate(source);
  if (!storage || static_cast<std::int64_t>(storage->size()) < layout_floats(c))
    throw InputError(fmt::format("{}: weight buffer holds {} floats, the configuration needs {}", source,
                                 storage ? storage->size() : 0, layout_floats(c)));
  Model m;
  m.config = c;
  m.storage = std::move(storage);
  m.source = std::move(source);
  const float* p = m.storage->data();
  auto take = [&p](std::int64_t n) {
    const float* r = p;
    p += n;
    return r;
  };
  const std::int64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim(), L = c.n_layers;
  Weights& w = m.weights;
  w.layers.resize(L);
  // llama2.c order: each tensor kind for all layers, one after the other.
  w.token_embedding = take(c.vocab_size * d);
  for (auto& l : w.layers) l.rms_att = take(d);
  for (auto& l : w.layers) l.wq = take(q * d);
  for (auto& l : w.layers) l.wk = take(kv * d);
  for (auto& l : w.layers) l.wv = take(kv * d);
  for (auto& l : w.layers) l.wo = take(d * q);
  for (auto& l : w.layers) l.rms_ffn = take(d);
  for (auto& l : w.layers) l.w1 = take(h * d);
  for (auto& l : w.layers) l.w2 = take(d * h);
  for (auto& l : w.layers) l.w3 = take(h * d);
  w.rms_final = take(d);
  w.wcls = c.tied_classifier ? w.token_embedding : take(c.vocab_size * d);
  if (c.qkv_bias) {
    for (auto& l : w.layers) {
      l.bq = take(q);
      l.bk = take(kv);
      l.bv = take(kv);
    }
  }
  return m;
}

double FlopCounter::total() const {
  double t = 0;
  for (double f : flops) t += f;
  return t;
}

KVCache::KVCache(const Config& c) {
  k.assign(c.n_layers, Mat::Zero(c.seq_len, c.kv_dim()));
  v.assign(c.n_layers, Mat::Zero(c.seq_len, c.kv_dim()));
}

void KVCache::truncate(int n) { length = std::clamp(n, 0, length); }

Capture Capture::slice(int from, int to) const {
  if (from < begin || to < from || to > begin + rows())
    throw InputError(fmt::format("capture slice [{}, {}) outside captured span [{}, {})", from, to, begin,
                                 begin + rows()));
  Capture s;
  s.begin = from;
  auto cut = [&](const std::vector<Mat>& src, std::vector<Mat>& dst) {
    for (const auto& m : src) dst.push_back(m.middleRows(from - begin, to - from));
  };
  cut(q, s.q);
  cut(k, s.k);
  cut(v, s.v);
  cut(hidden, s.hidden);
  return s;
}

Capture Capture::concat(const Capture& next) const {
  if (rows() == 0) return next;
  Capture s;
  s.begin = begin;
  auto join = [](const std::vector<Mat>& a, const std::vector<Mat>& b, std::vector<Mat>& dst) {
    for (std::size_t l = 0; l < a.size() && l < b.size(); ++l) {
      Mat m(a[l].rows() + b[l].rows(), a[l].cols());
      m << a[l], b[l];
      dst.push_back(std::move(m));
    }
  };
  join(q, next.q, s.q);
  join(k, next.k, s.k);
  join(v, next.v, s.v);
  join(hidden, next.hidden, s.hidden);
  return s;
}

namespace {

void count(FlopCounter* f, OpKind k, double n) {
  if (f) f->add(k, n);
}

// out = rmsnorm(x) * w, row by row.
void rmsnorm(Mat& out, const Eigen::Ref<const Mat>& x, const float* w, float eps) {
  out.resize(x.rows(), x.cols());
  const MapV weight(w, x.cols());
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const float ss = x.row(r).squaredNorm() / static_cast<float>(x.cols()) + eps;
    out.row(r) = x.row(r).cwiseProduct(weight) * (1.0f / std::sqrt(ss));
  }
}

// y = x W^T (+ b), W stored [out, in] row-major as in llama2.c.
void matmul(Mat& y, const Eigen::Ref<const Mat>& x, const float* w, const float* b, int out) {
  const MapW W(w, out, x.cols());
  y.resize(x.rows(), out);
  y.noalias() = x * W.transpose();
  if (b) y.rowwise() += MapV(b, out);
}

// Rotates every head of `rows` (one row per position) in place.
void rope(Mat& rows, const std::vector<int>& pos, int head_dim, float theta, RopeLayout layout) {
  const int n_heads = static_cast<int>(rows.cols()) / head_dim;
  const int half = head_dim / 2;
  for (Eigen::Index r = 0; r < rows.rows(); ++r) {
    float* row = rows.row(r).data();
    for (int i = 0; i < half; ++i) {
      // Frequencies in float, as llama2.c computes them, so its outputs are reproduced bit for bit.
      const float freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
      const float val = static_cast<float>(pos[r]) * freq;
      const float fcr = std::cos(val), fci = std::sin(val);
      for (int h = 0; h < n_heads; ++h) {
        float* v = row + h * head_dim;
        const int a = layout == RopeLayout::kAdjacentPairs ? 2 * i : i;
        const int b = layout == RopeLayout::kAdjacentPairs ? 2 * i + 1 : i + half;
        const float v0 = v[a], v1 = v[b];
        v[a] = v0 * fcr - v1 * fci;
        v[b] = v0 * fci + v1 * fcr;
      }
    }
  }
}

// Softmax-weighted sum of V rows over n_keys cache slots (slot(j) gives the j-th)
// for one query head; leaves the probabilities in `att`.
template <class Slot>
void attend_slots(const float* q, const Mat& K, const Mat& V, int kvh, int head_dim, std::size_t n_keys, Slot slot,
                  std::vector<float>& att, float* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  att.resize(n_keys);
  float mx = -std::numeric_limits<float>::infinity();
  for (std::size_t j = 0; j < n_keys; ++j) {
    const float* k = K.row(slot(j)).data() + kvh * head_dim;
    float s = 0;
    for (int i = 0; i < head_dim; ++i) s += q[i] * k[i];
    att[j] = s * scale;
    mx = std::max(mx, att[j]);
  }
  float sum = 0;
  for (float& a : att) {
    a = std::exp(a - mx);
    sum += a;
  }
  const float inv = 1.0f / sum;
  std::fill(out, out + head_dim, 0.0f);
  for (std::size_t j = 0; j < n_keys; ++j) {
    const float* v = V.row(slot(j)).data() + kvh * head_dim;
    const float a = att[j] * inv;
    att[j] = a;
    for (int i = 0; i < head_dim; ++i) out[i] += a * v[i];
  }
}

void attend(const float* q, const Mat& K, const Mat& V, int kvh, int head_dim, const std::vector<int>& keys,
            std::vector<float>& att, float* out) {
  attend_slots(q, K, V, kvh, head_dim, keys.size(), [&keys](std::size_t j) { return keys[j]; }, att, out);
}

// Tree attention (draft verification) of every chunk row and query head: row r attends the c0
// cached positions, then its ancestors and itself (`chunk_keys[r]`, slots in root-to-row order).
// Per (row, head) this is attend_slots' arithmetic exactly: the same products, the same sums in
// the same order, the same exponentials, so the logits are bit for bit those of the per-head loop.
// What changes is the memory traffic: the cached keys and values, which every row and every query
// head of a KV head's group share, are read once for all of them, and the loops over these
// (row, head) "lanes" are contiguous, so they vectorise without reordering any lane's sums.
// On x86-64 it is also compiled for AVX2 and picked at load time where the CPU has it: one register
// holds a lane block instead of two, and the operations and their order are the same, so are the
// bits (AVX2 brings no FMA for the compiler to contract into; KernelOracles.TreeAttention* checks
// whichever version runs; sim/simd.h).
MOBISIM_AVX2_CLONE void tree_attention(const Mat& q, const Mat& K, const Mat& V, int c0,
                                       const std::vector<std::vector<int>>& chunk_keys, int n_heads, int kv_mul,
                                       int hd, std::vector<float>& buf, Mat& att_out) {
  constexpr int kBlock = 8;  // lanes per register block (two SSE vectors, one AVX2 vector)
  const int n = static_cast<int>(q.rows());
  const int lanes = n * kv_mul;  // lane = row * kv_mul + head within the group
  const int padded = (lanes + kBlock - 1) / kBlock * kBlock;  // padding lanes hold zero queries, never read back
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::size_t longest = 0;
  for (const auto& ck : chunk_keys) longest = std::max(longest, ck.size());
  const auto L = static_cast<std::size_t>(padded), H = static_cast<std::size_t>(hd);
  buf.assign(H * L * 2 + static_cast<std::size_t>(c0) * L + 3 * L + longest * L, 0.0f);
  float* qt = buf.data();                  // [hd][padded] queries
  float* w = qt + H * L;                   // [c0][padded] scores, then softmax weights
  float* o = w + static_cast<std::size_t>(c0) * L;  // [hd][padded] outputs
  float* mx = o + H * L;
  float* sum = mx + L;
  float* inv = sum + L;
  float* anc = inv + L;                    // [lanes][longest] scores of the row's own chunk keys
  for (int kvh = 0; kvh < n_heads / kv_mul; ++kvh) {
    for (int r = 0; r < n; ++r)
      for (int g = 0; g < kv_mul; ++g) {
        const float* qr = q.row(r).data() + (kvh * kv_mul + g) * hd;
        for (int i = 0; i < hd; ++i) qt[i * L + r * kv_mul + g] = qr[i];
      }
    // Scores against the cached keys: each lane's dot product runs over i in order from 0, in registers.
    for (int l0 = 0; l0 < padded; l0 += kBlock)
      for (int j = 0; j < c0; ++j) {
        const float* kj = K.row(j).data() + kvh * hd;
        float acc[kBlock] = {};
        for (int i = 0; i < hd; ++i) {
          const float kv = kj[i];
          const float* qi = qt + i * L + l0;
          for (int b = 0; b < kBlock; ++b) acc[b] += qi[b] * kv;
        }
        float* s = w + static_cast<std::size_t>(j) * L + l0;
        for (int b = 0; b < kBlock; ++b) s[b] = acc[b] * scale;
      }
    for (int l = 0; l < lanes; ++l) mx[l] = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < c0; ++j) {
      const float* s = w + static_cast<std::size_t>(j) * L;
      for (int l = 0; l < lanes; ++l) mx[l] = std::max(mx[l], s[l]);
    }
    // The row's own chunk keys come after the cached ones, as in attend_slots' key order.
    for (int l = 0; l < lanes; ++l) {
      const auto& ck = chunk_keys[static_cast<std::size_t>(l / kv_mul)];
      float* a = anc + static_cast<std::size_t>(l) * longest;
      for (std::size_t j = 0; j < ck.size(); ++j) {
        const float* kj = K.row(ck[j]).data() + kvh * hd;
        float s = 0;
        for (int i = 0; i < hd; ++i) s += qt[i * L + l] * kj[i];
        a[j] = s * scale;
        mx[l] = std::max(mx[l], a[j]);
      }
    }
    for (int l = 0; l < lanes; ++l) sum[l] = 0.0f;
    for (int j = 0; j < c0; ++j) {
      float* s = w + static_cast<std::size_t>(j) * L;
      for (int l = 0; l < lanes; ++l) {
        s[l] = std::exp(s[l] - mx[l]);
        sum[l] += s[l];
      }
    }
    for (int l = 0; l < lanes; ++l) {
      float* a = anc + static_cast<std::size_t>(l) * longest;
      for (std::size_t j = 0; j < chunk_keys[static_cast<std::size_t>(l / kv_mul)].size(); ++j) {
        a[j] = std::exp(a[j] - mx[l]);
        sum[l] += a[j];
      }
      inv[l] = 1.0f / sum[l];
    }
    for (int l = lanes; l < padded; ++l) inv[l] = 0.0f;
    for (int j = 0; j < c0; ++j) {
      float* p = w + static_cast<std::size_t>(j) * L;
      for (int l = 0; l < padded; ++l) p[l] *= inv[l];
    }
    // Weighted values: each lane accumulates over the cached keys in order, in registers.
    for (int l0 = 0; l0 < padded; l0 += kBlock)
      for (int i = 0; i < hd; ++i) {
        float acc[kBlock] = {};
        const float* vcol = V.data() + kvh * hd + i;
        const auto vstride = static_cast<std::size_t>(V.cols());
        for (int j = 0; j < c0; ++j) {
          const float vv = vcol[static_cast<std::size_t>(j) * vstride];
          const float* p = w + static_cast<std::size_t>(j) * L + l0;
          for (int b = 0; b < kBlock; ++b) acc[b] += p[b] * vv;
        }
        for (int b = 0; b < kBlock; ++b) o[i * L + l0 + b] = acc[b];
      }
    for (int l = 0; l < lanes; ++l) {
      const auto& ck = chunk_keys[static_cast<std::size_t>(l / kv_mul)];
      const float* a = anc + static_cast<std::size_t>(l) * longest;
      for (std::size_t j = 0; j < ck.size(); ++j) {
        const float* vj = V.row(ck[j]).data() + kvh * hd;
        const float p = a[j] * inv[l];
        for (int i = 0; i < hd; ++i) o[i * L + l] += p * vj[i];
      }
      float* out = att_out.row(l / kv_mul).data() + (kvh * kv_mul + l % kv_mul) * hd;
      for (int i = 0; i < hd; ++i) out[i] = o[i * L + l];
    }
  }
}

void check_tokens(const Model& m, std::span<const int> tokens) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= m.config.vocab_size)
      throw InputError(fmt::format("{}: token id {} at index {} is out of range [0, {})", m.source, tokens[i], i,
                                   m.config.vocab_size));
}

}  // namespace

const Mat& forward(const Model& m, KVCache& cache, RunState& s, std::span<const int> tokens,
                   const ForwardOptions& opt) {
  const Config& c = m.config;
  const Weights& w = m.weights;
  const int n = static_cast<int>(tokens.size());
  const int c0 = cache.length;
  FlopCounter* fl = opt.flops;
  check_tokens(m, tokens);
  if (cache.n_layers() != c.n_layers || cache.capacity() < c.seq_len)
    throw InputError(fmt::format("{}: KV cache was made for another model", m.source));
  if (c0 + n > c.seq_len)
    throw InputError(fmt::format("{}: {} cached + {} new positions exceed seq_len {}", m.source, c0, n, c.seq_len));
  const bool tree = !opt.parents.empty();
  if (tree && static_cast<int>(opt.parents.size()) != n)
    throw InputError(fmt::format("tree verification: {} parents for {} tokens", opt.parents.size(), n));
  const int n_reuse = opt.reuse ? opt.reuse->rows() : 0;
  if (opt.reuse) {
    if (n_reuse > n || opt.reuse->begin != c0 || static_cast<int>(opt.reuse->q.size()) != c.n_layers)
      throw InputError(fmt::format("QKV reuse: {} rows at position {} do not fit a chunk of {} at position {}",
                                   n_reuse, opt.reuse->begin, n, c0));
  }
  if (n == 0) {
    s.logits.resize(0, c.vocab_size);
    return s.logits;
  }

  // Positions: causal rows sit at c0 + i; tree rows at c0 + depth; PerCache's
  // computed rows continue after the reused ones only when the offset is applied.
  std::vector<int> pos(n), depth(n, 0);
  for (int i = 0; i < n; ++i) {
    if (tree) {
      const int p = opt.parents[i];
      if (p >= i || p < -1) throw InputError(fmt::format("tree verification: parent {} of node {} invalid", p, i));
      depth[i] = p < 0 ? 0 : depth[p] + 1;
      pos[i] = c0 + depth[i];
    } else {
      pos[i] = c0 + i;
    }
  }
  std::vector<int> rope_pos(pos.begin() + n_reuse, pos.end());
  if (opt.reuse && !opt.rope_offset)
    for (int& p : rope_pos) p -= n_reuse;

  const int cap_from = std::clamp(opt.capture_from, 0, n);
  const int cap_to = opt.capture_to < 0 ? n : std::clamp(opt.capture_to, cap_from, n);
  if (opt.capture) {
    *opt.capture = Capture{};
    opt.capture->begin = c0 + cap_from;
  }

  // Token embedding (no FLOPs: a table lookup).
  const MapW emb(w.token_embedding, c.vocab_size, c.dim);
  s.x.resize(n, c.dim);
  for (int i = 0; i < n; ++i) s.x.row(i) = emb.row(tokens[i]);
  count(fl, OpKind::kEmbed, 0);

  const int hd = c.head_dim, nc = n - n_reuse;
  std::vector<int> keys;
  keys.reserve(c0 + n);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    if (opt.capture) opt.capture->hidden.push_back(s.x.middleRows(cap_from, cap_to - cap_from));

    // Attention block: norm and projections only for rows whose Q/K/V are not reused.
    s.q.resize(n, c.q_dim());
    s.k.resize(n, c.kv_dim());
    s.v.resize(n, c.kv_dim());
    if (n_reuse > 0) {
      s.q.topRows(n_reuse) = opt.reuse->q[l];
      s.k.topRows(n_reuse) = opt.reuse->k[l];
      s.v.topRows(n_reuse) = opt.reuse->v[l];
    }
    if (nc > 0) {
      rmsnorm(s.xb, s.x.bottomRows(nc), lw.rms_att, c.norm_eps);
      count(fl, OpKind::kAttnNorm, 4.0 * nc * c.dim);
      Mat tmp;
      matmul(tmp, s.xb, lw.wq, lw.bq, c.q_dim());
      rope(tmp, rope_pos, hd, c.rope_theta, c.rope);
      s.q.bottomRows(nc) = tmp;
      matmul(tmp, s.xb, lw.wk, lw.bk, c.kv_dim());
      rope(tmp, rope_pos, hd, c.rope_theta, c.rope);
      s.k.bottomRows(nc) = tmp;
      matmul(tmp, s.xb, lw.wv, lw.bv, c.kv_dim());
      s.v.bottomRows(nc) = tmp;
      const double bias = c.qkv_bias ? 1.0 : 0.0;
      count(fl, OpKind::kQProj, 2.0 * nc * c.dim * c.q_dim() + bias * nc * c.q_dim());
      count(fl, OpKind::kKProj, 2.0 * nc * c.dim * c.kv_dim() + bias * nc * c.kv_dim());
      count(fl, OpKind::kVProj, 2.0 * nc * c.dim * c.kv_dim() + bias * nc * c.kv_dim());
      count(fl, OpKind::kRope, 3.0 * nc * (c.q_dim() + c.kv_dim()));
    }
    if (opt.capture) {
      opt.capture->q.push_back(s.q.middleRows(cap_from, cap_to - cap_from));
      opt.capture->k.push_back(s.k.middleRows(cap_from, cap_to - cap_from));
      opt.capture->v.push_back(s.v.middleRows(cap_from, cap_to - cap_from));
    }
    // New K/V join the cache (chunk row i in slot c0 + i) before anyone attends them.
    cache.k[l].middleRows(c0, n) = s.k;
    cache.v[l].middleRows(c0, n) = s.v;

    s.att_out.resize(n, c.q_dim());
    double pairs = 0;
    if (!tree && !opt.kv_selector) {
      // Plain causal attention as matrix products per head: scores of all rows
      // against keys [0, c0 + n), masked to [0, c0 + i] for row i.
      const int nk = c0 + n;
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      for (int h = 0; h < c.n_heads; ++h) {
        const int kvh = h / c.kv_mul();
        s.scores.noalias() = s.q.middleCols(h * hd, hd) * cache.k[l].block(0, kvh * hd, nk, hd).transpose();
        for (int i = 0; i < n; ++i) {
          auto r = s.scores.row(i);
          const int len = c0 + i + 1;
          r.head(len) *= scale;
          const float mx = r.head(len).maxCoeff();
          r.head(len) = (r.head(len).array() - mx).exp();
          r.head(len) /= r.head(len).sum();
          r.tail(nk - len).setZero();
        }
        s.att_out.middleCols(h * hd, hd).noalias() = s.scores * cache.v[l].block(0, kvh * hd, nk, hd);
      }
      pairs = static_cast<double>(c.n_heads) * (static_cast<double>(n) * c0 + n * (n + 1.0) / 2.0);
    }
    if (tree && !opt.kv_selector) {
      std::vector<std::vector<int>> chunk_keys(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) {
        auto& ck = chunk_keys[static_cast<std::size_t>(i)];
        for (int a = i; a >= 0; a = opt.parents[a]) ck.push_back(c0 + a);
        std::reverse(ck.begin(), ck.end());
        pairs += static_cast<double>(c.n_heads) * static_cast<double>(c0 + static_cast<int>(ck.size()));
      }
      tree_attention(s.q, cache.k[l], cache.v[l], c0, chunk_keys, c.n_heads, c.kv_mul(), hd, s.lanes, s.att_out);
    }
    for (int i = 0; i < n && opt.kv_selector; ++i) {
      // The chunk keys row i sees: itself and its ancestors (tree) or all earlier rows (sequence).
      std::vector<int> chunk_keys;
      if (tree) {
        for (int a = i; a >= 0; a = opt.parents[a]) chunk_keys.push_back(c0 + a);
        std::reverse(chunk_keys.begin(), chunk_keys.end());
      } else {
        for (int a = 0; a <= i; ++a) chunk_keys.push_back(c0 + a);
      }
      for (int h = 0; h < c.n_heads; ++h) {
        const float* q = s.q.row(i).data() + h * hd;
        float* out = s.att_out.row(i).data() + h * hd;
        const int kvh = h / c.kv_mul();
        keys.clear();
        if (opt.kv_selector && c0 > 0) {
          for (int p : opt.kv_selector(l, h, q, c0))
            if (p >= 0 && p < c0) keys.push_back(p);
          std::sort(keys.begin(), keys.end());
          keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        } else {
          for (int p = 0; p < c0; ++p) keys.push_back(p);
        }
        const std::size_t n_sel = keys.size();
        keys.insert(keys.end(), chunk_keys.begin(), chunk_keys.end());
        attend(q, cache.k[l], cache.v[l], kvh, hd, keys, s.att, out);
        pairs += static_cast<double>(keys.size());
        if (opt.kv_selector && opt.subset_stats && c0 > 0) {
          // Diagnostics against full attention (not part of the counted work).
          std::vector<int> all;
          for (int p = 0; p < c0; ++p) all.push_back(p);
          all.insert(all.end(), chunk_keys.begin(), chunk_keys.end());
          std::vector<float> full_att;
          std::vector<float> full(hd);
          attend(q, cache.k[l], cache.v[l], kvh, hd, all, full_att, full.data());
          double mass = 0;
          for (std::size_t j = 0; j < n_sel; ++j) mass += full_att[keys[j]];
          for (std::size_t j = static_cast<std::size_t>(c0); j < all.size(); ++j) mass += full_att[j];
          double err = 0, norm = 0;
          for (int d = 0; d < hd; ++d) {
            err += (out[d] - full[d]) * (out[d] - full[d]);
            norm += full[d] * full[d];
          }
          auto& st = *opt.subset_stats;
          st.mass.push_back(mass);
          st.rel_error.push_back(norm > 0 ? std::sqrt(err / norm) : std::sqrt(err));
          st.layer.push_back(l);
          st.head.push_back(h);
          st.attended.push_back(static_cast<int>(keys.size()));
        }
      }
    }
    count(fl, OpKind::kAttnScore, 2.0 * hd * pairs);
    count(fl, OpKind::kSoftmax, 5.0 * pairs);
    count(fl, OpKind::kAttnContext, 2.0 * hd * pairs);

    matmul(s.xb, s.att_out, lw.wo, nullptr, c.dim);
    count(fl, OpKind::kOProj, 2.0 * n * c.q_dim() * c.dim);
    s.x += s.xb;
    count(fl, OpKind::kResidual, 1.0 * n * c.dim);

    // SwiGLU FFN: w2(silu(w1 x) * w3 x).
    rmsnorm(s.xb, s.x, lw.rms_ffn, c.norm_eps);
    count(fl, OpKind::kFfnNorm, 4.0 * n * c.dim);
    matmul(s.hb, s.xb, lw.w1, nullptr, c.hidden_dim);
    matmul(s.hb2, s.xb, lw.w3, nullptr, c.hidden_dim);
    count(fl, OpKind::kFfnGate, 2.0 * n * c.dim * c.hidden_dim);
    count(fl, OpKind::kFfnUp, 2.0 * n * c.dim * c.hidden_dim);
    s.hb = s.hb.array() / (1.0f + (-s.hb.array()).exp()) * s.hb2.array();
    count(fl, OpKind::kFfnAct, 5.0 * n * c.hidden_dim);
    matmul(s.xb, s.hb, lw.w2, nullptr, c.dim);
    count(fl, OpKind::kFfnDown, 2.0 * n * c.hidden_dim * c.dim);
    s.x += s.xb;
    count(fl, OpKind::kResidual, 1.0 * n * c.dim);
  }
  cache.length = c0 + n;

  const int t = opt.logits == Logits::kAll ? n : opt.logits == Logits::kLast ? 1 : 0;
  if (t == 0) {
    s.logits.resize(0, c.vocab_size);
    return s.logits;
  }
  rmsnorm(s.xb, s.x.bottomRows(t), w.rms_final, c.norm_eps);
  count(fl, OpKind::kFinalNorm, 4.0 * t * c.dim);
  matmul(s.logits, s.xb, w.wcls, nullptr, c.vocab_size);
  count(fl, OpKind::kLmHead, 2.0 * t * c.dim * c.vocab_size);
  return s.logits;
}

const float* forward_token(const Model& m, KVCache& cache, RunState& state, int token, FlopCounter* flops) {
  ForwardOptions opt;
  opt.flops = flops;
  const int tok[1] = {token};
  return forward(m, cache, state, tok, opt).data();
}

int argmax(const float* v, int n) { return static_cast<int>(std::max_element(v, v + n) - v); }

std::vector<int> generate_greedy(const Model& m, std::span<const int> prompt, int steps) {
  std::vector<int> out(prompt.begin(), prompt.end());
  if (prompt.empty() || steps <= 0) return out;
  KVCache cache(m.config);
  RunState st;
  const Mat& lg = forward(m, cache, st, prompt);
  int next = argmax(lg.data(), m.config.vocab_size);
  for (int i = 0; i < steps; ++i) {
    out.push_back(next);
    if (i + 1 == steps || cache.length >= m.config.seq_len) break;
    next = argmax(forward_token(m, cache, st, next), m.config.vocab_size);
  }
  return out;
}

KVCache cache_with_prefix(const Model& m, const KVCache& from, int p) {
  if (p < 0 || p > from.length)
    throw InputError(fmt::format("prefix of {} positions requested from a cache holding {}", p, from.length));
  KVCache c(m.config);
  for (int l = 0; l < m.config.n_layers; ++l) {
    c.k[l].topRows(p) = from.k[l].topRows(p);
    c.v[l].topRows(p) = from.v[l].topRows(p);
  }
  c.length = p;
  return c;
}

void recompute_kv_rows(const Model& m, int layer, const Mat& hidden, int hidden_begin, int from, int to, Mat& k_out,
                       Mat& v_out, FlopCounter* fl) {
  const Config& c = m.config;
  const LayerWeights& lw = m.weights.layers.at(layer);
  const int n = to - from;
  if (n < 0 || from < hidden_begin || to > hidden_begin + hidden.rows())
    throw InputError(fmt::format("KV recompute of [{}, {}) outside stored hidden states [{}, {})", from, to,
                                 hidden_begin, hidden_begin + hidden.rows()));
  Mat xb;
  rmsnorm(xb, hidden.middleRows(from - hidden_begin, n), lw.rms_att, c.norm_eps);
  matmul(k_out, xb, lw.wk, lw.bk, c.kv_dim());
  matmul(v_out, xb, lw.wv, lw.bv, c.kv_dim());
  std::vector<int> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = from + i;
  rope(k_out, pos, c.head_dim, c.rope_theta, c.rope);
  const double bias = c.qkv_bias ? 1.0 : 0.0;
  count(fl, OpKind::kAttnNorm, 4.0 * n * c.dim);
  count(fl, OpKind::kKProj, 2.0 * n * c.dim * c.kv_dim() + bias * n * c.kv_dim());
  count(fl, OpKind::kVProj, 2.0 * n * c.dim * c.kv_dim() + bias * n * c.kv_dim());
  count(fl, OpKind::kRope, 3.0 * n * c.kv_dim());
}

void q_projection_rows(const Model& m, int layer, const Mat& hidden, int hidden_begin, int from, int to, Mat& q_out,
                       FlopCounter* fl) {
  const Config& c = m.config;
  const LayerWeights& lw = m.weights.layers.at(layer);
  const int n = to - from;
  if (n < 0 || from < hidden_begin || to > hidden_begin + hidden.rows())
    throw InputError(fmt::format("Q projection of [{}, {}) outside stored hidden states", from, to));
  Mat xb;
  rmsnorm(xb, hidden.middleRows(from - hidden_begin, n), lw.rms_att, c.norm_eps);
  matmul(q_out, xb, lw.wq, lw.bq, c.q_dim());
  std::vector<int> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = from + i;
  rope(q_out, pos, c.head_dim, c.rope_theta, c.rope);
  count(fl, OpKind::kAttnNorm, 4.0 * n * c.dim);
  count(fl, OpKind::kQProj, 2.0 * n * c.dim * c.q_dim() + (c.qkv_bias ? 1.0 : 0.0) * n * c.q_dim());
  count(fl, OpKind::kRope, 3.0 * n * c.q_dim());
}

namespace {
void check_store(const Model& m, const Capture& store) {
  if (store.begin != 0 || static_cast<int>(store.hidden.size()) != m.config.n_layers ||
      static_cast<int>(store.k.size()) != m.config.n_layers || store.rows() > m.config.seq_len)
    throw InputError("KV assembly needs a store of hidden states and K/V for every layer from position 0");
}
}  // namespace

KVCache kvpr_assemble(const Model& m, const Capture& store, int l, FlopCounter* flops) {
  check_store(m, store);
  const int s = store.rows();
  if (l < 0 || l > s) throw InputError(fmt::format("KVPR split point {} outside [0, {}]", l, s));
  std::vector<bool> plan(s, false);
  for (int i = 0; i < l; ++i) plan[i] = true;
  return cake_assemble(m, store, 1, plan, flops);
}

std::vector<bool> cake_order(int n_blocks, double tc, double tl) {
  std::vector<bool> computed(std::max(n_blocks, 0), false);
  int ci = 0, li = n_blocks - 1;
  double compute_free = 0, load_free = 0;
  while (ci <= li) {
    if (compute_free <= load_free) {
      computed[ci++] = true;
      compute_free += tc;
    } else {
      computed[li--] = false;
      load_free += tl;
    }
  }
  return computed;
}

KVCache cake_assemble(const Model& m, const Capture& store, int block, const std::vector<bool>& computed,
                      FlopCounter* flops) {
  check_store(m, store);
  const int s = store.rows();
  if (block <= 0 || static_cast<std::int64_t>(computed.size()) * block < s)
    throw InputError(fmt::format("block plan of {} blocks of {} does not cover {} positions", computed.size(), block, s));
  KVCache cache(m.config);
  Mat k, v;
  for (int l = 0; l < m.config.n_layers; ++l) {
    for (std::size_t b = 0; b < computed.size(); ++b) {
      const int from = static_cast<int>(b) * block, to = std::min(s, from + block);
      if (from >= to) break;
      if (computed[b]) {
        // Contiguous computed blocks are recomputed in one call (same FLOPs, fewer calls).
        recompute_kv_rows(m, l, store.hidden[l], 0, from, to, k, v, flops);
        cache.k[l].middleRows(from, to - from) = k;
        cache.v[l].middleRows(from, to - from) = v;
      } else {
        cache.k[l].middleRows(from, to - from) = store.k[l].middleRows(from, to - from);
        cache.v[l].middleRows(from, to - from) = store.v[l].middleRows(from, to - from);
      }
    }
  }
  cache.length = s;
  return cache;
}

}  // namespace mobisim::kernel
