#pragma once
// `reactive_store`: the reactive cache update of RAGCache and MeanCache (PerCache section 5.2's
// baselines "reactively update" their caches with the queries they receive) as the pipeline's idle
// stage, run by the rag policies' caching engine (caching_idle.h) exactly as the `ragcache`,
// `meancache` and `ragcache_meancache` rag policies run it in their own loop: a served query's QA
// entry (into the app's `semantic` answer cache, when it has one) and its new slices (into the
// app's `chunk_tree`, when it has one) are written by one deferred store job in idle time, which
// starts only when its estimate (plan.seconds x 1.02 + 0.5 s) fits before the next request; a query
// that arrives while the previous one is served (or too soon after) finds the cache without it, and
// the job waits for the next idle period long enough. No prediction, no sleep-time compute, no
// conversion, no refresh: the stage only stores what was served (the pipeline does not store it
// after the answer).
//
// The app needs a `semantic` answer cache, a `chunk_tree` KV-reuse stage, or both (a ConfigError
// otherwise, naming the stage): their threshold, capacity, limit, eviction and boundary rules are
// the stages'. The store job only writes to flash (its slices; a QA entry costs no time), so it
// runs no embedding, retrieval, prefill or decode: the fixed costs and units are not its concern.
// Needs a RAG workload (`workload:`): the engine stores slices by the workload's chunk ids.
//
// Parameters:
//   reuse_mode   with a chunk_tree, what a served prefill saved per cached token, which fixes the
//                bytes a slice takes: kv_projection (default, as ragcache's; payload kv) |
//                prefix_skip (payload kv) | qkv_projection (payload qkv)
#include "policies/pipeline/caching_idle.h"

namespace mobisim::policies::pipeline {

class ReactiveStoreIdle : public CachingIdle {
 public:
  explicit ReactiveStoreIdle(const Params& p);
  static ParamSchema schema();
};

}  // namespace mobisim::policies::pipeline
