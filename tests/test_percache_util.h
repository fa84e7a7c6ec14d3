#pragma once
// Helpers for the PerCache tests: run one user's queries under a policy exactly
// as the rag_qa driver does (idle until the arrival, then serve), on a Pixel 7
// with Llama-3.2-3B as mllm runs it.
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "devices/device.h"
#include "models/cost_model.h"
#include "policies/rag/cache_engine.h"
#include "policies/rag/rag_policy.h"
#include "sim/registry.h"
#include "sim/simulator.h"
#include "traces/generator.h"

namespace mobisim::policies::testing {

inline models::ModelSpec llama_fp32_act() {
  models::ModelSpec m = models::load_model_spec("llama-3.2-3b");
  m.weight_dtype = models::DType::kInt4;
  m.activation_dtype = models::DType::kF32;
  m.kv_dtype = models::DType::kF32;
  return m;
}

inline PipelineConfig table1_pipeline() {
  PipelineConfig c;
  c.compute_unit = "cpu";
  c.system_prompt_tokens = 64;
  c.top_k = 3;
  c.embed_query_ms = 1600;
  c.qa_match_ms = 10;
  c.retrieval_ms = 3940;
  c.kv_match_ms = 15;
  return c;
}

// A generated workload (the built-in generator with overrides, e.g. "users: 1").
inline traces::RagTrace generated(const std::string& overrides_yaml = "users: 2\nqueries: {per_user: 12}") {
  return traces::generate_rag_trace_from_yaml(YAML::Load(overrides_yaml), "test-generator", 1);
}

inline std::unique_ptr<RagPolicy> make_policy(const std::string& yaml) {
  return Registry<RagPolicy>::instance().create(YAML::Load(yaml), ConfigSource{nullptr, "policy"});
}

struct UserRun {
  std::vector<QueryRecord> records;
  std::unique_ptr<RagPolicy> policy;
  double mean_latency() const {
    double s = 0;
    for (const auto& r : records) s += r.latency_s();
    return records.empty() ? 0 : s / static_cast<double>(records.size());
  }
  double total_flops() const {
    double s = 0;
    for (const auto& r : records) s += r.flops + r.bg_flops;
    return s;
  }
  const CachingPolicy& caching() const { return dynamic_cast<const CachingPolicy&>(*policy); }
};

inline sim::Task<void> replay_user(sim::Simulator& sim, RagPolicy& policy, RagPipeline& pipe,
                                   const traces::UserTrace& user, std::vector<QueryRecord>& out) {
  policy.begin_user(pipe);
  for (std::size_t i = 0; i < user.queries.size(); ++i) {
    const auto& q = user.queries[i];
    const sim::Time arrival = sim::from_seconds(q.arrival_s);
    if (sim.now() < arrival) {
      co_await policy.idle(pipe, arrival);
      if (sim.now() < arrival) co_await sim.timeout(arrival - sim.now());
    }
    QueryRecord rec;
    const QueryRecord bg = pipe.background();
    rec.bg_flops = bg.flops;
    rec.bg_energy_j = bg.active_energy_j;
    rec.bg_s = bg.prefill_s + bg.decode_s + bg.load_s + bg.embed_s + bg.retrieval_s + bg.kv_match_s;
    rec.bg_jobs = pipe.background_jobs();
    pipe.background() = QueryRecord{};
    pipe.background_jobs() = 0;
    rec.query_index = static_cast<std::int64_t>(i);
    rec.arrival_s = q.arrival_s;
    rec.start_s = sim::to_seconds(sim.now());
    co_await policy.serve(pipe, q, rec);
    rec.end_s = sim::to_seconds(sim.now());
    out.push_back(rec);
  }
}

inline UserRun run_user(const std::string& policy_yaml, const traces::RagTrace& trace, std::size_t user_index = 0,
                        PipelineConfig cfg = table1_pipeline(),
                        std::shared_ptr<const KnowledgeIndex> index = nullptr) {
  UserRun r;
  r.policy = make_policy(policy_yaml);
  const models::CostModel cost(llama_fp32_act());
  r.policy->check_workload(trace, cost);
  sim::Simulator sim;
  sim::StatGroup stats("test");
  devices::Device device(sim, devices::load_device_profile("pixel7"), stats.child("device"));
  const auto& user = trace.users.at(user_index);
  RagPipeline pipe(sim, device, cost, cfg, user, stats, std::move(index));
  sim.start(replay_user(sim, *r.policy, pipe, user, r.records), "user");
  sim.run();
  return r;
}

inline double mean_over_users(const std::string& policy_yaml, const traces::RagTrace& trace) {
  double s = 0;
  std::size_t n = 0;
  for (std::size_t u = 0; u < trace.users.size(); ++u) {
    const auto run = run_user(policy_yaml, trace, u);
    for (const auto& rec : run.records) s += rec.latency_s();
    n += run.records.size();
  }
  return n ? s / static_cast<double>(n) : 0;
}

using mobisim::testing::shared_dir;

}  // namespace mobisim::policies::testing
