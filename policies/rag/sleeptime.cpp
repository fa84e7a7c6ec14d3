#include "policies/rag/sleeptime.h"

#include "sim/registry.h"

namespace mobisim::policies {

void add_sleeptime_params(ParamSchema& s) {
  add_qa_params(s, 0.85);
  add_sleeptime_idle_params(s);
}

void add_sleeptime_idle_params(ParamSchema& s) {
  add_prediction_params(s);
  s.integer("initial_rounds", 2, "raw-context predictions before the first query").range(0, 10000);
  s.integer("rounds_per_idle", 1, "raw-context predictions after each query (after the quiet period)").range(0, 10000);
  s.integer("raw_window_chunks", 8, "raw chunks in each prediction prompt (round robin over the knowledge base)")
      .range(1, 100000);
  s.real("quiet_period_s", 600.0, "predictions after a query wait this long").non_negative().with_unit("s");
  s.boolean("store_served_queries", false,
            "also store each served user query's answer in the QA bank (MeanCache's reactive update). Off: "
            "PerCache section 5.2 lists Sleep-time Compute as the query-prediction baseline, apart from the "
            "reactive MeanCache, and its source (Lin et al. 2025) precomputes from the context only");
}

void read_sleeptime_params(const Params& p, EngineOptions& o) {
  read_qa_params(p, o);
  read_sleeptime_idle_params(p, o);
}

void read_sleeptime_idle_params(const Params& p, EngineOptions& o) {
  read_prediction_params(p, o);
  o.qa_bank = true;
  o.raw_context_prediction = true;
  o.predictions_fill_qa = true;
  o.predictions_fill_kv = false;
  o.raw_rounds_initial = p.integer("initial_rounds");
  o.raw_rounds_per_idle = p.integer("rounds_per_idle");
  o.raw_window_chunks = p.integer("raw_window_chunks");
  o.quiet_period_s = p.real("quiet_period_s");
  o.qa_stores_served = p.boolean("store_served_queries");
}

ParamSchema SleepTimePolicy::schema() {
  ParamSchema s;
  add_sleeptime_params(s);
  return s;
}

EngineOptions SleepTimePolicy::options_from(const Params& p) {
  EngineOptions o;
  read_sleeptime_params(p, o);
  return o;
}

SleepTimePolicy::SleepTimePolicy(const Params& p) : CachingPolicy(options_from(p), p) {}

MOBISIM_REGISTER(RagPolicy, SleepTimePolicy, "sleeptime",
                 "Sleep-time Compute: predict questions from raw context in idle time, precompute answers into a QA bank.")

}  // namespace mobisim::policies
