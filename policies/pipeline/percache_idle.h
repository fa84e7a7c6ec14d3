#pragma once
// `percache_scheduler`: PerCache's idle work (seed 000, sections 4.1.2-4.3) as the pipeline's idle
// stage, run by the rag policies' caching engine (caching_idle.h) on the app's `semantic` answer
// cache (the QA bank; required) and `chunk_tree` KV-reuse stage (the QKV tree; optional: with any
// other KV-reuse stage the predictions fill the QA bank only). Between requests it writes the
// served query's new slices and QA entry (deferred: the pipeline does not store them), generates a
// QA hit's real answer, builds the knowledge abstract, predicts queries (knowledge-based before
// the first query and when chunks arrive, history-based after a quiet period) and populates the
// caches with them, under the cache scheduler (prefill-only when tau_query > tau_scheduler), the
// conversions QKV->QA and QA->QKV, and the dynamic refresh. A job starts only when its estimate
// fits before the next request; one overtaken by a request stops at its next step.
//
// The QA bank's threshold and capacity are the answer cache's (tau_query, capacity_mb), the
// tree's limit, eviction and boundary rules the chunk_tree's; the fixed costs of the background
// steps are the answer cache's embed_ms and match_ms and the app's retrieval_ms and kv_match_ms.
// Needs a RAG workload (`workload:`) with chunk texts and query embeddings.
//
// qa_bank: false (figure 16's 'w/o QA bank', as the `percache` rag policy's): the app has no answer
// cache and must have a chunk_tree; the engine keeps no QA bank (predictions fill the tree only,
// no QA hit, no answer generated later, no conversion, no refresh). The pipeline then has no stage
// that embeds the query, so the app's retrieval_ms counts the embedding too, and `embed_ms`
// (required then, a ConfigError otherwise) says how much of it: the engine's background
// embeddings cost embed_ms, its background retrievals the app's retrieval_ms minus embed_ms.
//
// Parameters (PerCache's, as the `percache` rag policy's; defaults are the paper's, section 5.4):
//   qa_bank true, embed_ms (qa_bank: false only)
//   prediction, knowledge_prediction, history_prediction   the prediction switches (true)
//   prediction_stride 5, predicted_answer_tokens 136, predicted_answer_words 60, knowledge_type,
//   tokenizer, predictor {impl: generator|file|oracle}, charging_only false, background_recheck_s 60
//   knowledge_rounds 2, quiet_period_s 600, history_buffer 5, abstract_source key_phrases|topics,
//   abstract_batch_chunks 8, abstract_quiet_s 600
//   scheduler true, tau_scheduler 0.875, conversions true, answer_hits_later true, refresh true,
//   k_refresh 3
//   reuse_mode   what a background prefill saves per cached token: qkv_projection (default; the
//                chunk_tree must store payload: qkv) | kv_projection | prefix_skip (payload: kv)
//   schedule     mid-run changes, as the `percache` rag policy's (figure 15; default none):
//                [{after_query: N, set: {tau_query|storage_limit_gb|scheduler|conversions: V}}].
//                Applied by the engine once N requests have been served, at the start of the idle
//                time after request N-1 (when the next request is already due, there is none: at
//                the next idle time), i.e. where the rag loop applies it; so request N is the
//                first one whose look-up sees the new values. tau_query changes the answer cache's
//                threshold (and the engine's: the scheduler's prefill-only test, the QKV->QA
//                conversion), storage_limit_gb the chunk_tree's limit (lowering it evicts at once;
//                without a chunk_tree it is a ConfigError), scheduler and conversions this stage's.
//                Entries in after_query order; unknown keys in `set` are ConfigErrors.
#include "policies/pipeline/caching_idle.h"

namespace mobisim::policies::pipeline {

class PerCacheIdle : public CachingIdle {
 public:
  explicit PerCacheIdle(const Params& p);
  static ParamSchema schema();

 private:
  void complete_options(EngineOptions& o) const override;
};

}  // namespace mobisim::policies::pipeline
