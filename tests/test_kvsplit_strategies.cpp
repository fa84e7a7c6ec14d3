// KVPR / Cake split strategies: hand-computed optima, the DES against the ILP objective,
// Cake's pointer meeting point, bad input, and the kernel oracle for every split.
#include <gtest/gtest.h>

#include <cmath>

#include "models/kernel/checkpoint.h"
#include "models/kernel/oracles.h"
#include "models/kernel/transformer.h"
#include "policies/kvsplit/kv_split.h"
#include "sim/error.h"
#include "sim/registry.h"

namespace mobisim::policies::kvsplit {
namespace {

// h = p = b = v_com = 1, v_gpu = 4: X(l) = l, R(l) = 4*l*1/4 = l, L(n) = 2n, Q(s) = 2s/4 = s/2.
AnalyticRates toy_rates() {
  AnalyticRates r;
  r.v_gpu_flops = 4;
  r.v_com_bps = 1;
  r.h = 1;
  r.p_bytes = 1;
  r.b = 1;
  return r;
}

std::unique_ptr<KvSplitStrategy> make(const std::string& yaml) {
  return Registry<KvSplitStrategy>::instance().create(load_yaml_string(yaml, "test"), ConfigSource{});
}

TEST(KvSplitIlp, ToyInstanceSolvedByHand) {
  const AnalyticSplitCosts c(toy_rates());
  // s = 6: T(l) = l + max(l, 2(6 - l)) = 12, 11, 10, 9, 8, 10, 12 for l = 0..6.
  const double expected[] = {12, 11, 10, 9, 8, 10, 12};
  for (int l = 0; l <= 6; ++l) EXPECT_DOUBLE_EQ(split_objective_s(c, 6, l, false), expected[l]) << "l=" << l;
  EXPECT_EQ(ilp_split(c, 6, false), 4);
  // Q-aware: Q(6) = 3; T(l) = l + max(3 + l, 2(6 - l)) = 12, 11, 10, 9, 11, ...: optimum 3.
  EXPECT_DOUBLE_EQ(split_objective_s(c, 6, 3, true), 9);
  EXPECT_EQ(ilp_split(c, 6, true), 3);
}

TEST(KvSplitClosedForm, MatchesTheFormula) {
  const AnalyticRates r = toy_rates();
  // l* = s p v_gpu / (2 h v_com + p v_gpu) = 6*4/6 = 4; c1 = 1/1.013 -> 3.949 -> 4.
  EXPECT_DOUBLE_EQ(closed_form_real(r, 6, false), 4.0);
  EXPECT_EQ(closed_form_split(r, 6, 1 / 1.013), 4);
  // l* = s (p v_gpu - h v_com) / (2 h v_com + p v_gpu) = 6*3/6 = 3; c2 -> 2.924 -> 3.
  EXPECT_DOUBLE_EQ(closed_form_real(r, 6, true), 3.0);
  EXPECT_EQ(closed_form_split_q(r, 6, 1 / 1.026), 3);
  // s = 1000: 1000 * 4/6 / 1.013 = 658.1 -> 658 (the constant moves the split by 1.3%).
  EXPECT_EQ(closed_form_split(r, 1000, 1 / 1.013), 658);
  // Q slower than loading everything (h v_com > p v_gpu): negative, clamped to 0.
  AnalyticRates slow = r;
  slow.v_gpu_flops = 0.5;
  EXPECT_LT(closed_form_real(slow, 100, true), 0);
  EXPECT_EQ(closed_form_split_q(slow, 100, 1 / 1.026), 0);
}

TEST(KvSplitSimulation, DesEqualsIlpObjectiveForEverySplit) {
  AnalyticRates r = toy_rates();
  r.v_gpu_flops = 3e3;  // seconds-scale numbers with fractions
  r.v_com_bps = 1.7e3;
  const AnalyticSplitCosts c(r);
  for (bool q : {false, true})
    for (std::int64_t l = 0; l <= 40; ++l) {
      const auto p = simulate_split(c, 40, l, q);
      EXPECT_NEAR(p.time_s, split_objective_s(c, 40, l, q), 5e-9) << "l=" << l << " q=" << q;
      EXPECT_EQ(p.recomputed_tokens, l);
    }
}

// Prefill-style costs with constant per-token times (no X transfer).
class ConstCosts : public SplitCosts {
 public:
  ConstCosts(double tc, double tl, double tq = 0.55) : tc_(tc), tl_(tl), tq_(tq) {}
  double x_transfer_s(std::int64_t) const override { return 0; }
  double recompute_s(std::int64_t from, std::int64_t to) const override { return tc_ * static_cast<double>(to - from); }
  double load_s(std::int64_t n) const override { return tl_ * static_cast<double>(n); }
  double q_s(std::int64_t s) const override { return tq_ * static_cast<double>(s); }
  int layers() const override { return 1; }
  AnalyticRates rates() const override { return toy_rates(); }
  std::string describe() const override { return "const"; }

