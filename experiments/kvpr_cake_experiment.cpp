// The `kvpr_cake` experiment: compute-or-load splits (seed 002) on the P100 server,
// the closed forms' error against the exact ILP, and the same strategies on phones.
//
// Parts (each optional, so one YAML can run one figure):
//   fig3     time of each strategy over pure load across sequence lengths, without and with Q
//            (seed 002 figure 3) on `device` (server-p100: PCIe 3.0 from host DRAM).
//   error    the closed forms' split against the exact ILP's (seed 002 figures 6 and 7), in the
//            document's analytic form for several widths h and in the device form.
//   phones   beyond the documents: a phone's prefix cache read from UFS/NVMe while the CPU, GPU
//            or NPU prefills blocks from the front (Cake), for K/V or PerCache-style Q/K/V
//            payloads; per device the prefix length above which Cake beats pure load.
//
// fig3 and phones are configurations of the request pipeline (policies/pipeline/pipeline.h): per
// strategy, a pipeline whose load_or_recompute slot holds it and whose KV-reuse stage finds a
// stored prefix of s tokens; every request's split is issued as events on one Device per
// figure (the server, or each phone), one request after another, so each split runs alone.
// The strategy's own plan (the closed form) is kept beside the events' time as its estimate.
// error compares split points of the closed forms and the exact ILP: no time is simulated.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/experiment.h"
#include "experiments/simulation.h"
#include "models/cost_model.h"
#include "policies/kvsplit/kv_split.h"
#include "policies/pipeline/pipeline.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "sim/stats.h"

