#pragma once
// Helpers of the pipeline-stage tests: a hand-made RAG workload and a pipeline app run alone on a phone.
#include <map>
#include <string>
#include <vector>

#include "experiments/simulation.h"
#include "policies/apps/pipeline_app.h"
#include "policies/pipeline/pipeline.h"
#include "traces/rag_trace.h"

namespace mobisim::testing {

// One user, three 100-token chunks; every query retrieves all three, so consecutive prompts share
// the system prompt and the chunks and differ only in the query. Query i arrives at 1000 i s.
inline traces::RagTrace three_chunk_workload(int queries, std::int32_t query_tokens, std::int32_t answer_tokens = 4) {
  traces::RagTrace t;
  traces::UserTrace u;
  u.user_id = "u0";
  for (int c = 0; c < 3; ++c) {
    traces::Chunk ch;
    ch.tokens = 100;
    u.chunks.push_back(ch);
  }
  for (int i = 0; i < queries; ++i) {
    traces::Query q;
    q.arrival_s = 1000.0 * i;
    q.tokens = query_tokens;
    q.answer_tokens = answer_tokens;
    q.retrieved = {0, 1, 2};
    u.queries.push_back(q);
  }
  t.users.push_back(u);
  return t;
}

// What a pipeline app served, alone on `profile`, and the DRAM ledger's peak per owner.
struct PipelineRun {
  std::vector<policies::pipeline::Served> served;
  std::map<std::string, double> peaks;
};

// Serves `requests` in order on `pipeline`, each at its arrival time, appending what it served to `out`.
inline sim::Task<void> serve_at_arrivals(sim::Simulator& sim, devices::Device& device,
                                         policies::pipeline::Pipeline& pipeline,
                                         const std::vector<policies::pipeline::Request>& requests,
                                         std::vector<policies::pipeline::Served>& out) {
  // Named strings: g++ 12 destroys a temporary std::string in a co_await expression twice.
  const std::string owner = "app", kv_owner = "app/kv";
  co_await pipeline.start(device, owner);
  for (const policies::pipeline::Request& r : requests) {
    const sim::Time at = sim::from_seconds(r.arrival_s);
    if (sim.now() < at) co_await sim.timeout(at - sim.now());
    policies::pipeline::Served s;
    co_await pipeline.serve(device, kv_owner, r, s);
    out.push_back(s);
  }
}

inline PipelineRun run_pipeline_alone(policies::App& app, const devices::DeviceProfile& profile) {
  sim::StatGroup stats("phone");
  experiments::SimulatedRun run(profile, stats.child("device"));
  run.start(app.run(run.device(), "app", stats.child("app")), "app");
  run.run();
  return {dynamic_cast<policies::PipelineApp&>(app).served(), run.device().dram().owner_peaks()};
}

}  // namespace mobisim::testing
