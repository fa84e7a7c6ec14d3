// The `phone` experiment driver: several apps on one simulated phone.
//
// Every app in `apps:` (policies/apps/) issues its requests on one Device at once: they queue on
// the same compute units (foreground before background), hold their weights and KV in one DRAM
// ledger (what cannot be held stops the run, naming DRAM and the sizes), stream over one DRAM
// bus and read one flash device. In the `alone` scenario each app runs by itself on the same
// phone: beside `shared`, the summary says what sharing the phone cost each app; alone only, it
// compares apps (e.g. policies of different documents) on one workload and phone.
//
// Parameters (YAML under `experiment:`):
//   device   built-in profile name, YAML path, or inline mapping (plus engine:)
//   apps       list of {impl: rag|chat|pipeline, label: NAME, priority: foreground|background, ...}
//   scenarios  [shared, alone] (default both): all apps at once, and/or each by itself
//
// Results: /summary has one row per (scenario, app): scenario is "shared" or "alone"; the phone's
// DRAM peak and time-weighted mean, and the app's own peak (app_dram_peak_bytes: its weights,
// K/V, graphs);
// /runs/<scenario>.<app>/records one row per request of that app.
#include <fmt/format.h>

#include <map>
#include <memory>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/experiment.h"
#include "experiments/plugin_list.h"
#include "experiments/simulation.h"
#include "experiments/workload_cache.h"
#include "experiments/workload_inputs.h"
#include "policies/apps/app.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "traces/generator.h"
#include "traces/rag_trace_io.h"

namespace mobisim::experiments {

namespace {

using policies::App;

// A RAG workload node as rag_qa reads it: {trace: FILE.h5} or {generate: default|PATH|{...}}.
traces::RagTrace load_rag_workload(const YAML::Node& node, const ConfigSource& source, std::uint64_t seed,
                                   WorkloadCache* cache) {
  ParamSchema s;
  s.text("trace", std::string(""), "an HDF5 RAG trace (mobisim trace import/generate)").input_path();
  s.node("generate", "generate a trace: 'default', a generator YAML path, or an inline generator config");
  const Params w(node, s, source, {});
  const std::string trace_path = w.text("trace");
  const YAML::Node gen = w.node("generate");
  const bool has_gen = gen.IsDefined() && !gen.IsNull();
  if (trace_path.empty() == !has_gen)
    w.fail("trace", "give exactly one of 'trace: FILE.h5' or 'generate: default|PATH|{...}'");
  if (!trace_path.empty()) {
    const traces::RagTraceFile file(trace_path);
    traces::RagTrace t;
    t.meta = file.meta();
    for (std::size_t u = 0; u < file.num_users(); ++u) t.users.push_back(file.read_user(u, traces::UserParts{}));
    return t;
  }
  const YAML::Node named = gen.IsScalar() && gen.Scalar() == "default" ? YAML::Node("rag_default") : gen;
  const ResolvedWorkload resolved = resolve_workload_config(named, w.source_of("generate"));
  auto make = [&] { return traces::generate_rag_trace_from_yaml(resolved.config, resolved.origin, seed); };
  if (!cache) return make();
  return *cache->rag_trace(fmt::format("{}\n{}\n{}", yaml_to_string(resolved.config), resolved.origin, seed), make);
}

class PhoneExperiment : public Experiment {
 public:
  explicit PhoneExperiment(const Params& p) : params_(p) {
    device_ = devices::load_device_for_engine(p);
    engine_ = devices::resolved_engine(p);
    sustained_ = devices::SustainedOptions::from_yaml(p.node("thermal"), p.source_of("thermal"));
    sustained_.check_against(device_, p.source_of("thermal").where(p.node("thermal")));
    apps_ = parse_labelled_plugins<App>(p, "apps");
    for (const auto& sc : p.text_list("scenarios")) {
      if (sc != "shared" && sc != "alone")
        p.fail("scenarios", fmt::format("unknown scenario '{}' (expected shared and/or alone)", sc));
      (sc == "shared" ? shared_ : alone_) = true;
    }
    if (!shared_ && !alone_) p.fail("scenarios", "expected at least one of shared, alone");
  }

