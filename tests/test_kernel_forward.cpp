// The kernel's forward pass against an independent reference, the real
// stories260K checkpoint, and the file formats (llama2.c, GGUF F32/F16).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "models/kernel/checkpoint.h"
#include "models/kernel/oracles.h"
#include "models/kernel/transformer.h"
#include "sim/rng.h"
#include "test_kernel_util.h"

namespace mobisim::kernel {
namespace {

using testing::TempFile;

// An independent reference written from the architecture's definition, in
// double precision and whole-sequence form (no KV cache, explicit causal mask,
// RoPE from the complex-number definition). It shares nothing with forward().
std::vector<std::vector<double>> reference_logits(const Model& m, const std::vector<int>& toks) {
  const Config& c = m.config;
  const Weights& w = m.weights;
  const int n = static_cast<int>(toks.size()), D = c.dim, hd = c.head_dim;
  using M = std::vector<std::vector<double>>;
  auto lin = [](const M& x, const float* W, const float* b, int out) {
    M y(x.size(), std::vector<double>(out));
    for (std::size_t t = 0; t < x.size(); ++t)
      for (int o = 0; o < out; ++o) {
        double s = b ? b[o] : 0.0;
        for (std::size_t i = 0; i < x[t].size(); ++i) s += double(W[o * x[t].size() + i]) * x[t][i];
        y[t][o] = s;
      }
    return y;
  };
  auto rms = [&](const M& x, const float* g) {
    M y = x;
    for (auto& r : y) {
      double ss = 0;
      for (double v : r) ss += v * v;
      const double k = 1.0 / std::sqrt(ss / r.size() + c.norm_eps);
      for (std::size_t i = 0; i < r.size(); ++i) r[i] = r[i] * k * g[i];
    }
    return y;
  };
  // Pair (a, b) of each head is a complex number a + ib multiplied by e^{i pos theta^(-2j/hd)}.
  auto rope = [&](M& x) {
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < static_cast<int>(x[t].size()) / hd; ++h)
        for (int j = 0; j < hd / 2; ++j) {
          const int a = c.rope == RopeLayout::kAdjacentPairs ? h * hd + 2 * j : h * hd + j;
          const int b = c.rope == RopeLayout::kAdjacentPairs ? a + 1 : a + hd / 2;
          const double ang = t * std::pow(double(c.rope_theta), -2.0 * j / hd);
          const double re = x[t][a], im = x[t][b];
          x[t][a] = re * std::cos(ang) - im * std::sin(ang);
          x[t][b] = re * std::sin(ang) + im * std::cos(ang);
        }
  };
  M x(n, std::vector<double>(D));
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < D; ++i) x[t][i] = w.token_embedding[toks[t] * D + i];
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    M xn = rms(x, L.rms_att);
    M q = lin(xn, L.wq, L.bq, c.q_dim()), k = lin(xn, L.wk, L.bk, c.kv_dim()), v = lin(xn, L.wv, L.bv, c.kv_dim());
    rope(q);
    rope(k);
    M att(n, std::vector<double>(c.q_dim(), 0.0));
    for (int h = 0; h < c.n_heads; ++h) {
      const int g = h / (c.n_heads / c.n_kv_heads);
      for (int t = 0; t < n; ++t) {
        std::vector<double> s(n, -INFINITY);
        double mx = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          double d = 0;
          for (int i = 0; i < hd; ++i) d += q[t][h * hd + i] * k[u][g * hd + i];
          s[u] = d / std::sqrt(double(hd));
          mx = std::max(mx, s[u]);
        }
        double z = 0;
        for (int u = 0; u <= t; ++u) z += std::exp(s[u] - mx);
        for (int u = 0; u <= t; ++u)
          for (int i = 0; i < hd; ++i) att[t][h * hd + i] += std::exp(s[u] - mx) / z * v[u][g * hd + i];
      }
    }
    M o = lin(att, L.wo, nullptr, D);
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < D; ++i) x[t][i] += o[t][i];
    xn = rms(x, L.rms_ffn);
    M gate = lin(xn, L.w1, nullptr, c.hidden_dim), up = lin(xn, L.w3, nullptr, c.hidden_dim);
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < c.hidden_dim; ++i) gate[t][i] = gate[t][i] / (1 + std::exp(-gate[t][i])) * up[t][i];
    M down = lin(gate, L.w2, nullptr, D);
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < D; ++i) x[t][i] += down[t][i];
  }
  return lin(rms(x, w.rms_final), w.wcls, nullptr, c.vocab_size);
}

