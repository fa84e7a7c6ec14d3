// The `coordgen_schedule` experiment driver: CoordGen's graph-switching schedules (section 3.2,
// Figure 8) for one prompt on one device: synchronous loading, naive asynchronous loading, the
// progressive greedy (eqs. 1-2), its late-start extension, the exact search (when small enough)
// and both graphs resident. Each schedule is one request (the prompt, a one-token answer) through
// the request pipeline in its own simulated run, the schedule as its prefill stage
// (policies/pipeline/scheduled_prefill.h): the NPU executes the compute slots (block b of chunk c,
// on G_p or G_d) at the scheduled times and the graph loader's spans go on their own timeline
// track, so `--timeline` shows Figure 8(b).
//
// Parameters (YAML under `experiment:`):
//   device, model      as in coordgen
//   prompt_tokens      list of prompt lengths (one row per length and strategy)
//   blocks, prefill_chunk, decode_chunk
//   strategies         names from graph_schedule.h (default: all but exact) ; exact_limit
#include <fmt/format.h>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/experiment.h"
#include "experiments/parallel.h"
#include "experiments/simulation.h"
#include "policies/pipeline/pipeline.h"
#include "policies/pipeline/scheduled_prefill.h"
#include "policies/specdec/graph_schedule.h"
#include "sim/error.h"
#include "sim/registry.h"

namespace mobisim::experiments {

namespace {

namespace sd = policies::specdec;
namespace pl = policies::pipeline;

class CoordGenScheduleExperiment : public Experiment {
 public:
  explicit CoordGenScheduleExperiment(const Params& p) : params_(p) {
    devices::require_thermal_none(p, "coordgen_schedule");
    device_ = devices::load_device_for_engine(p);
    engine_ = devices::resolved_engine(p);
    model_ = models::load_model_spec(p.node("model"), p.source_of("model"));
    device_.require_engine_values("npu", model_, "coordgen_schedule");
    device_.require_engine_values("cpu", model_, "coordgen_schedule (attention)", {model_.activation_dtype});
    shapes_.blocks = static_cast<int>(p.integer("blocks"));
    shapes_.prefill_chunk = static_cast<int>(p.integer("prefill_chunk"));
    shapes_.decode_chunk = static_cast<int>(p.integer("decode_chunk"));
    try {
      sd::validate_shapes(shapes_, model_.n_layers);
    } catch (const ConfigError& e) {
      p.fail("decode_chunk", e.what());
    }
    for (auto n : p.int_list("prompt_tokens")) {
      if (n <= 0) p.fail("prompt_tokens", fmt::format("prompt lengths must be positive (got {})", n));
      prompts_.push_back(n);
    }
    if (prompts_.empty()) p.fail("prompt_tokens", "give at least one prompt length");
    for (const auto& s : p.text_list("strategies")) {
      try {
        strategies_.push_back(sd::parse_switch_strategy(s));
      } catch (const ConfigError& e) {
        p.fail("strategies", e.what());
      }
    }
    exact_limit_ = p.integer("exact_limit");
  }

  static ParamSchema schema() {
    ParamSchema s;
    s.node("thermal", devices::kThermalNoneDoc);
    s.node("device", "device profile with an npu and a cpu unit");
    devices::add_engine_param(s);
    s.node("model", "model profile");
    s.int_list("prompt_tokens", std::vector<std::int64_t>{512, 1024, 2048}, "prompt lengths").non_empty();
    s.integer("blocks", 4, "blocks of layers").at_least(1);
    s.integer("prefill_chunk", 256, "G_p chunk").at_least(1).with_unit("tokens");
    s.integer("decode_chunk", 32, "G_d chunk (<= prefill_chunk)").at_least(1).with_unit("tokens");
    s.text_list("strategies",
                std::vector<std::string>{"synchronous", "naive_async", "progressive", "progressive_late", "both_resident"},
                "schedules to compare (graph_schedule.h)")
        .non_empty();
    s.integer("exact_limit", 2'000'000, "largest exact search (trigger vectors)").at_least(1);
    return s;
  }

  std::string default_plot() const override { return "coordgen_schedule.py"; }

