#pragma once
// `semantic`: MeanCache's semantic cache and PerCache's QA bank (policies/rag/qa_bank.h) as an
// answer-cache stage: (query embedding, answer) entries matched by cosine similarity against
// `tau_query`, kept within a byte budget on flash with LFU eviction. A look-up costs `embed_ms`
// (embedding the query) and `match_ms` (scoring the bank) on the pipeline's unit; both are
// measurements of the phone and model at hand and have no default (PerCache Table 1 measures
// 1,610 ms for the two on a Pixel 7). The look-up is one busy spell of embed_ms + match_ms; its
// time is recorded as the rag loop's two phases would be (match_ms last, so a wait in the unit's
// queue counts to the embedding, as to the loop's first phase).
//
// A served entry's text is the answer stored with it (the request's reference answer, which the
// LLM's answer stands for; an idle stage that writes the bank itself stores its own). Whether the
// entry is stale is for whoever knows the knowledge bank's retriever to judge (judge_staleness();
// without one, never).
//
// Parameters:
//   tau_query       similarity at or above which a cached answer is served (MeanCache: 0.85)
//   capacity_mb     flash the bank may hold
//   entry_kb        one entry's size on flash (PerCache Table 1: 4 KB)
//   embed_ms, match_ms
#include <functional>
#include <memory>

#include "policies/pipeline/answer_cache.h"
#include "policies/rag/qa_bank.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class SemanticAnswerCache : public AnswerCache {
 public:
  explicit SemanticAnswerCache(const Params& p);
  static ParamSchema schema();
  sim::Task<void> lookup(devices::Device& device, const std::string& unit, int priority, const Request& r,
                         AnswerLookup& out) override;
  void insert(const Request& r) override;
  double stored_bytes() const override { return bank_.used_bytes(); }
  // For the idle stages that work on the same bank (percache_scheduler, sleeptime).
  QaBank& bank() { return bank_; }
  double tau_query() const { return tau_; }
  // percache_scheduler's `schedule` (figure 15): the threshold changes between two requests.
  void set_tau_query(double tau) { tau_ = tau; }
  double embed_ms() const { return embed_ms_; }
  double match_ms() const { return match_ms_; }
  // Who tells whether a served entry is stale (the percache_scheduler / sleeptime stages' engine,
  // which knows the retriever and the chunks' arrivals); unset: no entry is.
  void judge_staleness(std::function<bool(const QaEntry&)> stale) { stale_ = std::move(stale); }

 private:
  double tau_, embed_ms_, match_ms_;
  QaBank bank_;
  std::function<bool(const QaEntry&)> stale_;
};

}  // namespace mobisim::policies::pipeline
