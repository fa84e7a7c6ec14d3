// The `prefix_cache` experiment (seed 001): TTFT of chat sessions with a
// persistent prefix KV cache against full prefill, per device and eviction policy.
//
// For each device and policy, one simulation replays a day of chat sessions in
// arrival order on the phone, each session a request through the request pipeline
// (policies/pipeline/pipeline.h) with the prefix_store KV-reuse stage and the always_load
// strategy: a session hashes its prompt, loads the longest cached prefix from storage (queued
// UFS/NVMe model), prefills the rest on the compute unit, and after the first token stores the
// system prompt's prefixes (32/64/128/180 tokens) in the background; the cache evicts over its cap.
// Besides the trace replay, two tables put the note's own geometry beside its
// numbers: `calibration` (prefill of 180 tokens, load of the note's 74 MB) and
// `note_geometry` (a 180-token cached prefix plus a U-token suffix; a 128-token
// partial match). The sessions come from the chat workload generator or, with
// `workload: {trace: FILE.h5}`, from a chat trace (`mobisim trace generate-chat`):
// a trace written from the generator replays to the same numbers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/experiment.h"
#include "experiments/simulation.h"
#include "models/cost_model.h"
#include "policies/kvcache/chat_workload.h"
#include "policies/kvcache/prefix_cache.h"
#include "policies/kvsplit/kv_split.h"
#include "policies/pipeline/pipeline.h"
#include "policies/pipeline/prefix_store.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "sim/simulator.h"
#include "traces/chat_trace.h"

