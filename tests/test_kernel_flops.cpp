// The FLOPs the kernel performs equal the FLOPs the cost model charges, one
// operator family at a time, for every call shape the policies use.
#include <gtest/gtest.h>

#include "models/cost_model.h"
#include "models/kernel/drafters.h"
#include "models/kernel/transformer.h"
#include "test_kernel_util.h"

namespace mobisim::kernel {
namespace {

using models::OpKind;

// Families: embedding, attention norm, Q/K/V projections, RoPE, attention
// (scores, softmax, context), output projection, residuals, FFN (norm, gate,
// up, activation, down), final norm and LM head.
const std::vector<std::vector<OpKind>> kFamilies = {
    {OpKind::kEmbed},
    {OpKind::kAttnNorm},
    {OpKind::kQProj, OpKind::kKProj, OpKind::kVProj},
    {OpKind::kRope},
    {OpKind::kAttnScore, OpKind::kSoftmax, OpKind::kAttnContext},
    {OpKind::kOProj},
    {OpKind::kResidual},
    {OpKind::kFfnNorm, OpKind::kFfnGate, OpKind::kFfnUp, OpKind::kFfnAct, OpKind::kFfnDown},
    {OpKind::kFinalNorm, OpKind::kLmHead},
};

void expect_equal(const FlopCounter& k, const models::Work& w, const std::string& what,
                  const std::vector<OpKind>& skip = {}) {
  for (const auto& fam : kFamilies)
    for (OpKind op : fam) {
      if (std::find(skip.begin(), skip.end(), op) != skip.end()) continue;
      EXPECT_DOUBLE_EQ(k.of(op), w.flops_of(op)) << what << ": " << models::to_string(op);
    }
  if (skip.empty()) {
    EXPECT_DOUBLE_EQ(k.total(), w.flops()) << what;
  }
}

std::vector<int> toks(int n) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 7 + 3) % 300);
  return t;
}

class KernelFlops : public ::testing::TestWithParam<bool> {
 protected:
  // Both a llama-shaped model and a qwen-shaped one (biases count m*n extra).
  Model model() const { return GetParam() ? testing::tiny_qwen() : testing::tiny_llama(); }
};

TEST_P(KernelFlops, PrefillEveryFamily) {
  const Model m = model();
  const models::CostModel cm(m.config.spec());
  KVCache c(m.config);
  RunState st;
  FlopCounter fl;
  ForwardOptions o;
  o.flops = &fl;
  forward(m, c, st, toks(37), o);
  expect_equal(fl, cm.prefill(models::PrefillShape{37, 0, 0, 1}), "prefill 37");
  EXPECT_GT(fl.of(OpKind::kAttnScore), 0.0);
}

TEST_P(KernelFlops, PrefillAfterCachedPrefixAllLogits) {
  const Model m = model();
  const models::CostModel cm(m.config.spec());
  KVCache c(m.config);
  RunState st;
  forward(m, c, st, toks(20));
  FlopCounter fl;
  ForwardOptions o;
  o.flops = &fl;
  o.logits = Logits::kAll;
  forward(m, c, st, toks(13), o);
  expect_equal(fl, cm.prefill(models::PrefillShape{13, 20, 0, 13}), "prefill 13 after 20");
}

TEST_P(KernelFlops, DecodeStep) {
  const Model m = model();
  const models::CostModel cm(m.config.spec());
  KVCache c(m.config);
  RunState st;
  forward(m, c, st, toks(50));
  FlopCounter fl;
  forward_token(m, c, st, 5, &fl);
  expect_equal(fl, cm.decode(50), "decode at 50");
}

TEST_P(KernelFlops, VerifyChainAndTree) {
  const Model m = model();
  const models::CostModel cm(m.config.spec());
  for (bool tree : {false, true}) {
    KVCache c(m.config);
    RunState st;
    forward(m, c, st, toks(30));
    DraftTree d = tree ? DraftTree{{4, 5, 6, 7, 8}, {-1, -1, 0, 0, 2}} : DraftTree::chain({4, 5, 6, 7, 8});
    FlopCounter fl;
    const auto r = verify_draft(m, c, st, 9, d, &fl);
    expect_equal(fl, cm.verify(r.fed, 30, tree ? r.draft_pairs : -1), tree ? "verify tree" : "verify chain");
  }
}

TEST_P(KernelFlops, KvRecompute) {
  const Model m = model();
  const models::CostModel cm(m.config.spec());
  KVCache c(m.config);
  RunState st;
  Capture store;
  ForwardOptions o;
  o.capture = &store;
  forward(m, c, st, toks(40), o);
  FlopCounter fl;
  kvpr_assemble(m, store, 23, &fl);
  expect_equal(fl, cm.kv_recompute(23), "kv_recompute 23");
}

TEST_P(KernelFlops, QProjection) {
  // Q from stored hidden states: norm, projection and RoPE, operator by operator.
  const Model m = model();
  const models::CostModel cm(m.config.spec());
  KVCache c(m.config);
  RunState st;
  Capture store;
  ForwardOptions o;
  o.capture = &store;
  forward(m, c, st, toks(40), o);
  FlopCounter fl;
  Mat q;
  for (int l = 0; l < m.config.n_layers; ++l) q_projection_rows(m, l, store.hidden[l], 0, 0, 40, q, &fl);
  expect_equal(fl, cm.q_projection(40), "q_projection 40");
  EXPECT_DOUBLE_EQ(fl.of(OpKind::kAttnNorm), 4.0 * 40 * m.config.dim * m.config.n_layers);
}

TEST_P(KernelFlops, PerCacheReusedQkv) {
  // PerCache crops the reused positions from the layer input before the QKV
  // projection (appendix B.1), so their attention norm is skipped too.
  const Model m = model();
  const models::CostModel cm(m.config.spec());
  const auto t = toks(30);
  KVCache c0(m.config);
  RunState st;
  Capture cap;
  ForwardOptions oc;
  oc.capture = &cap;
  forward(m, c0, st, t, oc);
  const Capture qkv = cap.slice(0, 18);
  KVCache c(m.config);
  FlopCounter fl;
  ForwardOptions o;
  o.reuse = &qkv;
  o.flops = &fl;
  forward(m, c, st, t, o);
  const auto w = cm.prefill(models::PrefillShape{30, 0, 18, 1});
  expect_equal(fl, w, "percache 18 of 30");
  EXPECT_DOUBLE_EQ(fl.of(OpKind::kAttnNorm), 4.0 * 12 * m.config.dim * m.config.n_layers);
}

INSTANTIATE_TEST_SUITE_P(Kernel, KernelFlops, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "qwen" : "llama"; });

}  // namespace
}  // namespace mobisim::kernel
