// The `dynakv` experiment (seed 003): long-sequence decoding with KV clusters on
// phone flash. For every decode length and variant (a kv_cluster_policy, a flash
// placement, a DRAM cache), a session is replayed (policies/kvcluster/session_replay.h)
// and each step's latency is composed per layer as the document's pipeline does
// (section 6.1): the layer's reads (runs of pages timed on the simulated UFS of
// `device`) overlap its CPU decode compute, so a layer costs max(io, compute).
//
// Sessions: the drifting generator (traces/kv_session.h) with the model's KV heads
// and head_dim, for `sim_layers` layers; the per-token numbers are scaled by
// n_layers / sim_layers (every layer behaves alike in the generator). Or a
// session file (format mobisim-kv-session), replayed as it is.
//
// Parameters:
//   device         node   oneplus-12   device profile (storage and CPU)
//   model          node   qwen2.5-3b   model spec (layers, KV heads, head_dim, weights)
//   precision      text   fp8          weights and KV precision: fp8 or int4 (Figure 16)
//   decode_lengths ints   [1024]       decode lengths T (Table 6: 1K-16K)
//   prefill        int    512          prefill length L0 of generated sessions
//   sim_layers     int    2            layers generated and replayed
//   session_seed   int    1            generator seed
//   session_file   text   (optional)   replay this file instead of generating
//   variants       node   (required)   list of {name, policy: {impl: ...}, placement: sequence|intra|inter,
//                                      cache_ratio: real, replacement: {impl: ...}}
#include <fmt/format.h>

#include <cmath>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/experiment.h"
#include "models/cost_model.h"
#include "models/model_spec.h"
#include "policies/kvcluster/cluster_cache.h"
#include "policies/kvcluster/session_replay.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "traces/kv_session.h"

namespace mobisim::experiments {

namespace {

using policies::kvcluster::KvClusterPolicy;
using policies::kvcluster::ReplayOptions;

struct VariantSpec {
  std::string name;
  std::unique_ptr<KvClusterPolicy> policy;
  policies::kvcluster::Placement placement = policies::kvcluster::Placement::kInterCluster;
  double cache_ratio = 0;
  std::shared_ptr<const policies::kvcluster::ClusterReplacement> replacement;
};

class DynaKvExperiment : public Experiment {
 public:
  explicit DynaKvExperiment(const Params& p) {
    device_ = devices::load_device_for_engine(p);
    engine_ = devices::resolved_engine(p);
    model_ = models::load_model_spec(p.node("model"), p.source_of("model"));
    dtype_ = models::parse_dtype(p.text("precision"));
    decode_lengths_ = p.int_list("decode_lengths");
    for (auto t : decode_lengths_)
      if (t <= 0) p.fail("decode_lengths", fmt::format("decode lengths must be positive (got {})", t));
    prefill_ = static_cast<int>(p.integer("prefill"));
    sim_layers_ = static_cast<int>(p.integer("sim_layers"));
    seed_ = static_cast<std::uint64_t>(p.integer("session_seed"));
    if (p.has("session_file")) session_file_ = p.text("session_file");
    const YAML::Node list = p.node("variants");
    const ConfigSource where = p.source_of("variants");
    if (!list.IsSequence() || list.size() == 0) p.fail("variants", "expected a non-empty list of variants");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const YAML::Node v = list[i];
      const ConfigSource vs = where.element(i);
      ParamSchema schema;
      schema.text("name", std::nullopt, "variant name");
      schema.node("policy", "kv_cluster_policy");
      schema.text("placement", std::string("inter"), "flash placement").in({"sequence", "intra", "inter"});
      schema.real("cache_ratio", 0.0, "DRAM cache budget as a share of the KV cache").range(0.0, 1.0);
      schema.node("replacement", "kv_cluster_replacement (default cluster_aligned)");
      Params vp(v, schema, vs, {});
      VariantSpec spec;
      spec.name = vp.text("name");
      spec.policy = Registry<KvClusterPolicy>::instance().create(vp.node("policy"), vs.child("policy"));
      spec.placement = policies::kvcluster::placement_from_string(vp.text("placement"));
      spec.cache_ratio = vp.real("cache_ratio");
      spec.replacement = policies::kvcluster::make_replacement(vp.node("replacement"), vs.child("replacement"));
      variants_.push_back(std::move(spec));
    }
    storage_ = device_.require_storage("dynakv experiment");
    cpu_ = device_.unit("cpu", "dynakv experiment");
    unit_ = p.text("compute_unit");
    device_.require_unit(unit_, "dynakv experiment.compute_unit");
  }

