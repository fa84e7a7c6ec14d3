// The coordgen driver as a configuration of the request pipeline: a CoordGen-document policy's
// own plan for a request, issued by the pipeline's prefill stage (PolicyPrefill) and decode stage
// (PolicyDecode), takes on an idle phone exactly what the driver's old phase-list replay
// (specdec::replay_phases) took, to the nanosecond, joule and exposed calibration; two requests
// on one phone queue on its NPU behind each other. coordgen_schedule's prompt, its graph-switching
// schedule as the prefill stage, gives its first token when the schedule ends, later under load.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <numeric>

#include "devices/device.h"
#include "experiments/simulation.h"
#include "models/cost_model.h"
#include "policies/pipeline/pipeline.h"
#include "policies/pipeline/policy_phases.h"
#include "policies/pipeline/scheduled_prefill.h"
#include "policies/specdec/graph_schedule.h"
#include "policies/specdec/specdec_policy.h"
#include "sim/registry.h"

namespace mobisim {
namespace {

namespace pl = policies::pipeline;
namespace sd = policies::specdec;

constexpr const char* kModel = "{base: qwen2.5-0.5b, weight_dtype: int8, activation_dtype: fp16, kv_dtype: fp16}";
constexpr const char* kPhone = "oneplus-12";

// A pipeline as the coordgen driver builds it: no KV reuse, the plan's two stages.
std::unique_ptr<pl::Pipeline> coordgen_pipeline(const models::CostModel& cost, std::shared_ptr<pl::PolicyPlan> plan,
                                                int priority = 0) {
  return std::make_unique<pl::Pipeline>(
      cost, pl::options_on("npu", priority),
      Registry<pl::KvReuse>::instance().create(YAML::Load("{impl: none}"), ConfigSource{}),
      Registry<policies::kvsplit::KvSplitStrategy>::instance().create(YAML::Load("{impl: always_load}"),
                                                                      ConfigSource{}),
      std::make_unique<pl::PolicyPrefill>(plan), nullptr, std::make_unique<pl::PolicyDecode>(plan));
}

pl::Request request(std::int64_t id, std::int64_t prompt, std::int64_t answer) {
  pl::Request r;
  r.app = "coordgen";
  r.id = id;
  r.prompt = {{"context", static_cast<std::uint64_t>(id), prompt}};
  r.output_tokens = answer;
  return r;
}

// An acceptance trace with drafts, some accepted: 10 verifications, 18 answer tokens.
sd::DecodeTrace some_trace() {
  sd::DecodeTrace t;
  for (int i = 0; i < 10; ++i) t.steps.push_back({i % 3 == 0 ? 4 : 2, i % 3 == 0 ? 2 : 0});
  return t;
}

struct Measured {
  sim::Time latency = 0;
  double energy_j = 0, join_wait_s = 0, prefill_s = 0;
};

// The driver's old loop: the request's phases replayed as they are (policies/specdec).
Measured old_replay(const devices::DeviceProfile& phone, const sd::RequestBreakdown& b) {
  sim::StatGroup stats("phone");
  experiments::SimulatedRun run(phone, stats.child("device"));
  sd::ReplayResult res;
  run.start(sd::replay_phases(run.device(), b.phases, res), "request");
  run.run();
  return {sim::from_seconds(res.latency_s), res.energy_j, res.join_wait_s, 0};
}

sim::Task<void> serve_one(devices::Device& device, pl::Pipeline& pipeline, pl::PolicyPlan& plan,
                          const pl::Request& r, Measured& m) {
  const std::string owner = "user", kv_owner = "user/kv";  // named: see decode_stage.h on g++ 12
  co_await pipeline.start(device, owner);
  const sim::Time t0 = device.sim().now();
  const double e0 = device.energy_j();
  pl::Served served;
  co_await pipeline.serve(device, kv_owner, r, served);
  m.latency = device.sim().now() - t0;
  m.energy_j = device.energy_j() - e0;
  m.join_wait_s = plan.join_wait_s();
  m.prefill_s = served.prefill_s;
}

Measured through_pipeline(const devices::DeviceProfile& phone, const models::CostModel& cost,
                          const sd::RequestBreakdown& b, std::int64_t prompt) {
  auto plan = std::make_shared<pl::PolicyPlan>();
  auto pipeline = coordgen_pipeline(cost, plan);
  const double kv = cost.spec().kv_bytes_per_token() * static_cast<double>(prompt + b.output_tokens);
  plan->set(b.phases, b.peak_memory_bytes - kv);
  const pl::Request r = request(0, prompt, b.output_tokens);
  sim::StatGroup stats("phone");
  experiments::SimulatedRun run(phone, stats.child("device"));
  Measured m;
  run.start(serve_one(run.device(), *pipeline, *plan, r, m), "request");
  run.run();
  return m;
}

sd::SpecDecEnv env_of(const devices::DeviceProfile& phone, const models::CostModel& cost) {
  return sd::SpecDecEnv{phone.require_npu("test"), phone.unit("cpu", "test"), phone.base_power_w, cost, cost};
}

TEST(CoordGenPipeline, EveryPolicyTakesWhatTheOldPhaseReplayTook) {
  const devices::DeviceProfile phone = devices::load_device_profile(kPhone);
  const models::CostModel cost(models::load_model_spec(YAML::Load(kModel), ConfigSource{}));
  const sd::SpecDecEnv env = env_of(phone, cost);
  const sd::DecodeTrace trace = some_trace();
  for (const char* impl : {"npu_vanilla", "cpu_vanilla", "npu_graph", "npu_sam", "coordgen", "npu_eagle"}) {
    auto policy = Registry<sd::SpecDecPolicy>::instance().create(YAML::Load(std::string("{impl: ") + impl + "}"),
                                                                 ConfigSource{});
    const sd::RequestBreakdown b = policy->run(env, 700, trace);
    const Measured old = old_replay(phone, b);
    const Measured now = through_pipeline(phone, cost, b, 700);
    EXPECT_EQ(now.latency, old.latency) << impl;
    EXPECT_DOUBLE_EQ(now.energy_j, old.energy_j) << impl;
    EXPECT_EQ(now.join_wait_s, old.join_wait_s) << impl;
    if (std::string(impl) == "coordgen") {  // the case with a second stream: calibration beside the prefill
      EXPECT_TRUE(std::any_of(b.phases.begin(), b.phases.end(), [](const sd::Phase& ph) { return ph.background; }));
      EXPECT_GT(now.join_wait_s, 0.0);  // 700 tokens of sampling outlast the prefill's idle CPU time
    }
  }
}

// npu_vanilla by hand: no background stream, so the request is its phases back to back, and the
// pipeline's prefill stage is the policy's prefill slots (NPU part, then the CPU's attention) and the
// CPU LM head after them (prefill_lm_head_unit: cpu, the default).
TEST(CoordGenPipeline, PlainNpuRequestIsItsPhasesBackToBack) {
  const devices::DeviceProfile phone = devices::load_device_profile(kPhone);
  const models::CostModel cost(models::load_model_spec(YAML::Load(kModel), ConfigSource{}));
  auto policy = Registry<sd::SpecDecPolicy>::instance().create(YAML::Load("{impl: npu_vanilla}"), ConfigSource{});
  sd::DecodeTrace trace;
  trace.steps.assign(5, {0, 0});
  const sd::RequestBreakdown b = policy->run(env_of(phone, cost), 300, trace);
  sim::Time total = 0, prefill = 0;
  for (const sd::Phase& ph : b.phases) {
    ASSERT_FALSE(ph.background);
    total += sim::from_seconds(ph.seconds);
    if (ph.label == "prefill" || ph.label == "prefill attention" || ph.label == "prefill lm head")
      prefill += sim::from_seconds(ph.seconds);
  }
  const Measured m = through_pipeline(phone, cost, b, 300);
  EXPECT_EQ(m.latency, total);
  EXPECT_EQ(sim::from_seconds(m.prefill_s), prefill);
  EXPECT_EQ(m.join_wait_s, 0.0);
}

// Two requests arrive together on one phone, each through its own pipeline; both are 1 s of NPU
// prefill then 0.5 s of NPU verification. The NPU serves one phase at a time in arrival order:
// A prefills [0, 1), B queued behind it prefills [1, 2) (its first token at exactly A's prefill
// time later than alone), A verifies [2, 2.5), B [2.5, 3): the NPU never idles.
TEST(CoordGenPipeline, TwoRequestsQueueOnTheNpuBehindEachOther) {
  const devices::DeviceProfile phone = devices::load_device_profile(kPhone);
  const models::CostModel cost(models::load_model_spec(YAML::Load(kModel), ConfigSource{}));
  const std::vector<sd::Phase> phases{{"npu", 1.0, "prefill"}, {"npu", 0.5, "verify"}};
  auto plan_a = std::make_shared<pl::PolicyPlan>(), plan_b = std::make_shared<pl::PolicyPlan>();
  auto a = coordgen_pipeline(cost, plan_a), b = coordgen_pipeline(cost, plan_b);
  plan_a->set(phases, 0);
  plan_b->set(phases, 0);
  const pl::Request ra = request(0, 100, 2), rb = request(1, 100, 2);
  pl::Served sa, sb;
  sim::StatGroup stats("phone");
  experiments::SimulatedRun run(phone, stats.child("device"));
  // (owner by value, its K/V owner a named local: no temporary std::string in a co_await expression)
  auto serve = [](devices::Device& d, pl::Pipeline& p, std::string owner, const pl::Request& r,
                  pl::Served& s) -> sim::Task<void> {
    const std::string kv = owner + "/kv";
    co_await p.start(d, owner);
    co_await p.serve(d, kv, r, s);
  };
  run.start(serve(run.device(), *a, "a", ra, sa), "a");
  run.start(serve(run.device(), *b, "b", rb, sb), "b");
  run.run();
  EXPECT_EQ(sim::from_seconds(sa.times.first_token_s), sim::from_seconds(1.0));
  EXPECT_EQ(sim::from_seconds(sb.times.first_token_s), sim::from_seconds(2.0));
  EXPECT_EQ(sim::from_seconds(sa.times.end_s), sim::from_seconds(2.5));
  EXPECT_EQ(sim::from_seconds(sb.times.end_s), sim::from_seconds(3.0));
}

// The progressive schedule of a 1024-token prompt as the prefill stage (coordgen_schedule): alone,
// the first token comes exactly when the schedule ends; with 1 s of other NPU work queued first,
// every slot is pushed back and the prefill ends later.
sim::Time scheduled_first_token(const devices::DeviceProfile& phone, const models::CostModel& cost,
                                const sd::GraphSchedule& g, double npu_busy_first_s) {
  auto pipeline = std::make_unique<pl::Pipeline>(
      cost, pl::options_on("npu"),
      Registry<pl::KvReuse>::instance().create(YAML::Load("{impl: none}"), ConfigSource{}),
      Registry<policies::kvsplit::KvSplitStrategy>::instance().create(YAML::Load("{impl: always_load}"),
                                                                      ConfigSource{}),
      std::make_unique<pl::ScheduledPrefill>(g, nullptr, phone.name));
  const pl::Request r = request(0, 1024, 1);
  pl::Served served;
  sim::StatGroup stats("phone");
  experiments::SimulatedRun run(phone, stats.child("device"));
  if (npu_busy_first_s > 0)
    run.start(run.device().busy("npu", sim::from_seconds(npu_busy_first_s), "other app"), "other app");
  auto serve = [](devices::Device& d, pl::Pipeline& p, const pl::Request& rq, pl::Served& s) -> sim::Task<void> {
    const std::string owner = "prompt", kv = "prompt/kv";
    co_await p.start(d, owner);
    co_await p.serve(d, kv, rq, s);
  };
  run.start(serve(run.device(), *pipeline, r, served), "prompt");
  run.run();
  return served.first_token;
}

TEST(CoordGenPipeline, AScheduleAsThePrefillStageEndsWhenTheScheduleDoes) {
  const devices::DeviceProfile phone = devices::load_device_profile(kPhone);
  const models::CostModel cost(models::load_model_spec(YAML::Load(kModel), ConfigSource{}));
  const auto problem =
      sd::make_schedule_problem(phone.require_npu("test"), phone.unit("cpu", "test"), cost, 1024, sd::GraphShapes{});
  const sd::GraphSchedule g = sd::schedule(problem, sd::SwitchStrategy::kProgressive);
  ASSERT_FALSE(g.computes.empty());
  // By hand: each slot from its scheduled start (or when the previous one ends: each slot's length
  // is rounded to the nanosecond on its own), the prefill no earlier than the schedule's end.
  sim::Time t = 0;
  for (const sd::ComputeSlot& c : g.computes)
    t = std::max(t, sim::from_seconds(c.start_s)) + sim::from_seconds(c.end_s - c.start_s);
  const sim::Time by_hand = std::max(t, sim::from_seconds(g.latency_s()));
  EXPECT_EQ(scheduled_first_token(phone, cost, g, 0), by_hand);
  EXPECT_LE(by_hand - sim::from_seconds(g.latency_s()), static_cast<sim::Time>(g.computes.size()));
  EXPECT_GT(scheduled_first_token(phone, cost, g, 1.0), sim::from_seconds(g.latency_s()));
}

}  // namespace
}  // namespace mobisim
