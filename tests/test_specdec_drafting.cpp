// CoordGen drafting: PLD and SAM accepted-token counts on hand-made sequences, equation 3,
// draft reuse bookkeeping, the calibrated tree, and losslessness of every drafter + calibration
// + reuse against plain greedy decoding on the real kernel (synthetic model; stories260K when present).
#include <gtest/gtest.h>

#include "models/kernel/checkpoint.h"
#include "policies/specdec/kernel_oracles.h"
#include "policies/specdec/retrieval_drafter.h"
#include "sim/error.h"
#include "test_kernel_util.h"

namespace mobisim::policies::specdec {
namespace {

DrafterOptions opts(Retriever r, bool calib = false, bool reuse = false, int budget = 31) {
  DrafterOptions o;
  o.retriever = r;
  o.calibrate = calib;
  o.reuse = reuse;
  o.budget = budget;
  return o;
}

TEST(SpecdecDrafting, PldAcceptsWhatFollowedTheEarlierOccurrence) {
  // Context 1 2 3 4 5 1 2 | pending 3: the 3-gram "1 2 3" occurred at 0, PLD drafts 4 5 1 2 3;
  // the target continues 4 5 9: two accepted, 9 is the bonus; then 9 has no match: 1 step each.
  const std::vector<int> prompt{1, 2, 3, 4, 5, 1, 2}, output{3, 4, 5, 9, 6};
  CoordGenDrafter d(opts(Retriever::kPld), nullptr);
  const DecodeTrace t = replay_decode(prompt, output, d);
  ASSERT_EQ(t.steps.size(), 3u);
  EXPECT_EQ(t.steps[0].draft_tokens, 4);  // budget = the 4 tokens still to come
  EXPECT_EQ(t.steps[0].accepted, 2);
  EXPECT_EQ(t.steps[1].accepted, 0);
  EXPECT_EQ(t.steps[1].draft_tokens, 0);  // "9" never occurred before
  EXPECT_EQ(t.steps[2].draft_tokens, 0);  // last token: nothing left to draft
  EXPECT_DOUBLE_EQ(t.accepted_per_step(), 2.0 / 3.0);
}

TEST(SpecdecDrafting, SamDraftsFromTheHistoryStorePldCannot) {
  // History 5 6 7 8 (an earlier answer), prompt 1 2 5, output 6 7 8 4.
  // PLD (local only): 6, 7, 8 never occurred before in the request: 4 steps, 0 accepted.
  // SAM (history + local): suffix "5 6" occurred in the history, drafts 7 8 ...: 7 8 accepted, bonus 4.
  HistoryStore h;
  h.add(std::vector<int>{5, 6, 7, 8});
  const std::vector<int> prompt{1, 2, 5}, output{6, 7, 8, 4};
  CoordGenDrafter pld(opts(Retriever::kPld), &h);
  const DecodeTrace tp = replay_decode(prompt, output, pld);
  EXPECT_EQ(tp.steps.size(), 4u);
  EXPECT_DOUBLE_EQ(tp.accepted_per_step(), 0.0);
  CoordGenDrafter sam(opts(Retriever::kSam), &h);
  const DecodeTrace ts = replay_decode(prompt, output, sam);
  ASSERT_EQ(ts.steps.size(), 2u);
  EXPECT_EQ(ts.steps[0].accepted, 2);
  EXPECT_DOUBLE_EQ(ts.accepted_per_step(), 1.0);
}

// mllm's SuffixAutomaton::gen_draft with modeling_qwen_sd.hpp's minimum_length 10: n = min(40, 1 + 4 L),
// raised to 10 when L > 0, and n - 1 tokens drafted.
TEST(SpecdecDrafting, MllmSamDraftLengthFollowsTheMatchLength) {
  EXPECT_EQ(mllm_sam_draft_tokens(0), 0);    // no match: n = 1
  EXPECT_EQ(mllm_sam_draft_tokens(1), 9);    // n = max(10, 5)
  EXPECT_EQ(mllm_sam_draft_tokens(2), 9);    // n = max(10, 9)
  EXPECT_EQ(mllm_sam_draft_tokens(3), 12);   // n = 13
  EXPECT_EQ(mllm_sam_draft_tokens(9), 36);   // n = 37
  EXPECT_EQ(mllm_sam_draft_tokens(10), 39);  // n = min(40, 41)
  EXPECT_EQ(mllm_sam_draft_tokens(100), 39);
  EXPECT_EQ(parse_sam_draft_length("mllm"), SamDraftLength::kMllm);
  EXPECT_EQ(parse_sam_draft_length("budget"), SamDraftLength::kBudget);
  EXPECT_THROW(parse_sam_draft_length("longest"), ConfigError);
}

TEST(SpecdecDrafting, MllmSamDraftsShortAfterAShortMatch) {
  // History 100..159 (an earlier answer), prompt 1 2, output 100 101 ... 159 (the answer again).
  // Step 1: pending 100, the longest earlier suffix is "100" (L = 1). The whole-budget rule drafts the
  // 39 tokens after it (101..139), mllm's 9 (101..109); the target accepts all of them.
  // mllm, step 2: pending 110 (the bonus), the match is "100 .. 110" (L = 11): 39 tokens (111..149).
  HistoryStore h;
  std::vector<int> answer;
  for (int t = 100; t < 160; ++t) answer.push_back(t);
  h.add(answer);
  const std::vector<int> prompt{1, 2};
  DrafterOptions whole = opts(Retriever::kSam, false, false, 39), mllm = whole;
  mllm.sam_length = SamDraftLength::kMllm;
  CoordGenDrafter a(whole, &h), b(mllm, &h);
  const DecodeTrace ta = replay_decode(prompt, answer, a), tb = replay_decode(prompt, answer, b);
  ASSERT_GE(ta.steps.size(), 1u);
  EXPECT_EQ(ta.steps[0].draft_tokens, 39);
  EXPECT_EQ(ta.steps[0].accepted, 39);
  ASSERT_GE(tb.steps.size(), 2u);
  EXPECT_EQ(tb.steps[0].draft_tokens, 9);
  EXPECT_EQ(tb.steps[0].accepted, 9);
  EXPECT_EQ(tb.steps[1].draft_tokens, 39);
  EXPECT_EQ(tb.steps[1].accepted, 39);
}

TEST(SpecdecDrafting, RetrievalCeilingDraftsTheLongestStoreMatch) {
  // Prompt 1 2 3 4 5, output 9 2 3 4 7 2 3 4 7, no history. Step 1: pending 9, store 1 2 3 4 5 9; the
  // continuation 2 3 4 7 ... matches "2 3 4" (the store has 4 5, not 4 7): 3 accepted. Step 2: pending 7,
  // store 1 2 3 4 5 9 2 3 4 7; the remaining 2 3 4 7 occurs (positions 6-9): 4 accepted, done.
  const std::vector<int> prompt{1, 2, 3, 4, 5}, output{9, 2, 3, 4, 7, 2, 3, 4, 7};
  const DecodeTrace t = retrieval_ceiling({}, prompt, output, 31);
  ASSERT_EQ(t.steps.size(), 2u);
  EXPECT_EQ(t.steps[0].accepted, 3);
  EXPECT_EQ(t.steps[1].accepted, 4);
  EXPECT_DOUBLE_EQ(t.accepted_per_step(), 3.5);
  // Budget 2: 2 3 (2) | pending 4, "7" not yet in the store (0) | pending 7: 2 3 (2) | pending 4: 7 (1).
  const DecodeTrace b = retrieval_ceiling({}, prompt, output, 2);
  ASSERT_EQ(b.steps.size(), 4u);
  EXPECT_EQ(b.steps[0].accepted, 2);
  EXPECT_EQ(b.steps[1].accepted, 0);
  EXPECT_EQ(b.steps[2].accepted, 2);
  EXPECT_EQ(b.steps[3].accepted, 1);
  EXPECT_DOUBLE_EQ(b.accepted_per_step(), 5.0 / 4.0);
  // The history is part of the store: with history 7 2 the first step's "2 3 4 7" still stops at 4
  // (no "4 7" before the pending token), but an output 9 7 2 copies the history: 2 accepted in 1 step.
  const std::vector<int> history{7, 2};
  EXPECT_EQ(retrieval_ceiling(history, prompt, output, 31).steps[0].accepted, 3);
  const DecodeTrace h = retrieval_ceiling(history, prompt, std::vector<int>{9, 7, 2}, 31);
  ASSERT_EQ(h.steps.size(), 1u);
  EXPECT_EQ(h.steps[0].accepted, 2);
  EXPECT_THROW(retrieval_ceiling({}, prompt, output, 0), ConfigError);
}

TEST(SpecdecDrafting, RetrievalCeilingBoundsEveryRetrievalDrafter) {
  // On an output that copies its context and its history in runs, with novel tokens between, no
  // PLD/SAM drafter, with or without reuse, accepts more per step than the ceiling (each draft path
  // is copied from the store the ceiling searches whole).
  const std::vector<int> history{40, 41, 42, 43, 44, 45};
  std::vector<int> prompt, output;
  for (int i = 0; i < 60; ++i) prompt.push_back(10 + i % 23);
  for (int i = 0; i < 80; ++i) output.push_back(i % 7 == 3 ? 90 + i % 5 : (i % 17 < 6 ? 40 + i % 17 : 10 + (i * 3) % 23));
  HistoryStore store;
  store.add(history);
  const double ceiling = retrieval_ceiling(history, prompt, output, 31).accepted_per_step();
  for (const auto r : {Retriever::kPld, Retriever::kSam})
    for (const bool reuse : {false, true}) {
      CoordGenDrafter d(opts(r, false, reuse), &store);
      EXPECT_LE(replay_decode(prompt, output, d).accepted_per_step(), ceiling) << d.name();
    }
  EXPECT_GT(ceiling, 0.0);
}

TEST(SpecdecDrafting, EquationThreeLongestAgreeingSegment) {
  // pred[k] is the model's token after d[k]: 11 -> 12 and 12 -> 13 agree, 13 -> 14 does not.
  const std::vector<int> d{10, 11, 12, 13, 14}, pred{99, 12, 13, 77, 0};
  EXPECT_EQ(longest_agreeing_segment(d, pred), (std::pair<int, int>{1, 4}));
  EXPECT_EQ(longest_agreeing_segment({7}, {1}), (std::pair<int, int>{0, 1}));
  EXPECT_EQ(longest_agreeing_segment({1, 2, 3}, {2, 3, 0}), (std::pair<int, int>{0, 3}));
}

TEST(SpecdecDrafting, ReuseKeepsTheSynonymCaseAndOffersItNextStep) {
  // Draft a b c d after pending p; the model wanted x instead of a (synonym), but predicts b after a
  // and c after b: the segment a b c is kept; offered whole after x, and from after a when a is pending.
  const int p = 1, x = 2, a = 10, b = 11, c = 12, dd = 13;
  const kernel::DraftTree draft = kernel::DraftTree::chain({a, b, c, dd});
  kernel::VerifyResult r;
  r.bonus = x;
  r.predicted = {x, b, c, 77, 0};
  DraftReuse reuse(ReuseOptions{2, 4, 32, 8});
  reuse.observe(draft, r);
  ASSERT_EQ(reuse.kept(), 1u);
  kernel::DraftTree next;
  EXPECT_EQ(reuse.offer(x, next, 0, 31), 3);
  EXPECT_EQ(next.tokens, (std::vector<int>{a, b, c}));
  kernel::DraftTree from_a;
  EXPECT_EQ(reuse.offer(a, from_a, 0, 31), 2);
  EXPECT_EQ(from_a.tokens, (std::vector<int>{b, c}));
  // Past the cumulative threshold a segment already offered is dropped, with its lifetime counted.
  kernel::DraftTree full;
  EXPECT_EQ(reuse.offer(x, full, 31, 40), 0);
  EXPECT_EQ(reuse.kept(), 0u);
  EXPECT_DOUBLE_EQ(reuse.mean_lifetime_steps(), 2.0);
  (void)p;
}

TEST(SpecdecDrafting, CalibratedTreeFollowsTheModelNotTheContext) {
  // Context "A B C D" but the model predicts "A -> X" and "X"... X occurs nowhere; "B -> C" with C at 2.
  const std::vector<int> ctx{100, 101, 102, 103};
  PrefillPredictions pred;
  pred.next = {{105, 101}, {102, 104}, {103, 100}, {100, 101}};
  CalibrationOptions o;
  o.top_n = 2;
  o.max_depth = 2;
  const CalibratedTree t(ctx, pred, o);
  const kernel::DraftTree d = t.propose(100, 10);
  // Under 100: 105 (rank 1, no occurrence: leaf) and 101 (occurs at 1: expands to 102, 104).
  ASSERT_GE(d.size(), 4);
  EXPECT_EQ(d.tokens[0], 105);
  EXPECT_EQ(d.tokens[1], 101);
  EXPECT_EQ(d.parents[2], 1);
  EXPECT_EQ(d.tokens[2], 102);
  EXPECT_EQ(d.tokens[3], 104);
  EXPECT_GT(t.memory_bytes(), 0);
  EXPECT_TRUE(t.propose(555, 10).tokens.empty());
  PrefillPredictions short_pred;
  short_pred.next = {{1}};
  EXPECT_THROW(CalibratedTree(ctx, short_pred, o), InputError);
}

TEST(SpecdecDrafting, BadOptionsAreRefused) {
  EXPECT_THROW(CoordGenDrafter(opts(Retriever::kSam, false, false, 0), nullptr), ConfigError);
  EXPECT_THROW(parse_retriever("rest"), ConfigError);
  kernel::Mat logits(3, 10);
  logits.setZero();
  EXPECT_THROW(PrefillPredictions::from_logits(logits, 4, 10, 2), InputError);
}

// A prompt with repeats so that retrieval finds something.
std::vector<int> repetitive_prompt(int vocab, int n, std::uint64_t seed) {
  sim::Rng rng(seed);
  std::vector<int> base;
  for (int i = 0; i < 12; ++i) base.push_back(1 + static_cast<int>(rng.uniform_int(vocab - 1)));
  std::vector<int> p;
  while (static_cast<int>(p.size()) < n) p.push_back(base[p.size() % base.size()]);
  return p;
}

void expect_lossless(const kernel::Model& m, const std::vector<int>& prompt, int steps, const HistoryStore& h) {
  const auto greedy = kernel::generate_greedy(m, prompt, steps);
  int drafted = 0;
  for (auto r : {Retriever::kPld, Retriever::kSam})
    for (bool calib : {false, true})
      for (bool reuse : {false, true}) {
        CoordGenDrafter d(opts(r, calib, reuse, 15), &h);
        const DecodeTrace t = speculative_decode(m, prompt, steps, d);
        EXPECT_EQ(t.tokens, greedy) << d.name();
        for (const auto& s : t.steps) drafted += s.draft_tokens;
        if (calib) {
          EXPECT_GT(d.calibrated()->nodes(), 0u) << d.name();
        }
      }
  EXPECT_GT(drafted, 0) << "no drafter proposed anything: the check would be vacuous";
}

TEST(SpecdecDrafting, LosslessOnSyntheticModel) {
  const kernel::Model m = kernel::testing::tiny_llama();
  HistoryStore h;
  const auto earlier = kernel::generate_greedy(m, repetitive_prompt(m.config.vocab_size, 20, 3), 30);
  h.add(std::span<const int>(earlier).subspan(20));
  expect_lossless(m, repetitive_prompt(m.config.vocab_size, 40, 5), 40, h);
}

// Oracle 9 of `mobisim kernel check`: eight must-pass rows, all passing on a synthetic model.
TEST(SpecdecDrafting, KernelCheckOracleNineRows) {
  const kernel::Model m = kernel::testing::tiny_llama();
  const auto rows = coordgen_oracles(m, 48, 40, 3);
  ASSERT_EQ(rows.size(), 8u);
  for (const auto& r : rows) {
    EXPECT_TRUE(r.must_pass) << r.id;
    EXPECT_TRUE(r.pass) << r.id << ": " << r.note;
    EXPECT_EQ(r.id.rfind("9/", 0), 0u) << r.id;
  }
}

TEST(SpecdecDrafting, LosslessOnStories260K) {
  MOBISIM_REQUIRE_FILE(kernel::testing::stories_path());
  const kernel::Model m = kernel::load_model(kernel::testing::stories_path());
  HistoryStore h;
  const std::vector<int> first{1, 365, 148, 41, 279};
  const auto earlier = kernel::generate_greedy(m, first, 60);
  h.add(std::span<const int>(earlier).subspan(first.size()));
  // The new request's context is the earlier story: outputs resemble it (CAG-like).
  std::vector<int> prompt(earlier.begin(), earlier.begin() + 50);
  expect_lossless(m, prompt, 60, h);
}

}  // namespace
}  // namespace mobisim::policies::specdec
