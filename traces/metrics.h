#pragma once
// Answer-quality metrics (PerCache figure 19/23 and appendix A.3 report ROUGE-L).
// Tokens are traces::words(): lower-cased, punctuation dropped, no stemming.
//
// ROUGE-L (Lin 2004), as Google's rouge_score package without stemming:
//   P = LCS / |candidate|, R = LCS / |reference|, F = 2PR / (P + R)  (0 when LCS = 0).
//
// BLEU-4 (Papineni et al. 2002), uniform weights 1/4, single reference:
//   p_n = clipped n-gram matches / candidate n-grams, n = 1..4
//   BP = 1 if c > r else exp(1 - r/c)   (c, r: candidate and reference lengths)
//   BLEU = BP * exp(sum_n 1/4 ln p_n)
// sentence_bleu smooths zero counts with Chen & Cherry's method 1 (NLTK
// SmoothingFunction().method1): a zero match count becomes epsilon = 0.1, and a
// candidate shorter than n words divides by max(1, count); no unigram match at
// all scores 0.
// corpus_bleu sums matches, n-gram counts and lengths over all pairs first and
// does not smooth (any p_n = 0 gives 0), as NLTK's corpus_bleu and sacreBLEU.
// An empty candidate scores 0.
#include <string>
#include <vector>

namespace mobisim::traces {

struct RougeL {
  double precision = 0, recall = 0, f = 0;
};
RougeL rouge_l(const std::string& candidate, const std::string& reference);
RougeL rouge_l_tokens(const std::vector<std::string>& cand, const std::vector<std::string>& ref);

double sentence_bleu(const std::string& candidate, const std::string& reference, double epsilon = 0.1);
double corpus_bleu(const std::vector<std::string>& candidates, const std::vector<std::string>& references);

// A served answer's quality as the RAG drivers score it: ROUGE-L F and sentence BLEU-4 of `served`
// (an answer from a cache) against `reference`. An answer the LLM generated for the query itself
// (`served` empty) stands for the reference: 1 and 1. No reference (`reference` empty): 0 and 0.
struct AnswerScore {
  double rouge_l = 0, bleu = 0;
};
AnswerScore score_served_answer(const std::string& served, const std::string& reference);

}  // namespace mobisim::traces
