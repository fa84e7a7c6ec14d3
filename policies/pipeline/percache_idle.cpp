#include "policies/pipeline/percache_idle.h"

#include "policies/rag/percache.h"
#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema PerCacheIdle::schema() {
  ParamSchema s;
  s.boolean("qa_bank", true,
            "run on the app's semantic answer cache (its QA bank); false: PerCache without its QA bank (figure 16's "
            "ablation), the app has no answer cache and a chunk_tree");
  s.real("embed_ms", std::nullopt,
         "with qa_bank: false (required then, refused otherwise): the query embedding's fixed cost, which the app "
         "counts in its retrieval_ms")
      .optional()
      .range(0, 1e9);
  add_percache_prediction_switches(s);
  add_prediction_params(s);
  add_percache_idle_params(s);
  s.text("reuse_mode", std::string("qkv_projection"),
         "what a background prefill saves per cached token: qkv_projection (chunk_tree payload qkv) | kv_projection | "
         "prefix_skip (payload kv)")
      .in({"qkv_projection", "kv_projection", "prefix_skip"});
  s.node("schedule",
         "mid-run changes (PerCache figure 15), applied once N requests are served, before the next one's look-ups: "
         "[{after_query: N, set: {tau_query (the answer cache's) | storage_limit_gb (the chunk_tree's) | scheduler | "
         "conversions: V}}]");
  return s;
}

namespace {
EngineOptions percache_idle_options(const Params& p) {
  EngineOptions o;
  o.qa_bank = p.boolean("qa_bank");  // link() checks the app's answer cache matches
  if (!o.qa_bank && !p.has("embed_ms"))
    p.fail("embed_ms", "qa_bank: false needs embed_ms (the query embedding's fixed cost; with a QA bank it is the "
                       "answer cache's)");
  if (o.qa_bank && p.has("embed_ms"))
    p.fail("embed_ms", "is for qa_bank: false only: with the QA bank the query embedding costs the answer cache's "
                       "embed_ms");
  o.reuse = parse_reuse_mode(p.text("reuse_mode"));
  read_percache_idle_params(p, o);
  o.schedule = parse_schedule(p, "schedule");  // the percache policy's parser; link() checks the owners
  return o;
}
}  // namespace

PerCacheIdle::PerCacheIdle(const Params& p) : CachingIdle(percache_idle_options(p), p, "percache_scheduler") {
  if (!p.boolean("qa_bank")) run_without_answer_cache(p.real("embed_ms"));
}

// Predicted queries fill the tree when the app has one (PerCache's two layers).
void PerCacheIdle::complete_options(EngineOptions& o) const { o.predictions_fill_kv = o.kv_cache; }

MOBISIM_REGISTER(IdleStage, PerCacheIdle, "percache_scheduler",
                 "PerCache's idle work: query prediction, cache scheduler, conversions, refresh and deferred cache "
                 "writes, on the app's semantic answer cache (and chunk_tree; qa_bank: false: on the chunk_tree only).")

}  // namespace mobisim::policies::pipeline
