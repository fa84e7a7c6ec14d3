#include "policies/rag/ragcache.h"

#include "sim/registry.h"

namespace mobisim::policies {

ParamSchema RagCachePolicy::schema() {
  ParamSchema s;
  add_kv_params(s, "kv_projection", "pgdsf");
  return s;
}

EngineOptions RagCachePolicy::options_from(const Params& p) {
  EngineOptions o;
  read_kv_params(p, o);
  o.kv_cache = true;
  return o;
}

RagCachePolicy::RagCachePolicy(const Params& p) : CachingPolicy(options_from(p), p) {}

MOBISIM_REGISTER(RagPolicy, RagCachePolicy, "ragcache",
                 "RAGCache: reactive K/V knowledge tree in retrieved order with PGDSF replacement.")

}  // namespace mobisim::policies