namespace mobisim::experiments {

namespace {

using policies::kvsplit::AnalyticRates;
using policies::kvsplit::AnalyticSplitCosts;
using policies::kvsplit::DeviceCostOptions;
using policies::kvsplit::DeviceSplitCosts;
using policies::kvsplit::KvSplitStrategy;
using policies::kvsplit::Payload;
using policies::kvsplit::RecomputeKind;
using policies::kvsplit::SplitCosts;

namespace pl = policies::pipeline;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Longest sequence any sweep accepts: 1M tokens is beyond every model here; the ILP split's cost
// grows with the length, so 2^63 would never finish.
constexpr double kMaxSeqLen = 1 << 20;

struct ErrorSpec {
  static ParamSchema schema() {
    ParamSchema s;
    s.int_list("seq_lens", std::vector<std::int64_t>{64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192},
               "sequence lengths of the error sweep")
        .range(0, kMaxSeqLen).non_empty();
    s.real_list("analytic_h", std::vector<double>{1024, 2560, 4096}, "embedding widths h of the analytic form").non_empty();
    s.real("c1", 1.0 / 1.013, "constant of the closed form").positive();
    s.real("c2", 1.0 / 1.026, "constant of the Q-aware closed form").positive();
    return s;
  }
};

constexpr const char* kDefaultPhoneModel = "generic-3b";

struct PhoneSpec {
  static ParamSchema schema() {
    ParamSchema s;
    s.text_list("devices", std::vector<std::string>{"midtier-android-ufs21", "pixel7", "redmi-k60-pro", "iphone-14-pro"},
                "phone profiles (UFS 2.1 / 3.1 / 4.0 / NVMe)").non_empty();
    s.text_list("units", std::vector<std::string>{"gpu", "cpu", "npu"}, "compute units that prefill blocks (npu: NPU graphs)").non_empty();
    s.text_list("payloads", std::vector<std::string>{"kv", "qkv"}, "what the store holds per token: K/V or PerCache Q/K/V").non_empty();
    s.int_list("prefix_lens", std::vector<std::int64_t>{32, 64, 128, 180, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096},
               "prefix lengths")
        .range(0, kMaxSeqLen).non_empty();
    s.int_list("block_tokens", std::vector<std::int64_t>{32, 128, 512},
               "Cake block sizes on the phone (a block's prefill reads every weight once: larger blocks amortise it)")
        .range(1, kMaxSeqLen).non_empty();
    s.real("compute_block_overhead_us", 20, "per block and layer on the compute stream").range(0, 1e6).with_unit("us");
    s.real("load_block_overhead_us", 5, "per block and layer on the read stream").range(0, 1e6).with_unit("us");
    s.node("model", "model whose prefix is cached: built-in name (default generic-3b), YAML path or inline mapping "
                    "{base: NAME, weight_dtype: ...}");
    return s;
  }
};

// One pipeline configuration and the prefix lengths served through it.
struct Series {
  std::unique_ptr<pl::Pipeline> pipeline;
  std::vector<std::int64_t> lens;
  std::vector<pl::Served> served;
};

// A prompt whose first s tokens have K/V stored, and one token to prefill (its logits give the
// answer's first token); an answer of one token (no decode step).
pl::Request stored_prefix_request(std::int64_t id, std::int64_t s) {
  pl::Request r;
  r.app = "kvpr_cake";
  r.id = id;
  r.prompt = {{"stored", 1, s}, {"query", 2, 1}};
  r.output_tokens = 1;
  return r;
}

sim::Task<void> serve_series(devices::Device& device, std::vector<Series>& series) {
  std::int64_t id = 0;
  for (std::size_t i = 0; i < series.size(); ++i) {
    Series& sr = series[i];
    const std::string owner = fmt::format("series {}", i);
    co_await sr.pipeline->start(device, owner);
    for (const std::int64_t s : sr.lens) {
      sr.served.emplace_back();
      co_await sr.pipeline->serve(device, owner + "/kv", stored_prefix_request(id++, s), sr.served.back());
    }
  }
}

// Every series' requests one after another on one Device of `profile`, its statistics (DRAM peak and
// time-weighted use, unit and flash busy time) under `stats`.
void serve_on_one_device(const devices::DeviceProfile& profile, std::vector<Series>& series, sim::StatGroup& stats) {
  SimulatedRun run(profile, stats);
  run.start(serve_series(run.device(), series), "kvpr_cake requests");
  run.run();
}

std::unique_ptr<KvSplitStrategy> make_strategy(const YAML::Node& node, const ConfigSource& source) {
  return Registry<KvSplitStrategy>::instance().create(node, source);
}

class KvprCakeExperiment : public Experiment {
 public:
  explicit KvprCakeExperiment(const Params& p) : params_(p) {
    devices::require_thermal_none(p, "kvpr_cake");
    parts_ = p.text_list("parts");
    for (const auto& part : parts_)
      if (part != "fig3" && part != "error" && part != "phones")
        p.fail("parts", fmt::format("unknown part '{}' (expected fig3, error, phones)", part));
    device_ = devices::load_device_for_engine(p);
    engine_ = devices::resolved_engine(p);
    const devices::EngineProfile engine_profile = devices::load_engine_profile(engine_, p.source_of("engine"));
    model_ = models::load_model_spec(p.node("model"), p.source_of("model"));
    unit_ = p.text("compute_unit");
    link_ = p.text("link");
    device_.require_engine_values(unit_, model_, "experiment.compute_unit");
    if (!link_.empty()) device_.link(link_, "experiment.link");
    seq_lens_ = p.int_list("seq_lens");
    for (auto s : seq_lens_)
      if (s < 0) p.fail("seq_lens", fmt::format("sequence length {} must be >= 0", s));
    YAML::Node strat = p.node("strategies");
    if (!strat.IsSequence() || strat.size() == 0)
      p.fail("strategies", fmt::format("expected a non-empty list of strategies (known: {})",
                                       fmt::join(Registry<KvSplitStrategy>::instance().names(), ", ")));
    for (std::size_t i = 0; i < strat.size(); ++i) {
      YAML::Node node = yaml_clone(strat[i]);
      std::string label = node.IsMap() && node["impl"] ? node["impl"].as<std::string>() : node.as<std::string>();
      if (node.IsMap() && node["label"]) {
        label = node["label"].as<std::string>();
        node.remove("label");
      }
      const ConfigSource src = p.source_of("strategies").element(i);
      make_strategy(node, src);  // a bad entry fails here, before anything runs
      strategies_.push_back({label, node, src});
    }
    ParamSchema es = ErrorSpec::schema(), ps = PhoneSpec::schema();
    error_ = std::make_unique<Params>(p.node("error"), es, p.source_of("error"), std::vector<std::string>{});
    phones_ = std::make_unique<Params>(p.node("phones"), ps, p.source_of("phones"), std::vector<std::string>{});
    for (const auto& name : phones_->text_list("devices")) {
      phone_profiles_.push_back(engine_profile.apply(devices::load_device_profile(name)));
      devices::record_inherited(phone_profiles_.back(), p.source_of("phones"));
    }
    const YAML::Node phone_model = phones_->node("model");
    phone_model_ = phone_model.IsDefined() && !phone_model.IsNull()
                       ? models::load_model_spec(phone_model, phones_->source_of("model"))
                       : models::load_model_spec(std::string(kDefaultPhoneModel));
    for (const auto& pl : phones_->text_list("payloads"))
      if (pl != "kv" && pl != "qkv") phones_->fail("payloads", fmt::format("unknown payload '{}' (expected kv, qkv)", pl));
  }

