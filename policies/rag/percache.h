#pragma once
// PerCache (seed 000: "Predictive Hierarchical Cache for RAG Applications on
// Mobile Devices"), all of section 4: a QA bank (tau_query, 100 MB, LFU) over a
// Q/K/V knowledge cache tree (per-chunk slices, LFU under storage_limit_gb,
// on-demand loading, B.2 boundary rules), populated by query prediction in idle
// time (knowledge-based from a batched knowledge abstract, history-based after a
// quiet period; `prediction_stride` queries each), a cache scheduler
// (prefill-only population above tau_scheduler) and the cross-layer conversions
// QKV->QA and QA->QKV. The machinery lives in cache_engine.h.
//
// Parameters (defaults are the paper's settings; section 5.4):
//   tau_query 0.85, qa_capacity_mb 100, qa_entry_kb 4
//   storage_limit_gb 8, reuse_mode qkv_projection (or prefix_skip / kv_projection), eviction lfu,
//   boundary_rules true, boundary_tokens 4
//   prediction_stride 5, knowledge_rounds 2 (predictions before the first query, section 5.3),
//   quiet_period_s 600, history_buffer 5, abstract_source key_phrases|topics, abstract_batch_chunks 8,
//   abstract_quiet_s 600, predicted_answer_tokens 136, predictor {impl: generator|file|oracle}
//   scheduler true, tau_scheduler 0.875, conversions true, charging_only false
//   schedule: [{after_query: N, set: {tau_query|storage_limit_gb|scheduler|conversions: V}}]
// Ablations (figure 16): qa_bank: false, qkv_cache: false, prediction: false.
#include "policies/rag/cache_engine.h"

namespace mobisim::policies {

// PerCache's idle-work parameters, shared with the pipeline's `percache_scheduler` idle stage:
// the three prediction switches (prediction, knowledge_prediction, history_prediction), and
// knowledge_rounds .. k_refresh. read_percache_idle_params also reads add_prediction_params' keys and
// needs o.qa_bank and o.kv_cache set first.
void add_percache_prediction_switches(ParamSchema& s);
void add_percache_idle_params(ParamSchema& s);
void read_percache_idle_params(const Params& p, EngineOptions& o);

class PerCachePolicy : public CachingPolicy {
 public:
  explicit PerCachePolicy(const Params& p);
  static ParamSchema schema();
  static EngineOptions options_from(const Params& p);
};

}  // namespace mobisim::policies
