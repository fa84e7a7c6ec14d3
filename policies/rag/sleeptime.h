#pragma once
// Sleep-time Compute baseline (PerCache section 5.2; Lin et al. 2025), as the
// PerCache authors adapted it: in idle ("sleep") time the LLM reads the raw
// context (a window of `raw_window_chunks` knowledge chunks, round robin), predicts
// `prediction_stride` questions with the same B.3 prompt as PerCache's knowledge-
// based prediction (raw chunks in the abstract slot), and precomputes their answers
// (retrieve, prefill, decode) into a QA bank. User queries are served from that QA
// bank or by the full pipeline. Their answers are not cached (store_served_queries: false): the
// document lists Sleep-time as the query-prediction baseline, apart from MeanCache's reactive QA
// bank, and reports RAGCache + MeanCache as the best baseline, which it could not be if Sleep-time's
// bank held MeanCache's entries plus the predicted ones (docs/percache.md, "Figure 14 on QMSum").
// Parameters: tau_query 0.85, qa_capacity_mb 100, qa_entry_kb 4, prediction_stride 5,
//   initial_rounds 2 (before the first query, as PerCache's two knowledge rounds),
//   rounds_per_idle 1 (after each query, after quiet_period_s), raw_window_chunks 8,
//   predicted_answer_tokens 136, predictor, tokenizer, knowledge_type, charging_only,
//   store_served_queries false.
#include "policies/rag/cache_engine.h"

namespace mobisim::policies {

// Shared by sleeptime and ragcache_sleeptime.
void add_sleeptime_params(ParamSchema& s);
void read_sleeptime_params(const Params& p, EngineOptions& o);
// Its idle-work parameters alone (all but the QA bank's), shared with the pipeline's `sleeptime`
// idle stage.
void add_sleeptime_idle_params(ParamSchema& s);
void read_sleeptime_idle_params(const Params& p, EngineOptions& o);

class SleepTimePolicy : public CachingPolicy {
 public:
  explicit SleepTimePolicy(const Params& p);
  static ParamSchema schema();
  static EngineOptions options_from(const Params& p);
};

}  // namespace mobisim::policies