  YAML::Node resolved_config(const YAML::Node& given) const override {
    YAML::Node out = yaml_clone(given);
    out["device"] = yaml_clone(device_.resolved);
    out["model"] = yaml_clone(model_.resolved);
    out["error"] = error_->resolved();
    out["phones"] = phones_->resolved();
    out["phones"]["model"] = phones_->has("model") ? yaml_clone(phones_->node("model")) : YAML::Node(kDefaultPhoneModel);
    return devices::with_engine(out, engine_);
  }

  static ParamSchema schema() {
    ParamSchema s;
    s.node("thermal", devices::kThermalNoneDoc);
    s.text_list("parts", std::vector<std::string>{"fig3", "error", "phones"}, "which parts to run: fig3, error, phones").non_empty();
    s.node("device", "server profile of figure 3 (built-in name, YAML path or mapping)");
    devices::add_engine_param(s);
    s.node("model", "model (built-in name, YAML path or mapping)");
    s.text("compute_unit", std::string("gpu"), "compute stream unit");
    s.text("link", std::string("pcie"), "copy stream link (empty: the device's storage)");
    s.int_list("seq_lens", std::vector<std::int64_t>{64, 128, 256, 512, 1024, 2048, 4096, 8192}, "figure 3 sequence lengths")
        .range(0, kMaxSeqLen).non_empty();
    s.node("strategies", "list of kv_split_strategy plug-ins: [{impl: always_load}, {impl: cake, block_tokens: 64}, ...]");
    s.node("error", "figures 6-7 sweep: seq_lens, analytic_h, c1, c2");
    s.node("phones", "phone extension: devices, units, payloads, prefix_lens, block_tokens, overheads, model");
    return s;
  }

  std::string default_plot() const override { return "kvpr_cake_fig3.py"; }

  void run(RunContext& ctx) override {
    const models::CostModel cost(model_);
    auto has = [&](const char* part) { return std::find(parts_.begin(), parts_.end(), part) != parts_.end(); };
    if (has("fig3")) run_fig3(ctx, cost);
    if (has("error")) run_error(ctx, cost);
    if (has("phones")) run_phones(ctx);
  }

 private:
  struct Entry {
    std::string label;
    YAML::Node node;  // the strategy's configuration: each pipeline gets its own instance
    ConfigSource source;
  };

  // K/V rebuilt from layer inputs X that cross the link first (KVPR's server).
  DeviceCostOptions fig3_costs() const {
    DeviceCostOptions o;
    o.compute_unit = unit_;
    o.link = link_;
    o.recompute = RecomputeKind::kHidden;
    return o;
  }

  Series fig3_series(const models::CostModel& cost, const Entry& e, bool with_q) const {
    pl::PipelineOptions o;
    o.unit = unit_;
    o.link = link_;
    o.recompute = RecomputeKind::kHidden;
    o.with_q = with_q;
    auto pipeline = std::make_unique<pl::Pipeline>(
        cost, o, Registry<pl::KvReuse>::instance().create(YAML::Load("{impl: stored_prefix}"), ConfigSource{}),
        make_strategy(e.node, e.source));
    return Series{std::move(pipeline), seq_lens_, {}};
  }