  void run(RunContext& ctx) override {
    const models::CostModel cost(model_);
    struct Job {
      std::int64_t prompt;
      sd::SwitchStrategy strategy;
      sim::StatGroup* stats;
      sim::TimelineProcess* timeline;
      sd::GraphSchedule schedule;
      double energy_j = 0, exposed_s = 0;
    };
    std::vector<Job> jobs;
    for (auto n : prompts_)
      for (auto s : strategies_) {
        const std::string label = fmt::format("{} / {} tokens", sd::to_string(s), n);
        jobs.push_back({n, s, &ctx.results.variant(sd::to_string(s)).stats.child(fmt::format("p{}", n)),
                        ctx.timeline_process(label, {{"policy", sd::to_string(s)}, {"device", device_.name}}),
                        {}, 0, 0});
      }
    parallel_for(jobs.size(), ctx.threads, [&](std::size_t j) {
      Job& job = jobs[j];
      const auto problem = sd::make_schedule_problem(*device_.npu, device_.unit("cpu", "schedule"), cost, job.prompt, shapes_);
      job.schedule = job.strategy == sd::SwitchStrategy::kExact ? sd::schedule_exact(problem, exact_limit_)
                                                                : sd::schedule(problem, job.strategy);
      job.exposed_s = job.schedule.exposed_switch_s(problem);
      const auto pipeline = prompt_pipeline(cost, job.schedule, job.timeline);
      SimulatedRun run(device_, job.stats->child("device"), job.timeline);
      run.start(serve_prompt(run.device(), *pipeline, job.prompt), "schedule");
      run.run();
      job.energy_j = run.device().energy_j();
    });
    std::vector<std::string> strategy;
    std::vector<std::int64_t> prompt, loads, gd_slots;
    std::vector<double> prefill, sw_end, latency, exposed, peak, energy;
    for (const auto& job : jobs) {
      strategy.push_back(sd::to_string(job.strategy));
      prompt.push_back(job.prompt);
      loads.push_back(static_cast<std::int64_t>(job.schedule.loads.size()));
      std::int64_t gd = 0;
      for (const auto& c : job.schedule.computes) gd += c.on_decode_graph ? 1 : 0;
      gd_slots.push_back(gd);
      prefill.push_back(job.schedule.prefill_end_s);
      sw_end.push_back(job.schedule.switch_end_s);
      latency.push_back(job.schedule.latency_s());
      exposed.push_back(job.exposed_s);  // latency beyond an all-G_p prefill
      peak.push_back(job.schedule.peak_npu_bytes);
      energy.push_back(job.energy_j);
      ctx.progress(fmt::format("{:>16} {:5} tokens: prefill {:.3f} s, switch done {:.3f} s, latency {:.3f} s, "
                               "peak {:.2f} GB",
                               strategy.back(), job.prompt, prefill.back(), sw_end.back(), latency.back(),
                               peak.back() / 1e9));
    }
    auto& t = ctx.results.summary;
    t.add("strategy", strategy);
    t.add("prompt_tokens", prompt, "tokens");
    t.add("prefill_end_s", prefill, "s");
    t.add("switch_end_s", sw_end, "s");
    t.add("latency_s", latency, "s");
    t.add("exposed_switch_s", exposed, "s");
    t.add("decode_graph_slots", gd_slots, "count");
    t.add("loads", loads, "count");
    t.add("peak_npu_bytes", peak, "bytes");
    t.add("energy_j", energy, "J");
  }

  YAML::Node resolved_config(const YAML::Node& given) const override {
    ParamSchema s = schema();
    YAML::Node out = Params(given, s, params_.source()).resolved();
    out["impl"] = "coordgen_schedule";
    out["device"] = yaml_clone(device_.resolved);
    out["model"] = yaml_clone(model_.resolved);
    return devices::with_engine(out, engine_);
  }

 private:
  // The prompt as one request through the request pipeline: its prefill stage is the schedule
  // (pl::ScheduledPrefill), its answer the first token (no decode step), no KV reuse.
  std::unique_ptr<pl::Pipeline> prompt_pipeline(const models::CostModel& cost, const sd::GraphSchedule& g,
                                                sim::TimelineProcess* timeline) const {
    return std::make_unique<pl::Pipeline>(
        cost, pl::options_on("npu"),
        Registry<pl::KvReuse>::instance().create(YAML::Load("{impl: none}"), ConfigSource{}),
        Registry<policies::kvsplit::KvSplitStrategy>::instance().create(YAML::Load("{impl: always_load}"),
                                                                        ConfigSource{}),
        std::make_unique<pl::ScheduledPrefill>(g, timeline, device_.name));
  }

  static sim::Task<void> serve_prompt(devices::Device& device, pl::Pipeline& pipeline, std::int64_t prompt) {
    const std::string owner = "prompt", kv_owner = "prompt/kv";  // named: see decode_stage.h on g++ 12
    co_await pipeline.start(device, owner);
    pl::Request r;
    r.app = "coordgen_schedule";
    r.prompt.push_back(pl::Segment{"context", 0, prompt});
    r.output_tokens = 1;
    pl::Served served;
    co_await pipeline.serve(device, kv_owner, r, served);
  }

  Params params_;
  devices::DeviceProfile device_;
  YAML::Node engine_;  // the resolved engine profile (stored with results)
  models::ModelSpec model_;
  sd::GraphShapes shapes_;
  std::vector<std::int64_t> prompts_;
  std::vector<sd::SwitchStrategy> strategies_;
  std::int64_t exact_limit_ = 0;
};

MOBISIM_REGISTER(Experiment, CoordGenScheduleExperiment, "coordgen_schedule",
                 "CoordGen graph-switching schedules (Figure 8): synchronous, naive async, progressive, exact.")

}  // namespace
}  // namespace mobisim::experiments
