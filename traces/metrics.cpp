#include "traces/metrics.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "sim/error.h"
#include "traces/text.h"

namespace mobisim::traces {

RougeL rouge_l_tokens(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  if (a.empty() || b.empty()) return {};
  // Two-row dynamic programme: O(|a||b|) time, O(|b|) memory.
  std::vector<std::size_t> prev(b.size() + 1, 0), cur(b.size() + 1, 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    std::swap(prev, cur);
  }
  const double lcs = static_cast<double>(prev[b.size()]);
  RougeL r;
  if (lcs == 0) return r;
  r.precision = lcs / static_cast<double>(a.size());
  r.recall = lcs / static_cast<double>(b.size());
  r.f = 2 * r.precision * r.recall / (r.precision + r.recall);
  return r;
}

RougeL rouge_l(const std::string& candidate, const std::string& reference) {
  return rouge_l_tokens(words(candidate), words(reference));
}

namespace {

struct NgramCounts {
  double match[4] = {0, 0, 0, 0};
  double total[4] = {0, 0, 0, 0};
  double cand_len = 0, ref_len = 0;
};

void add_counts(NgramCounts& acc, const std::vector<std::string>& c, const std::vector<std::string>& r) {
  acc.cand_len += static_cast<double>(c.size());
  acc.ref_len += static_cast<double>(r.size());
  for (std::size_t n = 1; n <= 4; ++n) {
    std::map<std::vector<std::string>, int> rc, cc;
    for (std::size_t i = 0; i + n <= r.size(); ++i) ++rc[std::vector<std::string>(r.begin() + i, r.begin() + i + n)];
    for (std::size_t i = 0; i + n <= c.size(); ++i) ++cc[std::vector<std::string>(c.begin() + i, c.begin() + i + n)];
    for (const auto& [g, k] : cc) {
      auto it = rc.find(g);
      acc.match[n - 1] += std::min(k, it == rc.end() ? 0 : it->second);
      acc.total[n - 1] += k;
    }
  }
}

double bleu_from(const NgramCounts& a, double epsilon, bool smooth) {
  // No unigram match at all scores 0 even when smoothing (as NLTK).
  if (a.cand_len == 0 || a.match[0] == 0) return 0.0;
  double log_sum = 0;
  for (int n = 0; n < 4; ++n) {
    double m = a.match[n];
    if (m == 0) {
      if (!smooth) return 0.0;
      m = epsilon;
    }
    // A candidate shorter than n words has no n-grams: NLTK divides by max(1, count).
    log_sum += 0.25 * std::log(m / std::max(1.0, a.total[n]));
  }
  const double bp = a.cand_len > a.ref_len ? 1.0 : std::exp(1.0 - a.ref_len / a.cand_len);
  return bp * std::exp(log_sum);
}

}  // namespace

double sentence_bleu(const std::string& candidate, const std::string& reference, double epsilon) {
  NgramCounts a;
  add_counts(a, words(candidate), words(reference));
  return bleu_from(a, epsilon, true);
}

double corpus_bleu(const std::vector<std::string>& candidates, const std::vector<std::string>& references) {
  if (candidates.size() != references.size())
    throw Error("corpus_bleu: candidates and references differ in number");
  NgramCounts a;
  for (std::size_t i = 0; i < candidates.size(); ++i) add_counts(a, words(candidates[i]), words(references[i]));
  return bleu_from(a, 0.0, false);
}

AnswerScore score_served_answer(const std::string& served, const std::string& reference) {
  if (reference.empty()) return {};
  if (served.empty()) return {1.0, 1.0};
  return {rouge_l(served, reference).f, sentence_bleu(served, reference)};
}

}  // namespace mobisim::traces
