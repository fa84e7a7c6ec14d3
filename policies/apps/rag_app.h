#pragma once
// `rag`: a RAG assistant. One user's queries (from a trace or a generator) served by any RAG
// policy (naive, PerCache, RAGCache, MeanCache, Sleep-time and their combinations) through the
// RAG pipeline, on the phone it shares with the other apps. The policy is served as its pipeline
// stages (policies/apps/rag_policy_stages.h), as the rag_qa experiment serves it: a `pipeline` app
// (policies/apps/pipeline_app.h) over the user's queries, every request's work events on the
// shared Device at the app's priority, the idle stage's work between requests, the request's K/V
// in the phone's DRAM ledger as "<app label>/kv" while it is answered (issue 34: the policies' own
// replay loop is gone). Each served request becomes the QueryRecord the loop wrote
// (record_of_served); records and totals keep their columns. As every pipeline app, a background
// rag app waits for headroom before each request (App::wait_for_headroom; the loop did not). A
// policy without a stage translation, or a key no stage carries, is a ConfigError naming it.
//
// Parameters (besides priority and start_s, see app.h):
//   model        built-in name, YAML path or {base: NAME, field: override}
//   pipeline     the RAG pipeline's settings (compute_unit, top_k, fixed costs; PipelineConfig)
//   policy       {impl: NAME, ...its parameters} of the rag_policy registry
//   workload     {trace: FILE.h5} or {generate: default|PATH|{...}} (as rag_qa's workload)
//   user         the user replayed (a user id; empty: the workload's first user)
//   max_queries  replay only the first N queries (0: all)
//   interarrival_s  re-time the queries: query i arrives at start_s + i x interarrival_s (0: the
//                workload's own arrivals, shifted by start_s). A generated or real trace spreads a
//                user's queries over days; a study of apps sharing the phone needs them to meet.
#include <memory>
#include <vector>

#include "models/cost_model.h"
#include "policies/apps/app.h"
#include "policies/apps/pipeline_app.h"
#include "policies/apps/rag_policy_stages.h"
#include "policies/rag/rag_policy.h"

namespace mobisim::policies {

class RagApp : public App {
 public:
  explicit RagApp(const Params& p);
  static ParamSchema schema();

  void prepare(const AppEnvironment& env) override;
  std::vector<std::pair<std::string, double>> resident_dram() const override;
  sim::Task<void> run(devices::Device& device, std::string owner, sim::StatGroup& stats) override;
  void records(h5::Table& out) const override;
  AppTotals totals() const override;
  YAML::Node resolved() const override { return resolved_; }
  std::string model_name() const override { return cost_.spec().name; }
  std::string unit() const override { return pipeline_.compute_unit; }
  std::vector<std::pair<double, double>> charging_windows() const override {
    std::vector<std::pair<double, double>> out;
    for (const auto& w : user_.idle_windows)
      if (w.charging) out.emplace_back(w.start_s, w.end_s);
    return out;
  }

 private:
  models::CostModel cost_;
  PipelineConfig pipeline_;
  std::unique_ptr<RagPolicy> policy_;  // checks the workload; its stages serve it
  YAML::Node workload_;
  ConfigSource workload_source_;
  std::string user_id_;
  std::int64_t max_queries_;
  double interarrival_s_;
  YAML::Node resolved_;
  PolicyStages stages_;                    // the policy as pipeline stages
  std::unique_ptr<PipelineApp> served_by_;  // those stages over this app's user
  std::unique_ptr<PipelineApp> stages_app(const Params& p) const;
  // Set by prepare(): the user, re-timed; by run(): one record per query served.
  traces::UserTrace user_;
  std::vector<QueryRecord> records_;
};

}  // namespace mobisim::policies