  static ParamSchema schema() {
    ParamSchema s;
    s.node("device", "device profile (name or mapping)");
    devices::add_engine_param(s);
    s.node("model", "model spec (name or mapping)");
    s.text("precision", std::string("fp8"), "weights and KV precision").in({"fp8", "int4"});
    s.text("compute_unit", std::string("cpu"), "unit running the decode: a compute unit or npu (clustering stays on the cpu)");
    s.int_list("decode_lengths", std::vector<std::int64_t>{1024}, "decode lengths T");
    s.integer("prefill", 512, "prefill length L0 of generated sessions").at_least(1);
    s.integer("sim_layers", 2, "layers generated and replayed").at_least(1);
    s.integer("session_seed", 1, "seed of the drifting generator").non_negative();
    s.text("session_file", std::nullopt, "a mobisim-kv-session file to replay instead").optional();
    s.node("variants", "list of {name, policy, placement, cache_ratio, replacement}");
    return s;
  }

  YAML::Node resolved_config(const YAML::Node& given) const override {
    YAML::Node out = yaml_clone(given);
    return devices::with_engine(out, engine_);
  }

  void run(RunContext& ctx) override {
    h5::Table& sm = ctx.results.summary;
    std::vector<std::string> names;
    std::vector<std::int64_t> lengths, clusters;
    std::vector<double> latency_ms, io_ms, compute_ms, read_mb, cmds, mass, variance, eff_bw, energy_mj, forced_mb,
        moved_mb, naive_mb, hit_rate, cache_peak_mb, run_mean, run_max, transfer_mb;
    for (const auto t : decode_lengths_) {
      const traces::KvSession session = make_session(static_cast<int>(t));
      const double scale = static_cast<double>(model_.n_layers) / session.n_layers;
      const std::int64_t entry_bytes =
          static_cast<std::int64_t>(std::llround(2.0 * session.head_dim * models::dtype_bytes(dtype_)));
      for (const auto& v : variants_) {
        ctx.progress(fmt::format("T={} {}", t, v.name));
        ReplayOptions opt;
        opt.placement = v.placement;
        opt.entry_bytes = std::max<std::int64_t>(1, entry_bytes);
        opt.cache_ratio = v.cache_ratio;
        opt.replacement = v.cache_ratio > 0 ? v.replacement : nullptr;
        opt.measure_accuracy = true;
        opt.storage = storage_;
        const auto r = policies::kvcluster::replay_session(session, *v.policy, opt);
        const models::CostModel cost(model_);
        double lat = 0, io = 0, comp = 0, bytes = 0, wanted = 0, c = 0, m = 0, forced = 0;
        for (std::size_t step = 0; step < r.steps.size(); ++step) {
          const auto& st = r.steps[step];
          // Decode of one token attending the retrieved context (per table average) on the compute unit;
          // DynaKV's clustering runs on the CPU.
          const double attended = static_cast<double>(st.attended) / session.tables();
          const double compute_s =
              device_.compute_seconds(unit_, cost.decode(static_cast<std::int64_t>(attended)), dtype_, "dynakv decode") /
                  model_.n_layers +
                                   st.cluster_flops / session.n_layers / (cpu_.peak_flops(models::DType::kF32) * cpu_.gemv_compute_efficiency);
          double step_s = 0;
          for (double io_l : st.layer_io_seconds) step_s += std::max(io_l, compute_s);
          lat += step_s * scale;
          io += st.io_seconds * scale;
          comp += compute_s * model_.n_layers;
          bytes += (st.read_bytes + st.forced_bytes) * scale;
          wanted += st.wanted_bytes * scale;
          c += st.commands * scale;
          m += st.mass;
          forced += st.forced_bytes * scale;
        }
        const double n = std::max<std::size_t>(1, r.steps.size());
        names.push_back(v.name);
        lengths.push_back(t);
        latency_ms.push_back(lat / n * 1e3);
        io_ms.push_back(io / n * 1e3);
        compute_ms.push_back(comp / n * 1e3);
        read_mb.push_back(bytes / n / 1e6);
        cmds.push_back(c / n);
        mass.push_back(m / n);
        variance.push_back(r.mean_variance);
        clusters.push_back(r.clusters_end);
        eff_bw.push_back(io > 0 ? wanted / io / 1e9 : 0.0);
        // Energy per token: CPU active power while computing, storage per-byte read energy and
        // active power while reading, the SoC floor for the whole step.
        const double e = (device_.unit_power_w(unit_, "dynakv energy").first * comp + storage_.active_power_w * io +
                          storage_.read_energy_nj_per_byte * 1e-9 * bytes + device_.base_power_w * lat) / n;
        energy_mj.push_back(e * 1e3);
        forced_mb.push_back(forced / n / 1e6);
        moved_mb.push_back(r.flash.moved_bytes / 1e6);
        naive_mb.push_back(r.flash.naive_moved_bytes / 1e6);
        const double acc = static_cast<double>(r.cache_hits + r.cache_misses);
        hit_rate.push_back(acc > 0 ? r.cache_hits / acc : 0.0);
        cache_peak_mb.push_back(r.cache_peak_bytes * scale / 1e6);
        // Figure 12: entries per read run; Figure 11: total KV transfer volume of the session.
        double runs_sum = 0, runs_max = 0;
        for (int e : r.run_entries) {
          runs_sum += e;
          runs_max = std::max<double>(runs_max, e);
        }
        run_mean.push_back(r.run_entries.empty() ? 0.0 : runs_sum / r.run_entries.size());
        run_max.push_back(runs_max);
        transfer_mb.push_back(bytes / 1e6);
      }
    }
    sm.add("variant", names);
    sm.add("decode_length", lengths, "tokens");
    sm.add("latency_per_token", latency_ms, "ms");
    sm.add("io_per_token", io_ms, "ms");
    sm.add("compute_per_token", compute_ms, "ms");
    sm.add("read_per_token", read_mb, "MB");
    sm.add("commands_per_token", cmds);
    sm.add("attention_mass", mass);
    sm.add("cluster_variance", variance);
    sm.add("clusters_end", clusters);
    sm.add("effective_bandwidth", eff_bw, "GB/s");
    sm.add("energy_per_token", energy_mj, "mJ");
    sm.add("forced_read_per_token", forced_mb, "MB");
    sm.add("flash_moved", moved_mb, "MB");
    sm.add("naive_layout_moved", naive_mb, "MB");
    sm.add("cache_hit_rate", hit_rate);
    sm.add("cache_peak", cache_peak_mb, "MB");
    sm.add("mean_run_entries", run_mean, "entries");
    sm.add("max_run_entries", run_max, "entries");
    sm.add("session_transfer", transfer_mb, "MB");
  }