  // Pure load: the entry labelled always_load, else the plain strategy.
  Entry load_entry() const {
    for (const auto& e : strategies_)
      if (e.label == "always_load") return e;
    return Entry{"always_load", YAML::Node("always_load"), ConfigSource{}};
  }

  void run_fig3(RunContext& ctx, const models::CostModel& cost) {
    ctx.progress(fmt::format("figure 3: {}", DeviceSplitCosts(cost, device_, fig3_costs()).describe()));
    // Per Q setting: the baseline, then every strategy (series q * (1 + n) + 1 + k).
    std::vector<Series> series;
    for (int q = 0; q <= 1; ++q) {
      series.push_back(fig3_series(cost, load_entry(), q == 1));
      for (const auto& e : strategies_) series.push_back(fig3_series(cost, e, q == 1));
    }
    serve_on_one_device(device_, series, ctx.results.variant("fig3").stats.child("device"));
    Fig3Table t;
    for (int q = 0; q <= 1; ++q) {
      const std::size_t base = static_cast<std::size_t>(q) * (1 + strategies_.size());
      for (std::size_t k = 0; k < strategies_.size(); ++k)
        t.add_series(strategies_[k].label, q, series[base], series[base + 1 + k]);
    }
    t.write(ctx);
  }

  // Figure 3's rows and its summary (per strategy and Q setting).
  struct Fig3Table {
    std::vector<std::int64_t> seq, with_q, l_col;
    std::vector<std::string> label;
    std::vector<double> time_ms, ratio, compute_busy_ms, copy_busy_ms;
    std::vector<std::string> s_label;
    std::vector<std::int64_t> s_q, s_from;
    std::vector<double> s_first, s_last, s_min;

    void add_series(const std::string& name, int q, const Series& base, const Series& run) {
      double first = kNaN, last = kNaN, mn = kNaN;
      std::int64_t beats_from = -1;
      for (std::size_t i = 0; i < run.served.size(); ++i) {
        const pl::Served& b = base.served[i];
        const pl::Served& x = run.served[i];
        const double r = b.split_s > 0 ? x.split_s / b.split_s : 1.0;
        seq.push_back(run.lens[i]);
        with_q.push_back(q);
        label.push_back(name);
        l_col.push_back(x.recomputed_tokens);
        time_ms.push_back(x.split_s * 1e3);
        ratio.push_back(r);
        compute_busy_ms.push_back(x.split_compute_s * 1e3);
        copy_busy_ms.push_back(x.split_copy_s * 1e3);
        if (std::isnan(first)) first = r;
        last = r;
        mn = std::isnan(mn) ? r : std::min(mn, r);
        beats_from = r < 1.0 - 1e-9 ? (beats_from < 0 ? run.lens[i] : beats_from) : -1;  // must beat load from here on
      }
      s_label.push_back(name);
      s_q.push_back(q);
      s_first.push_back(first);
      s_last.push_back(last);
      s_min.push_back(mn);
      s_from.push_back(beats_from);
    }

    void write(RunContext& ctx) const {
      h5::Table t;
      t.add("seq_len", seq, "tokens");
      t.add("with_q", with_q, "bool");
      t.add("strategy", label);
      t.add("recomputed_tokens", l_col, "tokens");
      t.add("time_ms", time_ms, "ms");
      t.add("ratio_vs_load", ratio, "ratio");
      t.add("compute_busy_ms", compute_busy_ms, "ms");
      t.add("copy_busy_ms", copy_busy_ms, "ms");
      ctx.results.tables["fig3"] = std::move(t);
      h5::Table& sm = ctx.results.summary;
      sm.add("strategy", s_label);
      sm.add("with_q", s_q, "bool");
      sm.add("ratio_at_shortest", s_first, "ratio");
      sm.add("ratio_at_longest", s_last, "ratio");
      sm.add("min_ratio", s_min, "ratio");
      sm.add("beats_load_from_tokens", s_from, "tokens");
    }
  };