  static ParamSchema schema() {
    ParamSchema s;
    s.node("device", "device profile: built-in name, YAML path or inline mapping");
    devices::add_engine_param(s);
    s.node("thermal", "sustained use: none (default: peak clocks, constant power), profile (the phone's thermal "
                      "model), or {ambient_c, start, governor, battery, ...} (devices/power_manager.h)");
    s.node("apps",
           "apps on the phone: [{impl: rag|chat|pipeline, label: NAME, priority: foreground|background, ...}]");
    s.text_list("scenarios", std::vector<std::string>{"shared", "alone"},
                "shared: all apps at once on the phone; alone: each app by itself on it");
    return s;
  }

  // Builds and prepares every app and checks that the phone holds their resident bytes (each
  // app's alone, all apps' together when they share it).
  void prepare(RunContext& ctx) override {
    seed_ = ctx.seed;
    run_ = ctx.run;
    workloads_ = ctx.workloads;
    std::vector<std::pair<std::string, double>> together;
    for (std::size_t i = 0; i < apps_.size(); ++i) {
      std::vector<std::pair<std::string, double>> own;
      for (const auto& [owner, bytes] : make_app(i)->resident_dram()) own.emplace_back(apps_[i].label + "/" + owner, bytes);
      if (alone_) devices::Dram::check_fits(device_.dram, device_.name, own);
      together.insert(together.end(), own.begin(), own.end());
    }
    if (shared_) devices::Dram::check_fits(device_.dram, device_.name, together);
  }

