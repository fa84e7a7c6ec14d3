#include "policies/rag/ragcache_sleeptime.h"

#include "policies/rag/sleeptime.h"
#include "sim/registry.h"

namespace mobisim::policies {

ParamSchema RagCacheSleepTimePolicy::schema() {
  ParamSchema s;
  add_sleeptime_params(s);
  add_kv_params(s, "kv_projection", "pgdsf");
  return s;
}

EngineOptions RagCacheSleepTimePolicy::options_from(const Params& p) {
  EngineOptions o;
  read_sleeptime_params(p, o);
  read_kv_params(p, o);
  o.kv_cache = true;
  o.predictions_fill_kv = false;  // the tree is RAGCache's: user queries only
  return o;
}

RagCacheSleepTimePolicy::RagCacheSleepTimePolicy(const Params& p) : CachingPolicy(options_from(p), p) {}

MOBISIM_REGISTER(RagPolicy, RagCacheSleepTimePolicy, "ragcache_sleeptime",
                 "RAGCache + Sleep-time Compute: reactive K/V tree plus a QA bank precomputed from raw-context predictions.")

}  // namespace mobisim::policies