  void run_error(RunContext& ctx, const models::CostModel& cost) {
    const auto lens = error_->int_list("seq_lens");
    const double c1 = error_->real("c1"), c2 = error_->real("c2");
    std::vector<std::string> form, costs_col;
    std::vector<std::int64_t> seq, l_ilp, l_cf;
    std::vector<double> l_real, err_pct, err_pct_c_one, penalty_pct;
    auto sweep = [&](const SplitCosts& costs, const std::string& name) {
      for (int q = 0; q <= 1; ++q) {
        for (auto s : lens) {
          const std::int64_t li = policies::kvsplit::ilp_split(costs, s, q == 1);
          const AnalyticRates r = costs.rates();
          const std::int64_t lc = q == 1 ? policies::kvsplit::closed_form_split_q(r, s, c2)
                                         : policies::kvsplit::closed_form_split(r, s, c1);
          const std::int64_t lc1 = q == 1 ? policies::kvsplit::closed_form_split_q(r, s, 1.0)
                                          : policies::kvsplit::closed_form_split(r, s, 1.0);
          auto pct = [&](std::int64_t l) {
            if (li == 0) return l == 0 ? 0.0 : kNaN;
            return 100.0 * static_cast<double>(l - li) / static_cast<double>(li);
          };
          const double t_ilp = policies::kvsplit::split_objective_s(costs, s, li, q == 1);
          const double t_cf = policies::kvsplit::split_objective_s(costs, s, lc, q == 1);
          form.push_back(q == 1 ? "closed_form_q" : "closed_form");
          costs_col.push_back(name);
          seq.push_back(s);
          l_ilp.push_back(li);
          l_cf.push_back(lc);
          l_real.push_back(policies::kvsplit::closed_form_real(r, s, q == 1));
          err_pct.push_back(pct(lc));
          err_pct_c_one.push_back(pct(lc1));
          penalty_pct.push_back(t_ilp > 0 ? 100.0 * (t_cf - t_ilp) / t_ilp : 0.0);
        }
      }
    };
    const AnalyticRates dev = DeviceSplitCosts(cost, device_, {unit_, link_, RecomputeKind::kHidden, Payload::kKv, 64, 0}).rates();
    for (double h : error_->real_list("analytic_h")) {
      AnalyticRates r = dev;
      r.h = h;
      sweep(AnalyticSplitCosts(r), fmt::format("analytic h={:g}", h));
    }
    DeviceCostOptions o;
    o.compute_unit = unit_;
    o.link = link_;
    sweep(DeviceSplitCosts(cost, device_, o), fmt::format("device {} ({})", device_.name, model_.name));
    h5::Table t;
    t.add("form", form);
    t.add("costs", costs_col);
    t.add("seq_len", seq, "tokens");
    t.add("l_ilp", l_ilp, "tokens");
    t.add("l_closed_form", l_cf, "tokens");
    t.add("l_real_without_c", l_real, "tokens");
    t.add("error_pct", err_pct, "%");
    t.add("error_pct_without_c", err_pct_c_one, "%");
    t.add("time_penalty_pct", penalty_pct, "%");
    ctx.results.tables["error"] = std::move(t);
    ctx.progress(fmt::format("figures 6-7: {} rows", seq.size()));
  }

  // One phone configuration: the unit that rebuilds, what the store holds, Cake's block size.
  struct PhoneCombo {
    std::string unit, payload;
    std::int64_t block = 0;
  };

  std::vector<PhoneCombo> phone_combos(const devices::DeviceProfile& prof) const {
    std::vector<PhoneCombo> out;
    for (const auto& unit : phones_->text_list("units")) {
      if (unit == "npu" ? !prof.npu.has_value() : prof.compute.count(unit) == 0) continue;  // the phone lacks it
      for (const auto& pl : phones_->text_list("payloads"))
        for (const auto block : phones_->int_list("block_tokens")) {
          if (block <= 0) phones_->fail("block_tokens", "block sizes must be > 0");
          out.push_back({unit, pl, block});
        }
    }
    return out;
  }