 private:
  traces::KvSession make_session(int decode) const {
    if (!session_file_.empty()) return traces::read_kv_session(session_file_);
    traces::DriftingSpec s;
    s.n_layers = sim_layers_;
    s.n_kv_heads = model_.n_kv_heads;
    s.group = 1;  // one query per KV head: the replay selects with the group's first head
    s.head_dim = model_.head_dim;
    s.prefill = prefill_;
    s.decode = decode;
    s.seed = seed_;
    return traces::generate_drifting_session(s);
  }

  devices::DeviceProfile device_;
  YAML::Node engine_;  // the resolved engine profile (stored with results)
  models::ModelSpec model_;
  models::DType dtype_ = models::DType::kF8;
  std::vector<std::int64_t> decode_lengths_;
  int prefill_ = 512, sim_layers_ = 2;
  std::uint64_t seed_ = 1;
  std::string session_file_;
  std::vector<VariantSpec> variants_;
  devices::StorageSpec storage_;
  devices::ComputeUnitSpec cpu_;
  std::string unit_ = "cpu";
};

MOBISIM_REGISTER(Experiment, DynaKvExperiment, "dynakv",
                 "DynaKV (seed 003): KV-cluster retrieval from phone flash, against PQCache, ClusterKV, no-cluster.")

}  // namespace
}  // namespace mobisim::experiments