namespace mobisim::experiments {

namespace {

namespace kc = policies::kvcache;
namespace kvsplit = policies::kvsplit;
namespace pl = policies::pipeline;

struct DeviceEntrySpec {
  static ParamSchema schema() {
    ParamSchema s;
    s.node("device", "device profile: built-in name, YAML path, or {base: NAME, <field>: <override>}");
    devices::add_engine_param(s);
    s.real("cap_mb", 512, "prefix cache cap (the note: 512 MB iOS, 256 MB Android)").positive().with_unit("MB");
    s.text("compute_unit", std::string("gpu"), "unit running the prefill");
    s.real("note_uncached_ms", 0, "the note's median uncached TTFT (for the comparison columns)").non_negative();
    s.real("note_cached_ms", 0, "the note's median cached TTFT").non_negative();
    s.real_list("note_load_ms", std::vector<double>{0, 0}, "the note's range for loading the 74 MB prefix");
    // Per phone, because where a stored prefix lives differs by platform: the note keeps it in a
    // MemoryFile (shared memory) on Android and in an mmap'd file on iOS.
    s.real("page_cache_fraction", 0.0,
           "share of a loaded prefix already in DRAM on this phone (absent: the experiment's page_cache_fraction)")
        .range(0, 0.99);
    return s;
  }
};

struct DeviceEntry {
  devices::DeviceProfile profile;
  YAML::Node engine;  // resolved engine profile
  double cap_bytes = 0;
  std::string unit;
  double note_uncached_ms = 0, note_cached_ms = 0, note_load_lo_ms = 0, note_load_hi_ms = 0;
  double page_cache_fraction = 0;  // share of a loaded prefix already in DRAM, [0, 0.99]
};

struct Records {
  std::vector<double> arrival_s, ttft_ms, load_ms, prefill_ms, uncached_ms, full_hit_ms;
  std::vector<std::int64_t> variant, prompt_tokens, matched_tokens, system_tokens, inserted, evicted;
  std::vector<std::string> status;
  void to_table(h5::Table& t) const {
    t.add("arrival_s", arrival_s, "s");
    t.add("prompt_variant", variant, "index");
    t.add("prompt_tokens", prompt_tokens, "tokens");
    t.add("system_tokens", system_tokens, "tokens");
    t.add("matched_tokens", matched_tokens, "tokens");
    t.add("status", status);
    t.add("ttft_ms", ttft_ms, "ms");
    t.add("load_ms", load_ms, "ms");
    t.add("prefill_ms", prefill_ms, "ms");
    t.add("uncached_ttft_ms", uncached_ms, "ms");
    t.add("full_hit_ttft_ms", full_hit_ms, "ms");
    t.add("entries_inserted", inserted, "count");
    t.add("entries_evicted", evicted, "count");
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double mean(const std::vector<double>& v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

class PrefixCacheExperiment : public Experiment {
 public:
  explicit PrefixCacheExperiment(const Params& p) : params_(p), gran_(p.int_list("granularities")) {
    devices::require_thermal_none(p, "prefix_cache");
    model_ = models::load_model_spec(p.node("model"), p.source_of("model"));
    YAML::Node devs = p.node("devices");
    if (!devs.IsSequence() || devs.size() == 0) p.fail("devices", "expected a non-empty list of {device: NAME, cap_mb: ...}");
    ParamSchema ds = DeviceEntrySpec::schema();
    for (std::size_t i = 0; i < devs.size(); ++i) {
      Params dp(devs[i], ds, p.source_of("devices").element(i), {});
      DeviceEntry e;
      if (!dp.has("device")) dp.fail("device", "missing required key 'device' (a device profile)");
      e.profile = devices::load_device_for_engine(dp);
      e.engine = devices::resolved_engine(dp);
      e.cap_bytes = dp.real("cap_mb") * 1e6;
      e.unit = dp.text("compute_unit");
      e.profile.require_engine_values(e.unit, model_, dp.source_of("compute_unit").key_path);
      e.profile.require_storage(dp.source_of("device").key_path);
      e.note_uncached_ms = dp.real("note_uncached_ms");
      e.note_cached_ms = dp.real("note_cached_ms");
      const auto nl = dp.real_list("note_load_ms");
      if (nl.size() != 2) dp.fail("note_load_ms", "expected [low, high]");
      e.note_load_lo_ms = nl[0];
      e.note_load_hi_ms = nl[1];
      e.page_cache_fraction = dp.has("page_cache_fraction") ? dp.real("page_cache_fraction")
                                                            : p.real("page_cache_fraction");
      // A cap smaller than one entry is a configuration error, named here.
      const double smallest = static_cast<double>(*std::min_element(granularities().begin(), granularities().end())) *
                              model_.kv_bytes_per_token();
      if (smallest > e.cap_bytes)
        dp.fail("cap_mb", fmt::format("{} MB is smaller than one entry ({:.1f} MB for the smallest granularity)",
                                      e.cap_bytes / 1e6, smallest / 1e6));
      devices_.push_back(std::move(e));
    }
    YAML::Node ev = p.node("eviction");
    if (!ev.IsSequence() || ev.size() == 0) p.fail("eviction", "expected a list of eviction policies ([{impl: weighted_lru}, ...])");
    for (std::size_t i = 0; i < ev.size(); ++i) {
      YAML::Node node = yaml_clone(ev[i]);
      std::string label = node.IsMap() && node["impl"] ? node["impl"].as<std::string>() : node.as<std::string>();
      if (node.IsMap() && node["label"]) {
        label = node["label"].as<std::string>();
        node.remove("label");
      }
      Registry<kc::EvictionPolicy>::instance().validate(node, p.source_of("eviction").element(i));
      for (const auto& e : eviction_)
        if (e.label == label)
          throw ConfigError(fmt::format("{}: duplicate eviction label '{}' (add label: to tell them apart)",
                                        p.source_of("eviction").element(i).where(ev[i]), label));
      eviction_.push_back({label, node, p.source_of("eviction").element(i)});
    }
    // The workload: either a chat trace file ({trace: FILE.h5}) or the generator's parameters.
    YAML::Node wl = p.node("workload");
    if (wl.IsMap() && wl["trace"]) {
      if (wl.size() != 1) {
        std::string others;
        for (const auto& kv : wl)
          if (kv.first.as<std::string>() != "trace") others += (others.empty() ? "" : ", ") + kv.first.as<std::string>();
        p.fail("workload", fmt::format("give exactly one of 'trace: FILE.h5' or chat generator parameters, not both "
                                       "(found trace and {})",
                                       others));
      }
      if (!wl["trace"].IsScalar() || wl["trace"].as<std::string>().empty())
        p.fail("workload", "'trace' must be the path of a chat trace (mobisim trace generate-chat --out FILE.h5)");
      trace_path_ = resolve_input_path(wl["trace"].as<std::string>(), p.source_of("workload").child("trace"));
      trace_sessions_ = kc::sessions_from_chat_trace(traces::read_chat_trace(trace_path_));
    } else {
      ParamSchema ws = kc::ChatWorkloadConfig::schema();
      workload_ = kc::ChatWorkloadConfig::from_params(Params(wl, ws, p.source_of("workload"), {}));
    }
  }

  static ParamSchema schema() {
    ParamSchema s;
    s.node("thermal", devices::kThermalNoneDoc);
    s.node("model", "model (built-in name, YAML path or mapping)");
    s.node("devices",
           "list of {device, cap_mb, compute_unit, note_uncached_ms, note_cached_ms, note_load_ms, page_cache_fraction}");
    s.node("eviction", "list of kv_eviction_policy plug-ins to compare: [{impl: weighted_lru}, {impl: lru}, {impl: lfu}]");
    s.int_list("granularities", std::vector<std::int64_t>{32, 64, 128, 180}, "prefix lengths stored")
        .range(1, 1 << 20)
        .non_empty()
        .with_unit("tokens");
    s.integer("verify_tokens", 16, "leading token ids verified on a hit").range(0, 1 << 20);
    s.real("page_cache_fraction", 0.0, "share of a loaded prefix already in the page cache (DRAM)").range(0, 0.99);
    s.real("note_prefix_mb", 74, "the note's prefix size (MB) whose load time it reports").positive().with_unit("MB");
    s.int_list("suffix_tokens", std::vector<std::int64_t>{16, 32, 48, 64}, "suffixes of the note-geometry table")
        .range(1, 1 << 20)
        .non_empty();
    s.node("workload", "{trace: FILE.h5} (a chat trace, traces/SCHEMA.md) or the chat workload generator's settings "
                       "(policies/kvcache/chat_workload.h); not both");
    return s;
  }

  std::string default_plot() const override { return "prefix_cache_ttft.py"; }

  YAML::Node resolved_config(const YAML::Node& given) const override {
    YAML::Node out = yaml_clone(given);
    out["model"] = yaml_clone(model_.resolved);
    ParamSchema ds = DeviceEntrySpec::schema();
    YAML::Node devs(YAML::NodeType::Sequence);
    const YAML::Node given_devs = params_.node("devices");
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      YAML::Node d = Params(given_devs[i], ds, params_.source_of("devices").element(i), {}).resolved();
      d["device"] = yaml_clone(devices_[i].profile.resolved);
      d["page_cache_fraction"] = devices_[i].page_cache_fraction;
      devs.push_back(devices::with_engine(d, devices_[i].engine));
    }
    out["devices"] = devs;
    YAML::Node ev(YAML::NodeType::Sequence);
    for (const auto& e : eviction_) {
      YAML::Node r = Registry<kc::EvictionPolicy>::instance().resolve(e.node, e.source);
      r["label"] = e.label;
      ev.push_back(r);
    }
    out["eviction"] = ev;
    return out;
  }

  void prepare(RunContext&) override {
    for (const auto& dev : devices_)
      devices::Dram::check_fits(dev.profile.dram, dev.profile.name, {{"weights", model_.weight_bytes()}});
  }

  void run(RunContext& ctx) override {
    const models::CostModel cost(model_);
    // A trace gives the same sessions in every run; the generator draws them from (seed, run).
    const auto sessions = trace_path_.empty() ? kc::generate_chat_sessions(workload_, ctx.seed, ctx.run) : trace_sessions_;
    ctx.progress(fmt::format("{} sessions ({}), {} on {} devices, {} eviction policies", sessions.size(),
                             trace_path_.empty() ? std::string("generated") : "trace " + trace_path_, model_.name,
                             devices_.size(), eviction_.size()));
    calibration(ctx, cost);
    SummaryCols sum;
    for (const auto& dev : devices_) {
      simulate(ctx, cost, dev, sessions, nullptr, "no_cache", sum);
      for (const auto& ev : eviction_) simulate(ctx, cost, dev, sessions, &ev, ev.label, sum);
    }
    sum.to_table(ctx.results.summary);
  }

 private:
  struct EvictionEntry {
    std::string label;
    YAML::Node node;
    ConfigSource source;
  };

  struct SummaryCols {
    std::vector<std::string> device, policy;
    std::vector<std::int64_t> sessions, full_hits, partial_hits, misses, mismatches, evictions;
    std::vector<double> median_ttft, median_ttft_full_hit, median_uncached, speedup, note_uncached, note_cached,
        mean_load_full_hit, partial_recovery, partial128_recovery, cache_used_mb;
    void to_table(h5::Table& t) const {
      t.add("device", device);
      t.add("policy", policy);
      t.add("sessions", sessions, "count");
      t.add("full_hits", full_hits, "count");
      t.add("partial_hits", partial_hits, "count");
      t.add("misses", misses, "count");
      t.add("verify_mismatches", mismatches, "count");
      t.add("evictions", evictions, "count");
      t.add("median_ttft_ms", median_ttft, "ms");
      t.add("median_ttft_full_hit_ms", median_ttft_full_hit, "ms");
      t.add("median_uncached_ttft_ms", median_uncached, "ms");
      t.add("speedup_median", speedup, "x");
      t.add("note_uncached_ms", note_uncached, "ms");
      t.add("note_cached_ms", note_cached, "ms");
      t.add("mean_load_full_hit_ms", mean_load_full_hit, "ms");
      t.add("partial_recovery", partial_recovery, "fraction");
      // The note's own example ("tokens 0-127 match ... load the 128-token cache"): partial hits of 128 tokens.
      t.add("partial128_recovery", partial128_recovery, "fraction");
      t.add("cache_used_mb", cache_used_mb, "MB");
    }
  };

  const std::vector<std::int64_t>& granularities() const { return gran_; }

  static double load_seconds(const DeviceEntry& dev, double bytes) {
    const double f = dev.page_cache_fraction;
    return dev.profile.storage->read_seconds(bytes * (1 - f)) + bytes * f / (dev.profile.dram.bandwidth_gbps * 1e9);
  }
  double prefill_seconds(const DeviceEntry& dev, const models::CostModel& cost, std::int64_t n_new,
                         std::int64_t n_cached) const {
    return dev.profile.compute_seconds(dev.unit, cost.prefill(models::PrefillShape{n_new, n_cached, 0, 1}),
                                       model_.weight_dtype, "prefill");
  }

  void calibration(RunContext& ctx, const models::CostModel& cost) {
    const double kv_tok = model_.kv_bytes_per_token();
    const double note_bytes = params_.real("note_prefix_mb") * 1e6;
    std::vector<std::string> dev_col, storage_col;
    std::vector<double> prefill180, note_unc, load_note, load_ours, note_lo, note_hi, frac_needed, seq_read, bytes180, note_b;
    std::vector<std::string> gdev;
    std::vector<std::int64_t> gsuffix;
    std::vector<double> g_unc, g_cached, g_speed, g_partial, g_recovery, g_load;
    for (const auto& d : devices_) {
      const auto& st = *d.profile.storage;
      dev_col.push_back(d.profile.name);
      storage_col.push_back(st.kind);
      prefill180.push_back(prefill_seconds(d, cost, 180, 0) * 1e3);
      note_unc.push_back(d.note_uncached_ms);
      load_note.push_back(load_seconds(d, note_bytes) * 1e3);
      load_ours.push_back(st.read_seconds(180 * kv_tok) * 1e3);
      note_lo.push_back(d.note_load_lo_ms);
      note_hi.push_back(d.note_load_hi_ms);
      seq_read.push_back(st.seq_read_gbps);
      bytes180.push_back(180 * kv_tok);
      note_b.push_back(note_bytes);
      // Share of the 74 MB that must already sit in the page cache for the note's midpoint.
      const double cold = st.read_seconds(note_bytes), warm = note_bytes / (d.profile.dram.bandwidth_gbps * 1e9);
      const double mid = 0.5 * (d.note_load_lo_ms + d.note_load_hi_ms) * 1e-3;
      frac_needed.push_back(mid > 0 ? std::clamp((cold - mid) / (cold - warm), 0.0, 1.0) : 0.0);
      for (auto u : params_.int_list("suffix_tokens")) {
        const double unc = prefill_seconds(d, cost, 180 + u, 0);
        const double cached = load_seconds(d, 180 * kv_tok) + prefill_seconds(d, cost, u, 180);
        const double partial = load_seconds(d, 128 * kv_tok) + prefill_seconds(d, cost, 52 + u, 128);
        gdev.push_back(d.profile.name);
        gsuffix.push_back(u);
        g_unc.push_back(unc * 1e3);
        g_cached.push_back(cached * 1e3);
        g_load.push_back(load_seconds(d, 180 * kv_tok) * 1e3);
        g_speed.push_back(unc / cached);
        g_partial.push_back(partial * 1e3);
        g_recovery.push_back((unc - partial) / (unc - cached));
      }
    }
    h5::Table t;
    t.add("device", dev_col);
    t.add("storage", storage_col);
    t.add("seq_read_gbps", seq_read, "GB/s");
    t.add("prefill_180_ms", prefill180, "ms");
    t.add("note_uncached_ms", note_unc, "ms");
    t.add("note_prefix_bytes", note_b, "bytes");
    t.add("kv_bytes_180_tokens", bytes180, "bytes");
    t.add("load_note_prefix_ms", load_note, "ms");
    t.add("load_180_tokens_ms", load_ours, "ms");
    t.add("note_load_low_ms", note_lo, "ms");
    t.add("note_load_high_ms", note_hi, "ms");
    t.add("page_cache_share_for_note", frac_needed, "fraction");
    ctx.results.tables["calibration"] = std::move(t);
    h5::Table g;
    g.add("device", gdev);
    g.add("suffix_tokens", gsuffix, "tokens");
    g.add("uncached_ms", g_unc, "ms");
    g.add("load_ms", g_load, "ms");
    g.add("cached_ms", g_cached, "ms");
    g.add("speedup", g_speed, "x");
    g.add("partial128_ms", g_partial, "ms");
    g.add("partial128_recovery", g_recovery, "fraction");
    ctx.results.tables["note_geometry"] = std::move(g);
  }

  // A session as the pipeline's request: its system prompt (the persistent prefix), then the rest
  // of its prompt, with the trace's real token ids; the note measures TTFT, so one output token.
  static pl::Request request_of(const kc::ChatSession& s, std::size_t i) {
    pl::Request r;
    r.app = "chat";
    r.id = static_cast<std::int64_t>(i);
    r.arrival_s = s.arrival_s;
    const auto n = static_cast<std::int64_t>(s.tokens.size());
    r.prompt = {{"system", static_cast<std::uint64_t>(s.variant + 1), s.system_tokens},
                {"user", 0x05E5510000ULL + i, n - s.system_tokens}};
    r.output_tokens = 1;
    r.tokens = s.tokens;
    return r;
  }

  // The sessions through the pipeline (prefix store -> load -> prefill on the device's unit).
  sim::Task<void> replay(sim::Simulator& sim, devices::Device& device, const DeviceEntry& dev,
                         const models::CostModel& cost, const std::vector<kc::ChatSession>& sessions,
                         pl::Pipeline& pipeline, bool cached, Records& rec) {
    const double kv_tok = model_.kv_bytes_per_token();
    co_await pipeline.start(device, "chat");
    for (std::size_t i = 0; i < sessions.size(); ++i) {
      const kc::ChatSession& s = sessions[i];
      const sim::Time arrival = sim::from_seconds(s.arrival_s);
      if (sim.now() < arrival) co_await sim.timeout(arrival - sim.now());
      pl::Served out;
      co_await pipeline.serve(device, "chat/kv", request_of(s, i), out);
      const auto n = static_cast<std::int64_t>(s.tokens.size());
      const std::int64_t m = out.matched_tokens;
      rec.arrival_s.push_back(s.arrival_s);
      rec.variant.push_back(s.variant);
      rec.prompt_tokens.push_back(n);
      rec.system_tokens.push_back(s.system_tokens);
      rec.matched_tokens.push_back(m);
      rec.status.push_back(!cached             ? "no_cache"
                           : out.reuse_rejected ? "verify_mismatch"
                           : m == 0             ? "miss"
                           : m >= s.system_tokens ? "full_hit"
                                                  : "partial_hit");
      rec.ttft_ms.push_back(sim::to_ms(out.first_token - out.started));
      rec.load_ms.push_back(sim::to_ms(out.split_done - out.started));
      rec.prefill_ms.push_back(sim::to_ms(out.first_token - out.split_done));
      rec.uncached_ms.push_back(prefill_seconds(dev, cost, n, 0) * 1e3);
      rec.full_hit_ms.push_back(
          (load_seconds(dev, static_cast<double>(s.system_tokens) * kv_tok) +
           prefill_seconds(dev, cost, n - s.system_tokens, s.system_tokens)) * 1e3);
      rec.inserted.push_back(out.stored.inserted);
      rec.evicted.push_back(out.stored.evicted);
    }
  }

  void simulate(RunContext& ctx, const models::CostModel& cost, const DeviceEntry& dev,
                const std::vector<kc::ChatSession>& sessions, const EvictionEntry* ev, const std::string& label,
                SummaryCols& sum) {
    auto& variant = ctx.results.variant(dev.profile.name + "." + label);
    // The note's store: the system prompt's K/V at every granularity, up to the device's cap,
    // read back whole (always_load) with the page-cached share copied from DRAM.
    std::unique_ptr<pl::KvReuse> reuse;
    if (ev) {
      kc::PrefixCacheConfig cfg;
      cfg.granularities = granularities();
      cfg.verify_tokens = params_.integer("verify_tokens");
      cfg.cap_bytes = dev.cap_bytes;
      reuse = std::make_unique<pl::PrefixStore>(
          cfg, Registry<kc::EvictionPolicy>::instance().create(ev->node, ev->source), /*system_only=*/true);
    } else {
      reuse = Registry<pl::KvReuse>::instance().create(YAML::Load("{impl: none}"), ConfigSource{});
    }
    pl::PipelineOptions options;
    options.unit = dev.unit;
    options.page_cache_fraction = dev.page_cache_fraction;
    pl::Pipeline pipeline(cost, options, std::move(reuse),
                          Registry<kvsplit::KvSplitStrategy>::instance().create(YAML::Load("{impl: always_load}"),
                                                                               ConfigSource{}));
    Records rec;
    {
      SimulatedRun run(dev.profile, variant.stats.child("device"),
                       ctx.timeline_process(dev.profile.name + " / " + label,
                                            {{"device", dev.profile.name}, {"policy", label}}));
      run.device().dram().reserve("weights", model_.weight_bytes());
      run.start(replay(run.sim(), run.device(), dev, cost, sessions, pipeline, ev != nullptr, rec), "sessions");
      run.run();
    }
    rec.to_table(variant.records);
    std::vector<double> full, all = rec.ttft_ms, loads, recov, recov128;
    std::int64_t nf = 0, np = 0, nm = 0, nv = 0;
    for (std::size_t i = 0; i < rec.status.size(); ++i) {
      const auto& st = rec.status[i];
      if (st == "full_hit") {
        ++nf;
        full.push_back(rec.ttft_ms[i]);
        loads.push_back(rec.load_ms[i]);
      } else if (st == "partial_hit") {
        ++np;
        const double gain_full = rec.uncached_ms[i] - rec.full_hit_ms[i];
        if (gain_full > 0) recov.push_back((rec.uncached_ms[i] - rec.ttft_ms[i]) / gain_full);
        if (gain_full > 0 && rec.matched_tokens[i] == 128) recov128.push_back(recov.back());
      } else if (st == "verify_mismatch") {
        ++nv;
      } else if (st == "miss") {
        ++nm;
      }
    }
    sum.device.push_back(dev.profile.name);
    sum.policy.push_back(label);
    sum.sessions.push_back(static_cast<std::int64_t>(rec.status.size()));
    sum.full_hits.push_back(nf);
    sum.partial_hits.push_back(np);
    sum.misses.push_back(nm);
    sum.mismatches.push_back(nv);
    sum.evictions.push_back(pipeline.reuse().evictions());
    sum.median_ttft.push_back(median(all));
    sum.median_ttft_full_hit.push_back(median(full));
    sum.median_uncached.push_back(median(rec.uncached_ms));
    sum.speedup.push_back(full.empty() ? std::numeric_limits<double>::quiet_NaN() : median(rec.uncached_ms) / median(full));
    sum.note_uncached.push_back(dev.note_uncached_ms);
    sum.note_cached.push_back(dev.note_cached_ms);
    sum.mean_load_full_hit.push_back(mean(loads));
    sum.partial_recovery.push_back(mean(recov));
    sum.partial128_recovery.push_back(mean(recov128));
    sum.cache_used_mb.push_back(pipeline.reuse().stored_bytes() / 1e6);
    ctx.progress(fmt::format("{} {}: median TTFT {:.0f} ms (full hits {:.0f} ms, uncached {:.0f} ms), {} full / {} partial / {} miss",
                             dev.profile.name, label, median(all), median(full), median(rec.uncached_ms), nf, np, nm));
  }

  Params params_;
  models::ModelSpec model_;
  std::vector<DeviceEntry> devices_;
  std::vector<EvictionEntry> eviction_;
  kc::ChatWorkloadConfig workload_;
  std::string trace_path_;                   // non-empty: the workload comes from this chat trace
  std::vector<kc::ChatSession> trace_sessions_;
  std::vector<std::int64_t> gran_;
};

MOBISIM_REGISTER(Experiment, PrefixCacheExperiment, "prefix_cache",
                 "Chat sessions with a persistent prefix KV cache: TTFT cached vs uncached per device and eviction policy.")

}  // namespace
}  // namespace mobisim::experiments
