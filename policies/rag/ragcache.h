#pragma once
// RAGCache baseline (PerCache section 5.2; Jin et al. 2024): a knowledge tree of
// K/V tensors only, populated reactively by user queries, matched in retrieved
// order (the order must match), replaced with PGDSF:
//   priority = clock + frequency x cost / size, clock = priority of the last victim.
// Parameters:
//   storage_limit_gb 8; reuse_mode kv_projection (default: as the PerCache authors evaluated it,
//   K/V reused, Q recomputed) or prefix_skip (RAGCache proper: no compute for cached positions);
//   eviction pgdsf (or lfu); boundary_rules true, boundary_tokens 4.
#include "policies/rag/cache_engine.h"

namespace mobisim::policies {

class RagCachePolicy : public CachingPolicy {
 public:
  explicit RagCachePolicy(const Params& p);
  static ParamSchema schema();
  static EngineOptions options_from(const Params& p);
};

}  // namespace mobisim::policies