  // What the phone's split costs are built from (K/V by prefill, read from flash).
  static DeviceCostOptions phone_costs(const PhoneCombo& c) {
    DeviceCostOptions o;
    o.compute_unit = c.unit;
    o.link = "";
    o.recompute = RecomputeKind::kPrefill;
    o.payload = c.payload == "kv" ? Payload::kKv : Payload::kQkv;
    o.npu_chunk = c.block;
    return o;
  }

  YAML::Node phone_cake(std::int64_t block) const {
    YAML::Node n;
    n["impl"] = "cake";
    n["block_tokens"] = block;
    n["compute_block_overhead_us"] = phones_->real("compute_block_overhead_us");
    n["load_block_overhead_us"] = phones_->real("load_block_overhead_us");
    return n;
  }

  Series phone_series(const models::CostModel& cost, const PhoneCombo& c, const YAML::Node& strategy) const {
    pl::PipelineOptions o;
    o.unit = c.unit;
    o.payload = phone_costs(c).payload;
    o.npu_chunk = c.block;
    auto pipeline = std::make_unique<pl::Pipeline>(
        cost, o, Registry<pl::KvReuse>::instance().create(YAML::Load("{impl: stored_prefix}"), ConfigSource{}),
        make_strategy(strategy, ConfigSource{}));
    return Series{std::move(pipeline), phones_->int_list("prefix_lens"), {}};
  }

  // Per phone, one Device: for every combination pure load, Cake and the exact ILP's split
  // (series 3 * c + 0, 1, 2).
  void run_phones(RunContext& ctx) {
    const models::CostModel cost(phone_model_);
    PhoneTable t;
    for (const auto& prof : phone_profiles_) {
      const std::vector<PhoneCombo> combos = phone_combos(prof);
      std::vector<Series> series;
      for (const auto& c : combos) {
        series.push_back(phone_series(cost, c, YAML::Node("always_load")));
        series.push_back(phone_series(cost, c, phone_cake(c.block)));
        series.push_back(phone_series(cost, c, YAML::Node("kvpr_ilp")));
      }
      serve_on_one_device(prof, series, ctx.results.variant("phones").stats.child(prof.name).child("device"));
      for (std::size_t i = 0; i < combos.size(); ++i)
        t.add_combo(prof, combos[i], DeviceSplitCosts(cost, prof, phone_costs(combos[i])), series[3 * i],
                    series[3 * i + 1], series[3 * i + 2]);
    }
    t.write(ctx);
    ctx.progress(fmt::format("phones: {} device/unit/payload combinations", t.th_dev.size()));
  }

  // The phones' rows (one per prefix length) and thresholds (one per combination). The *_estimate_ms
  // columns are the strategies' own plans (closed forms): the events' times with nothing else
  // running, up to the flash commands' rounding to nanoseconds.
  struct PhoneTable {
    std::vector<std::string> dev_col, storage_col, unit_col, payload_col;
    std::vector<std::int64_t> len_col, cake_l, ilp_l, block_col, th_block;
    std::vector<double> load_ms, cake_ms, ilp_ms, recompute_ms, ratio_cake, ratio_ilp;
    std::vector<double> load_est_ms, cake_est_ms, ilp_est_ms;
    std::vector<std::string> th_dev, th_storage, th_unit, th_payload;
    std::vector<std::int64_t> th_len;
    std::vector<double> th_ratio_max, th_saved_ms_max;

