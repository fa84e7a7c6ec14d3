#include "policies/rag/meancache.h"

#include "sim/registry.h"

namespace mobisim::policies {

ParamSchema MeanCachePolicy::schema() {
  ParamSchema s;
  add_qa_params(s, 0.85);
  return s;
}

EngineOptions MeanCachePolicy::options_from(const Params& p) {
  EngineOptions o;
  read_qa_params(p, o);
  o.qa_bank = true;
  return o;
}

MeanCachePolicy::MeanCachePolicy(const Params& p) : CachingPolicy(options_from(p), p) {}

MOBISIM_REGISTER(RagPolicy, MeanCachePolicy, "meancache",
                 "MeanCache: reactive semantic QA cache (embedding similarity >= tau_query returns the cached answer).")

}  // namespace mobisim::policies
