// ROUGE-L and BLEU on hand-computed examples; trace statistics helpers.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/error.h"
#include "traces/metrics.h"
#include "traces/stats.h"

using namespace mobisim::traces;

TEST(RougeL, HandComputedLcsScores) {
  // cand "the cat sat on the mat" (6), ref "the cat is on the mat" (6):
  // LCS = the cat on the mat = 5 -> P = R = F = 5/6.
  auto r = rouge_l("The cat sat on the mat.", "the cat is on the mat");
  EXPECT_NEAR(r.precision, 5.0 / 6, 1e-12);
  EXPECT_NEAR(r.recall, 5.0 / 6, 1e-12);
  EXPECT_NEAR(r.f, 5.0 / 6, 1e-12);
  // cand "a b c d" (4), ref "a c e" (3): LCS = a c = 2 -> P = 1/2, R = 2/3, F = 2PR/(P+R) = 4/7.
  r = rouge_l("a b c d", "a c e");
  EXPECT_NEAR(r.precision, 0.5, 1e-12);
  EXPECT_NEAR(r.recall, 2.0 / 3, 1e-12);
  EXPECT_NEAR(r.f, 4.0 / 7, 1e-12);
  EXPECT_EQ(rouge_l("x y", "a b").f, 0.0);
  EXPECT_EQ(rouge_l("", "a b").f, 0.0);
  EXPECT_NEAR(rouge_l("same words here", "Same words, here!").f, 1.0, 1e-12);
}

TEST(RougeBleu, SentenceBleuHandComputed) {
  // Identical 4+ word sentences: every p_n = 1, BP = 1 -> 1.
  EXPECT_NEAR(sentence_bleu("the quick brown fox jumps", "the quick brown fox jumps"), 1.0, 1e-12);
  // cand "the cat sat on the mat" vs ref "the cat is on the mat" (both 6 words, BP = 1):
  //   p1 = 5/6 (sat unmatched), p2 = 3/5 (the cat, on the, the mat), p3 = 1/4 (on the mat),
  //   p4 = 0/3 -> smoothed to 0.1/3.
  //   BLEU = exp(1/4 (ln 5/6 + ln 3/5 + ln 1/4 + ln 0.1/3))
  const double want = std::exp(0.25 * (std::log(5.0 / 6) + std::log(3.0 / 5) + std::log(0.25) + std::log(0.1 / 3)));
  EXPECT_NEAR(sentence_bleu("the cat sat on the mat", "the cat is on the mat"), want, 1e-12);
  // Brevity penalty: cand "the cat" (2) vs ref "the cat sat down" (4):
  //   p1 = 2/2, p2 = 1/1, p3 = 0.1/max(1,0), p4 = 0.1/1; BP = exp(1 - 4/2) = e^-1.
  const double bp = std::exp(-1.0) * std::exp(0.25 * (0 + 0 + 2 * std::log(0.1)));
  EXPECT_NEAR(sentence_bleu("the cat", "the cat sat down"), bp, 1e-12);
  EXPECT_EQ(sentence_bleu("zzz yyy", "the cat"), 0.0);
  EXPECT_EQ(sentence_bleu("", "the cat"), 0.0);
}

TEST(RougeBleu, CorpusBleuPoolsCountsWithoutSmoothing) {
  // Pair 1 identical (5 words): matches 5,4,3,2 of 5,4,3,2. Pair 2 "a b c d" vs "a b c e":
  // matches 3,2,1,0 of 4,3,2,1. Pooled: p = 8/9, 6/7, 4/5, 2/3; lengths 9 vs 9 -> BP = 1.
  const double want = std::exp(0.25 * (std::log(8.0 / 9) + std::log(6.0 / 7) + std::log(4.0 / 5) + std::log(2.0 / 3)));
  EXPECT_NEAR(corpus_bleu({"v w x y z", "a b c d"}, {"v w x y z", "a b c e"}), want, 1e-12);
  EXPECT_EQ(corpus_bleu({"a b c d"}, {"a b c e"}), 0.0);  // no 4-gram match, unsmoothed
  EXPECT_THROW(corpus_bleu({"a"}, {}), mobisim::Error);
}

TEST(TraceStats, PrefixOverlapAndQuantile) {
  const std::vector<std::vector<std::int32_t>> earlier = {{3, 5}, {1, 2}};
  EXPECT_EQ(prefix_overlap_ratio({1, 2}, earlier, 2), 1.0);
  EXPECT_EQ(prefix_overlap_ratio({1, 7}, earlier, 2), 0.5);
  EXPECT_EQ(prefix_overlap_ratio({5, 3}, earlier, 2), 0.0);  // order matters for KV prefix reuse
  EXPECT_EQ(prefix_overlap_ratio({1, 2}, {}, 2), 0.0);
  EXPECT_NEAR(quantile({4, 1, 3, 2}, 0.5), 2.5, 1e-12);
  EXPECT_TRUE(std::isnan(quantile({}, 0.5)));
}
