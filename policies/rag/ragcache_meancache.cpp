#include "policies/rag/ragcache_meancache.h"

#include "sim/registry.h"

namespace mobisim::policies {

ParamSchema RagCacheMeanCachePolicy::schema() {
  ParamSchema s;
  add_qa_params(s, 0.85);
  add_kv_params(s, "kv_projection", "pgdsf");
  return s;
}

EngineOptions RagCacheMeanCachePolicy::options_from(const Params& p) {
  EngineOptions o;
  read_qa_params(p, o);
  read_kv_params(p, o);
  o.qa_bank = true;
  o.kv_cache = true;
  return o;
}

RagCacheMeanCachePolicy::RagCacheMeanCachePolicy(const Params& p) : CachingPolicy(options_from(p), p) {}

MOBISIM_REGISTER(RagPolicy, RagCacheMeanCachePolicy, "ragcache_meancache",
                 "RAGCache + MeanCache: reactive QA bank in front of a reactive K/V tree (PGDSF).")

}  // namespace mobisim::policies
