#include "policies/pipeline/reactive_store_idle.h"

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema ReactiveStoreIdle::schema() {
  ParamSchema s;
  s.text("reuse_mode", std::string("kv_projection"),
         "with a chunk_tree: what a served prefill saved per cached token (the slices' bytes): kv_projection | "
         "prefix_skip (chunk_tree payload kv) | qkv_projection (payload qkv)")
      .in({"qkv_projection", "kv_projection", "prefix_skip"});
  return s;
}

namespace {
// The ragcache / meancache engine's options: only the layers (link() takes them from the app's
// stages) and what a slice holds; every prediction, scheduler and conversion switch stays off.
EngineOptions reactive_store_options(const Params& p) {
  EngineOptions o;
  o.reuse = parse_reuse_mode(p.text("reuse_mode"));
  return o;
}
}  // namespace

ReactiveStoreIdle::ReactiveStoreIdle(const Params& p) : CachingIdle(reactive_store_options(p), p, "reactive_store") {
  work_on_the_apps_caches();
}

MOBISIM_REGISTER(IdleStage, ReactiveStoreIdle, "reactive_store",
                 "RAGCache / MeanCache's reactive update: a served query's QA entry and new slices written by a "
                 "deferred store job in idle time, on the app's semantic answer cache and/or chunk_tree.")

}  // namespace mobisim::policies::pipeline
