#pragma once
// RAGCache + Sleep-time Compute baseline (PerCache section 5.2): RAGCache keeps the
// K/V tree (reactive, user queries only, PGDSF) and Sleep-time Compute fills the
// QA bank with answers to questions predicted from raw context in idle time.
// Parameters: those of sleeptime and of ragcache.
#include "policies/rag/cache_engine.h"

namespace mobisim::policies {

class RagCacheSleepTimePolicy : public CachingPolicy {
 public:
  explicit RagCacheSleepTimePolicy(const Params& p);
  static ParamSchema schema();
  static EngineOptions options_from(const Params& p);
};

}  // namespace mobisim::policies
