#include "policies/rag/percache.h"

#include "sim/registry.h"

namespace mobisim::policies {

// Prediction switches (before the shared groups, as the policy has always listed them).
void add_percache_prediction_switches(ParamSchema& s) {
  s.boolean("prediction", true, "predict queries in idle time (false: ablation 'w/o prediction')");
  s.boolean("knowledge_prediction", true, "knowledge-based prediction from the knowledge abstract");
  s.boolean("history_prediction", true, "history-based prediction from the recent-query buffer");
}

void add_percache_idle_params(ParamSchema& s) {
  s.integer("knowledge_rounds", 2, "knowledge-based predictions before the first query (section 5.3: twice)")
      .range(0, 10000);
  s.real("quiet_period_s", 600.0, "history-based prediction runs this long after the last query").non_negative().with_unit("s");
  s.integer("history_buffer", 5, "recent queries kept for history-based prediction").range(1, 100000);
  s.text("abstract_source", std::string("key_phrases"),
         "knowledge abstract items: key_phrases (extracted from the chunks only) | topics (the trace's annotated "
         "topic list, e.g. QMSum topic_list: leaks the annotation the queries were written from)")
      .in({"topics", "key_phrases"});
  s.integer("abstract_batch_chunks", 8, "chunks summarised per abstract prompt (batched)").range(1, 100000);
  s.real("abstract_quiet_s", 600.0, "abstract generation waits this long after the last new chunk").non_negative().with_unit("s");
  s.boolean("scheduler", true, "cache scheduler: prefill-only population of predicted queries when tau_query > tau_scheduler");
  s.real("tau_scheduler", 0.875, "the scheduler's cutoff similarity threshold").range(0, 1);
  s.boolean("conversions", true, "cross-layer conversions QKV->QA and QA->QKV in idle time (with the scheduler)");
  s.boolean("answer_hits_later", true, "generate the real answer of a QA-hit query in idle time and store it");
  s.boolean("refresh", true,
            "dynamic refresh (4.1.3): when chunks join the knowledge bank, re-generate in idle time the QA entries "
            "whose query ranks a new chunk in its top-k_refresh");
  s.integer("k_refresh", 3, "the refresh rank cutoff k_refresh").range(1, 10000);
}

void read_percache_idle_params(const Params& p, EngineOptions& o) {
  read_prediction_params(p, o);
  const bool predict = p.boolean("prediction");
  o.knowledge_prediction = predict && p.boolean("knowledge_prediction");
  o.history_prediction = predict && p.boolean("history_prediction");
  o.predictions_fill_kv = o.kv_cache;
  o.predictions_fill_qa = o.qa_bank;
  o.knowledge_rounds = p.integer("knowledge_rounds");
  o.quiet_period_s = p.real("quiet_period_s");
  o.history_buffer = p.integer("history_buffer");
  o.abstract_source = p.text("abstract_source");
  o.abstract_batch_chunks = p.integer("abstract_batch_chunks");
  o.abstract_quiet_s = p.real("abstract_quiet_s");
  o.scheduler = p.boolean("scheduler");
  o.tau_scheduler = p.real("tau_scheduler");
  o.conversions = p.boolean("conversions");
  o.qa_answer_hits_later = p.boolean("answer_hits_later") && o.qa_bank;
  o.refresh = p.boolean("refresh") && o.qa_bank;
  o.k_refresh = p.integer("k_refresh");
}

ParamSchema PerCachePolicy::schema() {
  ParamSchema s;
  s.boolean("qa_bank", true, "use the QA bank layer (false: ablation 'w/o QA bank')");
  s.boolean("qkv_cache", true, "use the QKV cache tree layer (false: ablation 'w/o QKV cache')");
  add_percache_prediction_switches(s);
  add_qa_params(s, 0.85);
  add_kv_params(s, "qkv_projection", "lfu");
  add_prediction_params(s);
  add_percache_idle_params(s);
  s.node("schedule", "mid-run changes: [{after_query: N, set: {tau_query|storage_limit_gb|scheduler|conversions: V}}]");
  return s;
}

EngineOptions PerCachePolicy::options_from(const Params& p) {
  EngineOptions o;
  read_qa_params(p, o);
  read_kv_params(p, o);
  o.qa_bank = p.boolean("qa_bank");
  o.kv_cache = p.boolean("qkv_cache");
  read_percache_idle_params(p, o);
  o.schedule = parse_schedule(p, "schedule");
  if (!o.qa_bank && !o.kv_cache) p.fail("qa_bank", "PerCache needs at least one cache layer (qa_bank or qkv_cache)");
  return o;
}

PerCachePolicy::PerCachePolicy(const Params& p) : CachingPolicy(options_from(p), p) {}

MOBISIM_REGISTER(RagPolicy, PerCachePolicy, "percache",
                 "PerCache: QA bank + QKV cache tree, query prediction in idle time, cache scheduler, conversions.")

}  // namespace mobisim::policies
