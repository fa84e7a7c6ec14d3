#pragma once
// Helpers for the PerCache tests: run one user's queries under a RagPolicy's own request loop
// (idle until the arrival, then serve), on a Pixel 7 with Llama-3.2-3B as mllm runs it. No driver
// replays with that loop any more (issue 34: rag_qa and the phone's rag app serve the policy's
// pipeline stages); test_percache_policy.cpp and test_ragpolicy_pipeline.cpp still test the
// policies' engine through it, and the stage tests compare with its values pinned in
// test_pipeline_percache_loop_values.h.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "test_pipeline_util.h"
#include "test_pipeline_percache_loop_values.h"
#include "experiments/simulation.h"
#include "policies/apps/app.h"
#include "sim/h5.h"
#include "devices/device.h"
#include "models/cost_model.h"
#include "policies/kvsplit/kv_split.h"
#include "policies/pipeline/caching_idle.h"
#include "policies/pipeline/pipeline.h"
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

// -------------------------------------------------------------------------------------------------
// PerCache's stages on the request pipeline, run against the old loop's pinned values (issue 34;
// test_pipeline_percache_loop_values.h): the helpers of
// test_pipeline_percache_idle.cpp, shared with test_pipeline_percache_schedule.cpp. A namespace of
// their own: test files with `using namespace policies::testing` keep their own `stage`, `run_pipeline`.
// -------------------------------------------------------------------------------------------------
namespace mobisim::policies::testing::stages {

template <class T>
std::unique_ptr<T> stage(const std::string& yaml) {
  return Registry<T>::instance().create(YAML::Load(yaml), ConfigSource{nullptr, "stage"});
}

inline constexpr double kUnknownNextArrival = -1;  // Request::next_arrival_s: the next request's time is not known

// The queries as the pipeline app lays them out (system prompt, top-k retrieved chunks, query),
// each told when the next one is due (`next_known`) or not.
inline std::vector<pipeline::Request> requests_of(const traces::UserTrace& u, const PipelineConfig& cfg,
                                                  bool next_known) {
  std::vector<pipeline::Request> out;
  for (std::size_t i = 0; i < u.queries.size(); ++i) {
    const traces::Query& q = u.queries[i];
    pipeline::Request r;
    r.id = static_cast<std::int64_t>(i);
    r.arrival_s = q.arrival_s;
    if (cfg.system_prompt_tokens > 0) r.prompt.push_back({"system", 0x5157E1ULL, cfg.system_prompt_tokens});
    for (std::size_t k = 0; k < q.retrieved.size() && k < static_cast<std::size_t>(cfg.top_k); ++k)
      r.prompt.push_back({"chunk", pipeline::chunk_key(static_cast<std::size_t>(q.retrieved[k])),
                          u.chunks[static_cast<std::size_t>(q.retrieved[k])].tokens});
    r.prompt.push_back({"query", 0x9E000000000ULL + i, q.tokens});
    r.output_tokens = q.answer_tokens;
    r.embedding = q.embedding;
    r.next_arrival_s = !next_known                   ? kUnknownNextArrival
                       : i + 1 < u.queries.size() ? u.queries[i + 1].arrival_s
                                                  : std::numeric_limits<double>::infinity();
    out.push_back(std::move(r));
  }
  return out;
}

// The pipeline's stages as YAML, and what the same app's old loop is.
struct StageSetup {
  std::string policy;       // the rag policy (old loop)
  std::string kv_reuse;     // the pipeline's stages
  std::string prefill;
  std::string idle;
  kvsplit::Payload payload = kvsplit::Payload::kKv;
  bool kv_match = true;     // the old loop matches against a tree (charges kv_match_ms)
};

struct StageRun {
  std::vector<pipeline::Served> served;
  std::unique_ptr<pipeline::Pipeline> pipeline;
  const pipeline::IdleStage* idle = nullptr;
  const CachingPolicy& engine() const { return dynamic_cast<const pipeline::CachingIdle&>(*idle).engine(); }
};

// `requests` (of the first user of `trace`) served by the pipeline of `setup` (answer cache:
// `semantic` at `tau_query`, with the embed and match costs of `cfg`), each at its arrival, on a Pixel 7.
inline StageRun run_stages(const traces::RagTrace& trace, const PipelineConfig& cfg, const StageSetup& setup,
                           const std::vector<pipeline::Request>& requests, const models::CostModel& cost,
                           double tau_query = 0.85) {
  pipeline::PipelineOptions options = pipeline::options_on("cpu");
  options.retrieval_ms = cfg.retrieval_ms;
  options.kv_match_ms = setup.kv_match ? cfg.kv_match_ms : 0;
  options.payload = setup.payload;
  auto idle = stage<pipeline::IdleStage>(setup.idle);
  StageRun run;
  run.idle = idle.get();
  run.pipeline = std::make_unique<pipeline::Pipeline>(
      cost, options, stage<pipeline::KvReuse>(setup.kv_reuse), stage<kvsplit::KvSplitStrategy>("{impl: always_load}"),
      stage<pipeline::PrefillStage>(setup.prefill),
      stage<pipeline::AnswerCache>(fmt::format("{{impl: semantic, tau_query: {}, embed_ms: {}, match_ms: {}}}",
                                               tau_query, cfg.embed_query_ms, cfg.qa_match_ms)),
      stage<pipeline::DecodeStage>("{impl: vanilla, unit: cpu}"), nullptr, std::move(idle));
  auto workload = std::make_shared<pipeline::IdleWorkload>();
  workload->trace.meta = trace.meta;
  workload->trace.users = {trace.users[0]};
  workload->unit = "cpu";
  workload->system_prompt_tokens = cfg.system_prompt_tokens;
  workload->top_k = cfg.top_k;
  workload->retrieval_ms = cfg.retrieval_ms;
  workload->kv_match_ms = cfg.kv_match_ms;
  run.pipeline->use_workload(workload);
  sim::Simulator sim;
  sim::StatGroup stats("test");
  devices::Device device(sim, devices::load_device_profile("pixel7"), stats.child("device"));
  sim.start(mobisim::testing::serve_at_arrivals(sim, device, *run.pipeline, requests, run.served), "pipeline");
  sim.run();
  return run;
}

// The same, for the first user's queries laid out by requests_of.
inline StageRun run_pipeline(const traces::RagTrace& trace, const PipelineConfig& cfg, const StageSetup& setup,
                             bool next_known, const models::CostModel& cost, double tau_query = 0.85) {
  return run_stages(trace, cfg, setup, requests_of(trace.users[0], cfg, next_known), cost, tau_query);
}

inline const StageSetup kPerCache{"{impl: percache}", "{impl: chunk_tree, payload: qkv}",
                                  "{impl: qkv_reuse, unit: cpu}", "{impl: percache_scheduler}",
                                  kvsplit::Payload::kQkv, true};
// The oracle predictor (an upper bound: it predicts the user's next real queries) makes the QA bank
// answer queries, so the QA-hit path (a hit's real answer generated later) runs too.
inline const StageSetup kPerCacheOracle{"{impl: percache, predictor: {impl: oracle}}",
                                        "{impl: chunk_tree, payload: qkv}", "{impl: qkv_reuse, unit: cpu}",
                                        "{impl: percache_scheduler, predictor: {impl: oracle}}",
                                        kvsplit::Payload::kQkv, true};
inline const StageSetup kSleepTime{"{impl: sleeptime}", "{impl: none}", "{impl: unit, unit: cpu}", "{impl: sleeptime}",
                                   kvsplit::Payload::kKv, false};
inline const StageSetup kRagCacheSleepTime{"{impl: ragcache_sleeptime}",
                                           "{impl: chunk_tree, payload: kv, eviction: pgdsf}",
                                           "{impl: qkv_reuse, unit: cpu, mode: kv_projection}", "{impl: sleeptime}",
                                           kvsplit::Payload::kKv, true};

inline double relative_difference(double a, double b) {
  return std::abs(a - b) / std::max({1.0, std::abs(a), std::abs(b)});
}

// The running parameterized test's parameter name (the part after '/'), e.g. a pinned run's key.
inline std::string param_name() {
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const auto slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

// `app` (prepared) alone on `phone`, as the rag app of a composed run ("rag"); its records.
inline h5::Table rag_app_records_alone(App& app, const devices::DeviceProfile& phone) {
  sim::StatGroup stats("phone");
  experiments::SimulatedRun run(phone, stats.child("device"));
  run.start(app.run(run.device(), "rag", stats.child("rag")), "rag");
  run.run();
  h5::Table out;
  app.records(out);
  return out;
}

// The rag app's records against its records under the loop, pinned as `key`: every pinned column
// (the rag app's columns: request, arrival_s, start_s, first_token_s, end_s, latency_s, ttft_s,
// output_tokens, active_energy_j, prefill_s, decode_s, load_s, prompt_tokens, qa_hit) with the same
// rows, to the bit but for two columns:
//   load_s           within 5e-15 relative: the loop summed a match's slice reads phase by phase, the
//                    stages time the split as one interval (as the rag_qa records, docs/compose.md);
//   active_energy_j  at most the loop's (1e-12 for rounding) and within 1e-3 relative: the loop
//                    charged a phase's marginal energy over its elapsed time, the stages charge each
//                    piece over its own time (6e-5 to 6e-4 lower on these runs, the first request
//                    equal).
inline const loop_values::AppColumns& expect_rag_app_records_as_the_loop(const h5::Table& records,
                                                                         const std::string& key) {
  const auto& pinned = loop_values::rag_app_records().at(key);
  for (const auto& [name, loop] : pinned) {
    SCOPED_TRACE(fmt::format("{} column {}", key, name));
    const auto& col = records.column(name);
    std::vector<double> mine;
    if (const auto* d = std::get_if<std::vector<double>>(&col)) mine = *d;
    if (const auto* n = std::get_if<std::vector<std::int64_t>>(&col)) mine.assign(n->begin(), n->end());
    EXPECT_EQ(mine.size(), loop.size());
    for (std::size_t i = 0; i < std::min(mine.size(), loop.size()); ++i) {
      if (name == "load_s") {
        EXPECT_LE(relative_difference(mine[i], loop[i]), 5e-15) << "row " << i;
      } else if (name == "active_energy_j") {
        EXPECT_LE(mine[i], loop[i] * (1 + 1e-12)) << "row " << i;  // (rounding apart)
        EXPECT_LE(relative_difference(mine[i], loop[i]), 1e-3) << "row " << i;
      } else {
        EXPECT_EQ(mine[i], loop[i]) << "row " << i;
      }
    }
  }
  return pinned;
}

// What the requests of a run did, counted while comparing them with the loop's.
struct LoopComparison {
  int hits = 0, stale = 0, reused = 0;
  std::int64_t jobs = 0;
};

// Every served request against the old loop's record of the same query (pinned): its QA-hit outcome, stale
// flag and served answer, its latency and the four look-up phases to the nanosecond, its background
// work (jobs exactly, FLOPs within 1e-12, busy time and energy within 1e-9: the idle stage issues
// a background decode token by token), and, on a miss, its prompt, reused tokens and chunks.
inline LoopComparison expect_each_query_as_the_loop(const std::vector<pipeline::Served>& served,
                                                    const std::vector<QueryRecord>& records) {
  LoopComparison c;
  EXPECT_EQ(served.size(), records.size());
  const auto ns = [](double s) { return sim::from_seconds(s); };
  for (std::size_t i = 0; i < std::min(served.size(), records.size()); ++i) {
    const QueryRecord& rec = records[i];
    const pipeline::Served& s = served[i];
    SCOPED_TRACE(fmt::format("query {}", i));
    EXPECT_EQ(s.answer_hit, rec.qa_hit);
    EXPECT_EQ(s.answer_stale, rec.qa_stale);
    EXPECT_EQ(s.served_answer, rec.served_answer);
    EXPECT_EQ(ns(s.times.end_s - s.times.arrival_s), ns(rec.end_s - rec.arrival_s));
    EXPECT_EQ(ns(s.embed_s), ns(rec.embed_s));
    EXPECT_EQ(ns(s.qa_match_s), ns(rec.qa_match_s));
    EXPECT_EQ(ns(s.retrieval_s), ns(rec.retrieval_s));
    EXPECT_EQ(ns(s.kv_match_s), ns(rec.kv_match_s));
    EXPECT_EQ(s.idle_work.jobs, rec.bg_jobs);
    EXPECT_LE(relative_difference(s.idle_work.flops, rec.bg_flops), 1e-12);
    EXPECT_LE(relative_difference(s.idle_work.busy_s, rec.bg_s), 1e-9);
    EXPECT_LE(relative_difference(s.idle_work.energy_j, rec.bg_energy_j), 1e-9);
    if (!rec.qa_hit) {
      EXPECT_EQ(s.prompt_tokens, rec.prompt_tokens);
      EXPECT_EQ(s.reused_tokens, rec.reused_tokens);
      EXPECT_EQ(s.retrieved_chunks, rec.retrieved_chunks);
    }
    c.hits += rec.qa_hit;
    c.stale += rec.qa_stale;
    c.reused += s.reused_tokens > 0;
    c.jobs += rec.bg_jobs;
  }
  return c;
}

}  // namespace mobisim::policies::testing::stages
