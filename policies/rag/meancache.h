#pragma once
// MeanCache baseline (PerCache section 5.2; Gill et al. 2024): a reactive
// semantic cache of (query, answer) pairs for one user. A query whose embedding
// is at least `tau_query` similar to a cached query gets the cached answer; a
// miss runs the full RAG pipeline and its (query, answer) is cached. No
// prediction, no KV reuse.
// Parameters: tau_query 0.85 (its own threshold), qa_capacity_mb 100, qa_entry_kb 4.
#include "policies/rag/cache_engine.h"

namespace mobisim::policies {

class MeanCachePolicy : public CachingPolicy {
 public:
  explicit MeanCachePolicy(const Params& p);
  static ParamSchema schema();
  static EngineOptions options_from(const Params& p);
};

}  // namespace mobisim::policies