 private:
  double tc_, tl_, tq_;
};

TEST(KvSplitCake, PointersMeetWhereComputedByHand) {
  // 10 blocks of 1 token, compute 3 s/block, load 1 s/block. Compute takes 0 (t 0-3), 1 (3-6),
  // 2 (6-9); load takes 9, 8, 7 (t 0-3), 6 (3-4), 5, 4, 3 (t 6-7); at t = 7 load_idx = 2 <
  // compute_idx = 3: they met. Done at 9 s against 10 s for pure load.
  const ConstCosts c(3, 1);
  CakeOptions o;
  o.block_tokens = 1;
  const auto p = simulate_cake(c, {10, false}, o);
  EXPECT_DOUBLE_EQ(p.time_s, 9.0);
  EXPECT_EQ(p.recomputed_tokens, 3);
  const std::vector<bool> expected{true, true, true, false, false, false, false, false, false, false};
  EXPECT_EQ(p.computed_blocks, expected);
  // The kernel's own two-pointer order agrees.
  EXPECT_EQ(kernel::cake_order(10, 3, 1), expected);
  // Per-block overheads delay each stream: 1 s extra per computed block -> compute takes 0 (0-4), 1 (4-8).
  o.compute_block_overhead_us = 1e6;
  const auto slow = simulate_cake(c, {10, false}, o);
  EXPECT_EQ(slow.recomputed_tokens, 2);
  EXPECT_DOUBLE_EQ(slow.time_s, 8.0);
  // With Q: Q(10) = 5.5 s first on the compute stream, so block 0 ends at 8.5 s; the load stream
  // claimed block 1 at 8 s and finishes at 9 s.
  o.compute_block_overhead_us = 0;
  const auto wq = simulate_cake(c, {10, true}, o);
  EXPECT_EQ(wq.recomputed_tokens, 1);
  EXPECT_DOUBLE_EQ(wq.time_s, 9.0);
}

TEST(KvSplitStrategies, RegisteredAndConsistent) {
  const AnalyticSplitCosts c(toy_rates());
  EXPECT_EQ(make("{impl: always_load}")->plan(c, {6, false}).recomputed_tokens, 0);
  EXPECT_EQ(make("{impl: always_recompute}")->plan(c, {6, false}).recomputed_tokens, 6);
  const auto ilp = make("{impl: kvpr_ilp}")->plan(c, {6, false});
  EXPECT_EQ(ilp.recomputed_tokens, 4);
  EXPECT_DOUBLE_EQ(ilp.time_s, 8.0);
  EXPECT_EQ(make("{impl: kvpr_ilp, q_aware: true}")->plan(c, {6, true}).recomputed_tokens, 3);
  EXPECT_EQ(make("{impl: kvpr_closed_form}")->plan(c, {6, false}).recomputed_tokens, 4);
  EXPECT_EQ(make("{impl: kvpr_closed_form_q}")->plan(c, {6, true}).recomputed_tokens, 3);
  // KVPR's Q-blind split is worse than the Q-aware one once Q must be computed (the document's finding).
  EXPECT_GT(make("{impl: kvpr_ilp}")->plan(c, {600, true}).time_s,
            make("{impl: kvpr_ilp, q_aware: true}")->plan(c, {600, true}).time_s);
  EXPECT_THROW(make("{impl: cake, block_size: 4}"), ConfigError);  // unknown key
  EXPECT_THROW(make("{impl: cake, block_tokens: 0}"), ConfigError);
}

TEST(KvSplitStrategies, SequenceLengthZeroIsCleanAndNegativeIsAnError) {
  const AnalyticSplitCosts c(toy_rates());
  for (const char* y : {"{impl: always_load}", "{impl: always_recompute}", "{impl: kvpr_ilp}", "{impl: kvpr_closed_form}",
                        "{impl: kvpr_closed_form_q}", "{impl: cake}"}) {
    const auto p = make(y)->plan(c, {0, true});
    EXPECT_EQ(p.time_s, 0.0) << y;
    EXPECT_EQ(p.recomputed_tokens, 0) << y;
    EXPECT_THROW(make(y)->plan(c, {-1, false}), ConfigError) << y;
  }
  EXPECT_THROW(AnalyticSplitCosts(AnalyticRates{}), ConfigError);
}

TEST(KvSplitKernelOracle, EverySplitAssemblesTheSameKv) {
  // A tiny random llama; K/V of [0, s) assembled from the plan (prefix recomputed from stored
  // hidden states, suffix copied) must equal full recompute for every strategy and every s.
  const kernel::Model m = kernel::make_synthetic(kernel::tiny_config(), 7);
  const int n = 40;
  const std::vector<int> tokens = kernel::sample_sequence(m, n, 3);
  kernel::Capture store;
  kernel::KVCache full(m.config);
  {
    kernel::RunState st;
    kernel::ForwardOptions o;
    o.logits = kernel::Logits::kNone;
    o.capture = &store;
    kernel::forward(m, full, st, tokens, o);
  }
  AnalyticRates r = toy_rates();
  r.v_gpu_flops = 5;  // l*/s = 5/7: the splits move with s
  const AnalyticSplitCosts costs(r);
  const char* strategies[] = {"{impl: always_load}",      "{impl: always_recompute}",    "{impl: kvpr_ilp}",
                              "{impl: kvpr_ilp, q_aware: true}", "{impl: kvpr_closed_form}", "{impl: kvpr_closed_form_q}",
                              "{impl: cake, block_tokens: 4}", "{impl: cake, block_tokens: 7}"};
  int checked = 0;
  for (const char* y : strategies) {
    const auto strat = make(y);
    for (int s = 1; s <= n; ++s) {
      const auto plan = strat->plan(costs, {s, (s % 2) == 0});
      const kernel::Capture sub = store.slice(0, s);
      const kernel::KVCache got = plan.block_tokens > 0
                                      ? kernel::cake_assemble(m, sub, static_cast<int>(plan.block_tokens), plan.computed_blocks)
                                      : kernel::kvpr_assemble(m, sub, static_cast<int>(plan.recomputed_tokens));
      double diff = 0;
      for (int l = 0; l < m.config.n_layers; ++l) {
        diff = std::max(diff, static_cast<double>((got.k[l].topRows(s) - full.k[l].topRows(s)).cwiseAbs().maxCoeff()));
        diff = std::max(diff, static_cast<double>((got.v[l].topRows(s) - full.v[l].topRows(s)).cwiseAbs().maxCoeff()));
      }
      EXPECT_LT(diff, 1e-4) << y << " s=" << s << " l=" << plan.recomputed_tokens;
      // Cake's computed blocks are a prefix: the same split point holds for kvpr_assemble.
      if (plan.block_tokens > 0) {
        const auto again = kernel::kvpr_assemble(m, sub, static_cast<int>(plan.recomputed_tokens));
        EXPECT_LT((again.k[0].topRows(s) - got.k[0].topRows(s)).cwiseAbs().maxCoeff(), 1e-6f) << y;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 8 * n);
}

}  // namespace
}  // namespace mobisim::policies::kvsplit
