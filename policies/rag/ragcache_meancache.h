#pragma once
// RAGCache + MeanCache baseline (PerCache section 5.2): a hand-made hierarchical
// cache. MeanCache's reactive QA bank in front of RAGCache's reactive K/V tree
// (PGDSF). Both are populated only by user queries.
// Parameters: those of meancache (tau_query, qa_capacity_mb, qa_entry_kb) and of
// ragcache (storage_limit_gb, reuse_mode kv_projection, eviction pgdsf, boundary_*).
#include "policies/rag/cache_engine.h"

namespace mobisim::policies {

class RagCacheMeanCachePolicy : public CachingPolicy {
 public:
  explicit RagCacheMeanCachePolicy(const Params& p);
  static ParamSchema schema();
  static EngineOptions options_from(const Params& p);
};

}  // namespace mobisim::policies