    void add_combo(const devices::DeviceProfile& prof, const PhoneCombo& c, const DeviceSplitCosts& costs,
                   const Series& load, const Series& cake, const Series& ilp) {
      const std::string storage = prof.storage ? prof.storage->kind : "-";
      std::int64_t from = -1;
      double r_last = kNaN, saved_last = kNaN;
      for (std::size_t i = 0; i < load.served.size(); ++i) {
        const pl::Served &ld = load.served[i], &ck = cake.served[i], &il = ilp.served[i];
        const std::int64_t s = load.lens[i];
        dev_col.push_back(prof.name);
        storage_col.push_back(storage);
        unit_col.push_back(c.unit);
        payload_col.push_back(c.payload);
        block_col.push_back(c.block);
        len_col.push_back(s);
        load_ms.push_back(ld.split_s * 1e3);
        cake_ms.push_back(ck.split_s * 1e3);
        ilp_ms.push_back(il.split_s * 1e3);
        load_est_ms.push_back(ld.split_estimate_s * 1e3);
        cake_est_ms.push_back(ck.split_estimate_s * 1e3);
        ilp_est_ms.push_back(il.split_estimate_s * 1e3);
        recompute_ms.push_back(costs.recompute_s(0, s) * 1e3);
        cake_l.push_back(ck.recomputed_tokens);
        ilp_l.push_back(il.recomputed_tokens);
        const double r = ld.split_s > 0 ? ck.split_s / ld.split_s : 1.0;
        ratio_cake.push_back(r);
        ratio_ilp.push_back(ld.split_s > 0 ? il.split_s / ld.split_s : 1.0);
        from = r < 1.0 - 1e-9 ? (from < 0 ? s : from) : -1;
        r_last = r;
        saved_last = (ld.split_s - ck.split_s) * 1e3;
      }
      th_dev.push_back(prof.name);
      th_storage.push_back(storage);
      th_unit.push_back(c.unit);
      th_payload.push_back(c.payload);
      th_block.push_back(c.block);
      th_len.push_back(from);
      th_ratio_max.push_back(r_last);
      th_saved_ms_max.push_back(saved_last);
    }

    void write(RunContext& ctx) const {
      h5::Table t;
      t.add("device", dev_col);
      t.add("storage", storage_col);
      t.add("unit", unit_col);
      t.add("payload", payload_col);
      t.add("block_tokens", block_col, "tokens");
      t.add("prefix_len", len_col, "tokens");
      t.add("load_ms", load_ms, "ms");
      t.add("cake_ms", cake_ms, "ms");
      t.add("best_split_ms", ilp_ms, "ms");
      t.add("recompute_ms", recompute_ms, "ms");
      t.add("cake_recomputed_tokens", cake_l, "tokens");
      t.add("best_split_tokens", ilp_l, "tokens");
      t.add("cake_over_load", ratio_cake, "ratio");
      t.add("best_split_over_load", ratio_ilp, "ratio");
      t.add("load_estimate_ms", load_est_ms, "ms");
      t.add("cake_estimate_ms", cake_est_ms, "ms");
      t.add("best_split_estimate_ms", ilp_est_ms, "ms");
      ctx.results.tables["phones"] = std::move(t);
      h5::Table th;
      th.add("device", th_dev);
      th.add("storage", th_storage);
      th.add("unit", th_unit);
      th.add("payload", th_payload);
      th.add("block_tokens", th_block, "tokens");
      th.add("cake_beats_load_from_tokens", th_len, "tokens");
      th.add("cake_over_load_at_longest", th_ratio_max, "ratio");
      th.add("saved_ms_at_longest", th_saved_ms_max, "ms");
      ctx.results.tables["phone_threshold"] = std::move(th);
    }
  };

  Params params_;
  std::vector<std::string> parts_;
  devices::DeviceProfile device_;
  YAML::Node engine_;  // the resolved engine profile (stored with results)
  models::ModelSpec model_, phone_model_;
  std::string unit_, link_;
  std::vector<std::int64_t> seq_lens_;
  std::vector<Entry> strategies_;
  std::unique_ptr<Params> error_, phones_;
  std::vector<devices::DeviceProfile> phone_profiles_;
};

MOBISIM_REGISTER(Experiment, KvprCakeExperiment, "kvpr_cake",
                 "Compute-or-load K/V splits (KVPR ILP, closed forms, Cake) on a server and on phones.")

}  // namespace
}  // namespace mobisim::experiments
