#pragma once
// `sleeptime`: Sleep-time Compute (PerCache section 5.2's baseline, as the `sleeptime` rag policy)
// as the pipeline's idle stage, run by the rag policies' caching engine (caching_idle.h) on the
// app's `semantic` answer cache (required). In idle time the LLM reads a window of raw knowledge
// chunks (round robin), predicts questions with PerCache's B.3 prompt, and answers them (retrieve,
// prefill, decode) into the QA bank. Served queries' answers join the bank only with
// store_served_queries (default false, as the rag policy), then in idle time; either way the
// pipeline does not insert them. With a `chunk_tree` KV-reuse stage (the
// `ragcache_sleeptime` combination) the tree keeps the served queries' slices only, also written
// in idle time; predictions never fill it. A job starts only when its estimate fits before the
// next request; one overtaken by a request stops at its next step.
//
// The QA bank's threshold and capacity are the answer cache's; the fixed costs of the background
// steps are the answer cache's embed_ms and match_ms and the app's retrieval_ms and kv_match_ms.
// Needs a RAG workload (`workload:`) with chunk texts and query embeddings.
//
// Parameters (the `sleeptime` rag policy's, without the QA bank's):
//   prediction_stride 5, predicted_answer_tokens 136, predicted_answer_words 60, knowledge_type,
//   tokenizer, predictor {impl: generator|file|oracle}, charging_only false, background_recheck_s 60
//   initial_rounds 2, rounds_per_idle 1, raw_window_chunks 8, quiet_period_s 600,
//   store_served_queries false
//   reuse_mode   with a chunk_tree, what a background prefill saves per cached token:
//                kv_projection (default; payload kv) | prefix_skip (payload kv) | qkv_projection (payload qkv)
#include "policies/pipeline/caching_idle.h"

namespace mobisim::policies::pipeline {

class SleepTimeIdle : public CachingIdle {
 public:
  explicit SleepTimeIdle(const Params& p);
  static ParamSchema schema();
};

}  // namespace mobisim::policies::pipeline