  void run(RunContext& ctx) override {
    Summary summary;
    ctx.progress(fmt::format("{} apps on {}", apps_.size(), device_.name));
    std::vector<std::size_t> all(apps_.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    if (shared_) simulate(ctx, "shared", all, summary);
    if (alone_)
      for (std::size_t i = 0; i < apps_.size(); ++i) simulate(ctx, "alone", {i}, summary);
    summary.add_slowdowns();
    summary.to_table(ctx.results.summary);
  }

  YAML::Node resolved_config(const YAML::Node& given) const override {
    YAML::Node out = yaml_clone(given);
    out["device"] = yaml_clone(device_.resolved);
    YAML::Node apps(YAML::NodeType::Sequence);
    for (std::size_t i = 0; i < apps_.size(); ++i) {
      YAML::Node r = Registry<App>::instance().create(apps_[i].node, apps_[i].source)->resolved();
      r["impl"] = apps_[i].node["impl"];
      r["label"] = apps_[i].label;
      apps.push_back(r);
    }
    out["apps"] = apps;
    out["scenarios"] = params_.resolved()["scenarios"];
    out["thermal"] = yaml_clone(sustained_.resolved);
    return devices::with_engine(out, engine_);
  }

  std::string default_plot() const override { return "phone_apps.py"; }

 private:
  struct Summary {
    std::vector<std::string> scenario, app, impl, priority, device, model, unit;
    std::vector<std::int64_t> requests;
    std::vector<double> mean_latency, p50, p90, p99, mean_ttft, p90_ttft, mean_tpot, energy, app_dram_peak, dram_peak,
        dram_mean, slowdown;
    // Phone-level sustained-use columns (only with a thermal model): set once per simulation.
    bool sustained = false;
    devices::SustainedSummary heat;
    double phone_energy = 0;
    std::vector<double> device_energy, peak_junction, peak_skin, throttled_s, battery_end, battery_min;
    std::vector<std::string> mhz_units;
    std::vector<std::vector<double>> mean_mhz;
    void set_phone(const devices::Device& d) {
      phone_energy = d.energy_j();
      if (!d.power()) return;
      sustained = true;
      heat = d.power()->summary();
      if (mhz_units.empty())
        for (const auto& [unit, mhz] : heat.mean_busy_mhz) mhz_units.push_back(unit);
      mean_mhz.resize(mhz_units.size());
    }
    void add(const std::string& sc, const std::string& label, const std::string& im, const std::string& phone,
             const App& a, double app_peak, double peak, double mean) {
      const policies::AppTotals t = a.totals();
      scenario.push_back(sc);
      app.push_back(label);
      impl.push_back(im);
      priority.push_back(a.priority() == 0 ? "foreground" : "background");
      device.push_back(phone);
      model.push_back(a.model_name());
      unit.push_back(a.unit());
      requests.push_back(t.requests);
      mean_latency.push_back(t.latency_s.mean());
      p50.push_back(t.latency_s.percentile(50));
      p90.push_back(t.latency_s.percentile(90));
      p99.push_back(t.latency_s.percentile(99));
      mean_ttft.push_back(t.ttft_s.mean());
      p90_ttft.push_back(t.ttft_s.percentile(90));
      mean_tpot.push_back(t.tpot_s.mean());
      energy.push_back(t.active_energy_j);
      app_dram_peak.push_back(app_peak);
      dram_peak.push_back(peak);
      dram_mean.push_back(mean);
      if (!sustained) return;
      device_energy.push_back(phone_energy);
      peak_junction.push_back(heat.peak_junction_c);
      peak_skin.push_back(heat.peak_skin_c);
      throttled_s.push_back(heat.time_throttled_s);
      battery_end.push_back(heat.battery_end_percent);
      battery_min.push_back(heat.battery_min_percent);
      for (std::size_t k = 0; k < mhz_units.size(); ++k)
        mean_mhz[k].push_back(k < heat.mean_busy_mhz.size() ? heat.mean_busy_mhz[k].second : 0.0);
    }
    // Shared mean latency over alone mean latency, per app (1 for the alone rows; 0 without one).
    void add_slowdowns() {
      slowdown.assign(app.size(), 0.0);
      for (std::size_t i = 0; i < app.size(); ++i)
        for (std::size_t j = 0; j < app.size(); ++j)
          if (app[i] == app[j] && scenario[j] == "alone" && mean_latency[j] > 0)
            slowdown[i] = mean_latency[i] / mean_latency[j];
    }
    void to_table(h5::Table& t) const {
      t.add("scenario", scenario);
      t.add("app", app);
      t.add("impl", impl);
      t.add("priority", priority);
      t.add("device", device);
      t.add("model", model);
      t.add("unit", unit);
      t.add("requests", requests, "count");
      t.add("mean_latency_s", mean_latency, "s");
      t.add("p50_latency_s", p50, "s");
      t.add("p90_latency_s", p90, "s");
      t.add("p99_latency_s", p99, "s");
      t.add("mean_ttft_s", mean_ttft, "s");
      t.add("p90_ttft_s", p90_ttft, "s");
      t.add("mean_tpot_s", mean_tpot, "s");
      t.add("slowdown_vs_alone", slowdown, "ratio");
      t.add("active_energy_j", energy, "J");
      t.add("app_dram_peak_bytes", app_dram_peak, "bytes");
      t.add("dram_peak_bytes", dram_peak, "bytes");
      t.add("dram_mean_bytes", dram_mean, "bytes");
      if (!sustained) return;
      t.add("device_energy_j", device_energy, "J");
      t.add("peak_junction_c", peak_junction, "C");
      t.add("peak_skin_c", peak_skin, "C");
      t.add("time_throttled_s", throttled_s, "s");
      t.add("battery_end_percent", battery_end, "%");
      t.add("battery_min_percent", battery_min, "%");
      for (std::size_t k = 0; k < mhz_units.size(); ++k) t.add("mean_busy_mhz_" + mhz_units[k], mean_mhz[k], "MHz");
    }
  };

  // A fresh app (each simulation needs its own state), prepared on the workloads this run has read.
  std::unique_ptr<App> make_app(std::size_t i) {
    auto app = Registry<App>::instance().create(apps_[i].node, apps_[i].source);
    policies::AppEnvironment env;
    env.seed = seed_;
    env.run = run_;
    env.device = &device_;
    env.rag_workload = [this](const YAML::Node& node, const ConfigSource& source) { return rag_workload(node, source); };
    app->prepare(env);
    return app;
  }

  // Each RAG workload node is read or generated once per run, however many apps and scenarios
  // use it (apps take copies of their user).
  const traces::RagTrace& rag_workload(const YAML::Node& node, const ConfigSource& source) {
    const std::string key = yaml_to_string(node);
    auto it = rag_workloads_.find(key);
    if (it == rag_workloads_.end())
      it = rag_workloads_.emplace(key, load_rag_workload(node, source, seed_, workloads_)).first;
    return it->second;
  }

  // One phone running the apps `which` at once; their records and totals go to the results.
  void simulate(RunContext& ctx, const std::string& scenario, const std::vector<std::size_t>& which,
                Summary& summary) {
    std::vector<std::unique_ptr<App>> apps;
    for (std::size_t i : which) apps.push_back(make_app(i));
    const std::string name = scenario == "shared" ? scenario : scenario + "." + apps_[which.front()].label;
    auto& variant = ctx.results.variant(name);
    {
      SimulatedRun run(device_, variant.stats.child("device"),
                       ctx.timeline_process(name, {{"policy", name}, {"device", device_.name}}), sustained_);
      for (std::size_t k = 0; k < apps.size(); ++k)
        for (const auto& [owner, bytes] : apps[k]->resident_dram())
          run.device().dram().reserve(apps_[which[k]].label + "/" + owner, bytes);
      if (devices::PowerManager* pm = run.device().power(); pm && sustained_.trace_charging_w > 0)
        pm->add_charging_windows(trace_charging_windows(apps));
      for (std::size_t k = 0; k < apps.size(); ++k) {
        const std::string& label = apps_[which[k]].label;
        run.start(apps[k]->run(run.device(), label, variant.stats.child(label)), "app " + label);
      }
      run.run();
      summary.set_phone(run.device());
      if (const devices::PowerManager* pm = run.device().power()) add_series(ctx, name, *pm);
      const double peak = run.device().dram().peak_bytes(), mean = run.device().dram().mean_used_bytes();
      const auto app_peaks = run.device().dram().group_peaks();
      for (std::size_t k = 0; k < apps.size(); ++k) {
        const std::string& label = apps_[which[k]].label;
        const auto own = app_peaks.find(label);
        summary.add(scenario, label, apps_[which[k]].node["impl"].Scalar(), device_.name, *apps[k],
                    own == app_peaks.end() ? 0.0 : own->second, peak, mean);
        apps[k]->records(ctx.results.variant(scenario + "." + label).records);
      }
    }
  }

  // The charging windows of the apps' workloads (the first app that has any: one phone, one owner's
  // charging habits), charged at thermal.battery.trace_charging_w.
  std::vector<devices::ChargingWindow> trace_charging_windows(const std::vector<std::unique_ptr<App>>& apps) const {
    std::vector<devices::ChargingWindow> out;
    for (const auto& app : apps) {
      for (const auto& [start, end] : app->charging_windows())
        out.push_back({start, end, sustained_.trace_charging_w});
      if (!out.empty()) break;
    }
    return out;
  }

  // The temperature, clock and charge series of one simulation: results table thermal.<name>.
  static void add_series(RunContext& ctx, const std::string& name, const devices::PowerManager& pm) {
    const auto& series = pm.series();
    std::vector<double> t, tj, ts, w, soc;
    std::vector<std::int64_t> throttled, charging;
    const std::vector<std::string> units = pm.unit_names();
    std::vector<std::vector<double>> mhz(units.size());
    for (const devices::SustainedSample& s : series) {
      t.push_back(s.t_s);
      tj.push_back(s.junction_c);
      ts.push_back(s.skin_c);
      w.push_back(s.power_w);
      soc.push_back(s.battery_percent);
      throttled.push_back(s.throttled ? 1 : 0);
      charging.push_back(s.charging ? 1 : 0);
      for (std::size_t k = 0; k < units.size(); ++k) mhz[k].push_back(s.mhz[k]);
    }
    h5::Table& table = ctx.results.tables["thermal." + name];
    table.add("t_s", t, "s");
    table.add("junction_c", tj, "C");
    table.add("skin_c", ts, "C");
    table.add("soc_power_w", w, "W");
    table.add("battery_percent", soc, "%");
    table.add("throttled", throttled, "bool");
    table.add("charging", charging, "bool");
    for (std::size_t k = 0; k < units.size(); ++k) table.add(units[k] + "_mhz", mhz[k], "MHz");
  }

  Params params_;
  devices::SustainedOptions sustained_;
  devices::DeviceProfile device_;
  YAML::Node engine_;
  std::vector<LabelledPlugin<App>> apps_;
  bool shared_ = false, alone_ = false;
  std::uint64_t seed_ = 1, run_ = 0;
  WorkloadCache* workloads_ = nullptr;
  std::map<std::string, traces::RagTrace> rag_workloads_;  // by workload node, see rag_workload()
};

MOBISIM_REGISTER(Experiment, PhoneExperiment, "phone",
                 "Several apps (RAG assistant, chat, ...) at once on one phone: shared units, DRAM and flash.")

}  // namespace
}  // namespace mobisim::experiments