std::vector<int> random_tokens(int n, int vocab, std::uint64_t seed) {
  sim::Rng rng(seed);
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int>(rng.uniform_int(vocab)));
  return t;
}

double max_diff(const Mat& got, const std::vector<std::vector<double>>& ref) {
  double d = 0;
  for (std::size_t t = 0; t < ref.size(); ++t)
    for (std::size_t i = 0; i < ref[t].size(); ++i) d = std::max(d, std::abs(got(t, i) - ref[t][i]));
  return d;
}

Mat all_logits(const Model& m, const std::vector<int>& toks) {
  KVCache cache(m.config);
  RunState st;
  ForwardOptions o;
  o.logits = Logits::kAll;
  return forward(m, cache, st, toks, o);
}

TEST(KernelForward, Oracle1SyntheticLlamaLogitsEqualIndependentReference) {
  const Model m = testing::tiny_llama();
  const auto toks = random_tokens(40, m.config.vocab_size, 1);
  const Mat got = all_logits(m, toks);
  const auto ref = reference_logits(m, toks);
  EXPECT_LT(max_diff(got, ref), 1e-4);
  // Logits are not trivially small: the comparison has something to compare.
  EXPECT_GT(got.cwiseAbs().maxCoeff(), 1.0f);
}

TEST(KernelForward, Oracle1QwenStyleHalfSplitBiasesUntiedEqualReference) {
  const Model m = testing::tiny_qwen();
  const auto toks = random_tokens(33, m.config.vocab_size, 2);
  EXPECT_LT(max_diff(all_logits(m, toks), reference_logits(m, toks)), 1e-4);
}

TEST(KernelForward, RopeLayoutMatters) {
  // The two layouts are different functions: swapping one for the other changes the logits.
  Model a = testing::tiny_llama();
  Model b = a;
  b.config.rope = RopeLayout::kHalfSplit;
  const auto toks = random_tokens(20, a.config.vocab_size, 3);
  EXPECT_GT((all_logits(a, toks) - all_logits(b, toks)).cwiseAbs().maxCoeff(), 1e-2f);
  EXPECT_LT(max_diff(all_logits(b, toks), reference_logits(b, toks)), 1e-4);
}

TEST(KernelForward, TokenByTokenEqualsBatchedPrefill) {
  const Model m = testing::tiny_llama();
  const auto toks = random_tokens(30, m.config.vocab_size, 4);
  const Mat batched = all_logits(m, toks);
  KVCache cache(m.config);
  RunState st;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    const float* lg = forward_token(m, cache, st, toks[i]);
    for (int j = 0; j < m.config.vocab_size; ++j) ASSERT_NEAR(lg[j], batched(i, j), 1e-4) << "pos " << i;
  }
}

TEST(KernelForward, Oracle1Stories260KGreedyIdsFromReadme) {
  MOBISIM_REQUIRE_FILE(testing::stories_path());
  const Model m = load_llama2c(testing::stories_path());
  EXPECT_EQ(m.config.dim, 64);
  EXPECT_EQ(m.config.n_kv_heads, 4);
  EXPECT_TRUE(m.config.tied_classifier);
  const std::vector<int> expected = {461, 461, 401, 401, 401, 461, 378, 455, 473, 456, 435, 299};
  const auto out = generate_greedy(m, std::vector<int>{1}, 12);
  EXPECT_EQ(std::vector<int>(out.begin() + 1, out.end()), expected);
  const auto toks = std::vector<int>(out.begin(), out.end());
  EXPECT_LT(max_diff(all_logits(m, toks), reference_logits(m, toks)), 1e-4);
}

TEST(KernelForward, LibraryNaiveReferenceAgreesWithTestReference) {
  // The CLI's oracle-1 reference (oracles.cpp) is itself checked here.
  const Model m = testing::tiny_qwen();
  const auto toks = random_tokens(12, m.config.vocab_size, 5);
  const auto lib = naive_reference_logits(m, toks);
  const auto ref = reference_logits(m, toks);
  for (std::size_t t = 0; t < ref.size(); ++t)
    for (std::size_t i = 0; i < ref[t].size(); ++i) ASSERT_NEAR(lib[t][i], ref[t][i], 1e-4);
}

TEST(KernelFormats, Llama2cRoundTripIsExact) {
  const Model m = testing::tiny_llama();
  TempFile f(".bin");
  write_llama2c(f.path, m);
  const Model r = load_llama2c(f.path);
  EXPECT_EQ(r.config.n_params(), m.config.n_params());
  EXPECT_EQ(std::vector<float>(r.storage->begin(), r.storage->begin() + r.config.n_params()),
            std::vector<float>(m.storage->begin(), m.storage->begin() + m.config.n_params()));
  const auto toks = random_tokens(10, m.config.vocab_size, 6);
  EXPECT_EQ((all_logits(r, toks) - all_logits(m, toks)).cwiseAbs().maxCoeff(), 0.0f);
}

TEST(KernelFormats, Llama2cUntiedClassifierRoundTrip) {
  Config c = testing::tiny_llama().config;
  c.tied_classifier = false;
  c.n_layers = 2;
  const Model m = make_synthetic(c, 3);
  TempFile f(".bin");
  write_llama2c(f.path, m);
  const Model r = load_model(f.path);
  EXPECT_FALSE(r.config.tied_classifier);
  const auto toks = random_tokens(10, c.vocab_size, 7);
  EXPECT_EQ((all_logits(r, toks) - all_logits(m, toks)).cwiseAbs().maxCoeff(), 0.0f);
}

TEST(KernelFormats, GgufF32LlamaAndQwenRoundTripExact) {
  for (const Model& m : {testing::tiny_llama(), testing::tiny_qwen()}) {
    TempFile f(".gguf");
    write_gguf(f.path, m, GgufType::kF32);
    const Model r = load_model(f.path);
    EXPECT_EQ(r.config.arch, m.config.arch);
    EXPECT_EQ(r.config.rope, m.config.rope);  // llama: adjacent pairs, qwen2: half-split
    EXPECT_EQ(r.config.qkv_bias, m.config.qkv_bias);
    EXPECT_EQ(r.config.tied_classifier, m.config.tied_classifier);
    EXPECT_FLOAT_EQ(r.config.rope_theta, m.config.rope_theta);
    const auto toks = random_tokens(12, m.config.vocab_size, 8);
    EXPECT_EQ((all_logits(r, toks) - all_logits(m, toks)).cwiseAbs().maxCoeff(), 0.0f) << m.config.arch;
  }
}

TEST(KernelFormats, GgufF16HoldsHalfRoundedWeights) {
  const Model m = testing::tiny_qwen();
  TempFile f(".gguf");
  write_gguf(f.path, m, GgufType::kF16);
  const Model r = load_gguf(f.path);
  // Projections are stored in F16 (rounded to nearest even), norms and biases in F32.
  const float* a = m.weights.layers[1].wq;
  const float* b = r.weights.layers[1].wq;
  int changed = 0;
  for (int i = 0; i < m.config.q_dim() * m.config.dim; ++i) {
    ASSERT_EQ(b[i], half_to_float(float_to_half(a[i])));
    changed += a[i] != b[i];
  }
  EXPECT_GT(changed, 0);
  EXPECT_EQ(r.weights.layers[1].bq[3], m.weights.layers[1].bq[3]);
  const auto toks = random_tokens(12, m.config.vocab_size, 9);
  const float d = (all_logits(r, toks) - all_logits(m, toks)).cwiseAbs().maxCoeff();
  EXPECT_GT(d, 0.0f);
  EXPECT_LT(d, 0.05f);
}

TEST(KernelFormats, HalfConversionKnownValues) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);               // overflow to infinity
  EXPECT_EQ(float_to_half(5.960464477539063e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(half_to_float(0x0001), 5.960464477539063e-08f);
  for (std::uint32_t h = 0; h < 0x7c00; ++h)  // every finite positive half survives a round trip
    ASSERT_EQ(float_to_half(half_to_float(static_cast<std::uint16_t>(h))), h);
}

TEST(KernelFormats, StoriesThroughGgufGivesSameGreedyIds) {
  MOBISIM_REQUIRE_FILE(testing::stories_path());
  const Model m = load_llama2c(testing::stories_path());
  TempFile f(".gguf");
  write_gguf(f.path, m, GgufType::kF32);
  const Model g = load_gguf(f.path);
  EXPECT_EQ(generate_greedy(g, std::vector<int>{1}, 40), generate_greedy(m, std::vector<int>{1}, 40));
}

}  // namespace
}  // namespace mobisim::kernel
