// The `dynakv` experiment (seed 003): long-sequence decoding with KV clusters on
// phone flash. For every decode length and variant (a kv_cluster_policy, a flash
// placement, a DRAM cache, optionally its own model, device and precision), a
// session is replayed (policies/kvcluster/session_replay.h) and each decode step
// runs as events on one simulated Device, the variant's phone, layer after layer as
// the document's pipeline runs it (section 6.1, Figure 9, with the CPU backend of
// section 7): CPU pieces as busy time on its CPU, flash work as requests on its
// storage, joined where the pipeline waits (experiments/dynakv_step_events.h; the
// closed form it equals, experiments/dynakv_latency.h, is the tests' oracle).
// Latency, I/O times and energy are the Device's. The retrieval depends on the
// layer's own query, so only the K/V projection and the Q-K similarity can hide it:
// whatever the reads take beyond that is on the critical path of every layer, and it
// grows with the context (top-k is a share of the cache). Reads are the runs of
// contiguous pages the layout resolves (`read_commands`), timed on the simulated UFS queue of
// `device` (IOPS-bound below ~24 KB, Figure 3b).
//
// Sessions: the drifting generator (traces/kv_session.h) with the model's KV heads
// and head_dim, for `sim_layers` layers; the per-token numbers are scaled by
// n_layers / sim_layers (every layer behaves alike in the generator). Or a
// session file (format mobisim-kv-session), replayed as it is.
//
// Parameters:
//   device            node   oneplus-12   device profile (storage and CPU)
//   model             node   qwen2.5-3b   model spec (layers, KV heads, head_dim, weights)
//   precision         text   fp8          weights and KV precision: fp8 or int4 (Figure 16)
//   decode_lengths    ints   [1024]       decode lengths T (Table 6: 1K-16K)
//   prefill           int    512          prefill length L0 of generated sessions
//   sim_layers        int    2            layers generated and replayed
//   session_seed      int    1            generator seed
//   session_file      text   (optional)   replay this file instead of generating
//   capture_checkpoint text  (optional)   real vectors: capture K/V/Q from this llama2.c checkpoint
//                                         (models/kernel) generating its full sequence (Table 5)
//   capture_prefill   int    64           prefill of the captured session
//   capture_seed      int    11           sampling seed of the captured sequence
//   generator         node   {}           drifting-generator parameters overriding traces::DriftingSpec's
//                                         (a mapping, or the name of a config in configs/workloads/ such
//                                         as dynakv_drifting, or {base: NAME, key: V})
//                                         defaults (initial_centres, centre_scale, drift_per_step, key_noise,
//                                         birth_every, split_offset, p_recent, recent_centres, query_gain,
//                                         p_query_local, query_noise, query_persistence,
//                                         query_head_correlation); generated
//                                         sessions carry the model's query heads per KV head (its GQA group)
//                                         when gqa_selection is union, one otherwise
//   gqa_selection     text   union        how a GQA group retrieves (policies/kvcluster/session_replay.h):
//                                         union (every query head selects its top clusters, the KV head
//                                         reads their union) or first_head (the group's first head selects)
//   read_commands     text   page_runs    how scattered reads become commands (policies/kvcluster/flash_layout.h):
//                                         page_runs (the model: neighbouring page reads merge into
//                                         one command, as buffered reads through the page cache and the
//                                         block layer's plug merging give) or contiguous (one command per
//                                         byte-contiguous range of entries, unmerged: a runtime issuing a
//                                         direct read per range). The document supports both: its
//                                         strict-order access length "below 7.9 entries" (Figure 12) counts
//                                         contiguous entries (a position-blind 10% top-k of 256 B entries
//                                         already averages ~10 per run of 4 KB pages), while its effective
//                                         bandwidth gains (2.10x over no-cluster, Figure 10c) are far below
//                                         the ~20x unmerged reads give. Figure 12's statistic is therefore
//                                         mean_contiguous_entries; `contiguous` is a sensitivity run
//   accuracy_every    int    1            exact attention (attention_mass) on every N-th decode step;
//                                         0: never (the column is NaN). It is O(context) per table and
//                                         query head per step, the largest cost of long sessions, and
//                                         latency-only runs (Table 6) need none of it
//   session_stats     bool   false        tables/session_stats: the calibration statistics of every
//                                         session replayed (policies/kvcluster/session_stats.h)
//   footprint_lengths ints   []           Table 1: sequence lengths of the KV footprint table
//   footprint_models  list   []           Table 1: models of the footprint table
//   footprint_kv_precision text fp16       Table 1: K/V element type (its GB match 2 bytes per element)
//   variants          node   (required unless footprint only)  list of {name, policy: {impl: ...},
//                                         placement: sequence|intra|inter, cache_ratio: real,
//                                         replacement: {impl: ...}, model, device, precision}
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/dynakv_dram.h"
#include "experiments/dynakv_latency.h"
#include "experiments/dynakv_step_events.h"
#include "experiments/experiment.h"
#include "experiments/parallel.h"
#include "experiments/simulation.h"
#include "experiments/workload_inputs.h"
#include "models/cost_model.h"
#include "models/kernel/checkpoint.h"
#include "models/kernel/oracles.h"
#include "models/model_spec.h"
#include "policies/kvcluster/cluster_cache.h"
#include "policies/kvcluster/session_replay.h"
#include "policies/kvcluster/session_stats.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "traces/kv_session.h"
#include "traces/kv_stream.h"

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
  std::string replacement_impl;  // its registry name (summary column `replacement`)
  std::string policy_impl;
  double top_k_percent = 0;
  models::ModelSpec model;
  models::DType dtype = models::DType::kF8;
  devices::DeviceProfile device;
};

// Everything one (decode length, variant) replay produces, per token unless named otherwise.
struct Row {
  double latency_ms = 0, compute_ms = 0, io_ms = 0, exposed_io_ms = 0, prefetch_ms = 0, rep_io_ms = 0;
  double read_mb = 0, cmds = 0, mass = 0, eff_bw = 0, energy_mj = 0, power_w = 0, forced_mb = 0, transfer_mb = 0;
  double memory_model_mb = 0, memory_layer_mb = 0, cache_peak_mb = 0, hit_rate = 0;
  double moved_mb = 0, naive_mb = 0, allocated_mb = 0, kv_stored_mb = 0, run_mean = 0, run_max = 0;
  double piece_mean = 0, piece_max = 0;
  double variance = 0, attended = 0;
  double dram_peak_bytes = 0, dram_mean_bytes = 0;  // the run's DRAM ledger (experiments/dynakv_dram.h)
  std::int64_t clusters = 0;
  std::vector<double> within;
};

// Calibration statistics of the sessions replayed (tables/session_stats).
struct StatRows {
  std::vector<std::string> source;
  std::vector<std::int64_t> length, head_dim;
  std::vector<double> mass, within, novel, position_run, neighbour_lift;
};

// The result-file group of one run (a variant at one decode length): runs/<variant>_T<length>, the
// '/' of a variant's name (fig16 and fig17 name theirs model/setting/policy) written as '.'.
std::string run_group_name(std::string variant, std::int64_t length) {
  std::replace(variant.begin(), variant.end(), '/', '.');
  return fmt::format("{}_T{}", variant, length);
}

// The representatives' DRAM in one decode step, for the whole model: with them on flash (DynaKV,
// section 6.1's Pipeline 1) the running and the prefetched layer's (the step's largest layer, twice);
// held persistently (the baselines) every layer's, each model layer as the replayed layers' mean.
std::int64_t representatives_dram_bytes(const traces::KvShape& session, const models::ModelSpec& model,
                                        double elem_bytes, bool on_flash, const policies::kvcluster::StepRecord& st) {
  const double bytes_each = session.head_dim * elem_bytes;
  if (on_flash) {
    const std::int64_t resident_layers = std::min<std::int64_t>(2, model.n_layers);
    std::int64_t largest = 0;
    for (auto r : st.layer_representatives) largest = std::max(largest, r);
    return resident_layers * std::llround(static_cast<double>(largest) * bytes_each);
  }
  std::int64_t replayed_sum = 0;
  for (auto r : st.layer_representatives) replayed_sum += r;
  return std::llround(static_cast<double>(replayed_sum) * bytes_each * model.n_layers / session.n_layers);
}

// What one decode step holds in DRAM beside the weights (experiments/dynakv_dram.h), for the whole
// model: the replayed layers' bytes per layer, times the layers that hold them.
DynaKvDramUse dram_use_of_step(const traces::KvShape& session, const models::ModelSpec& model, double elem_bytes,
                               std::int64_t entry_bytes, bool representatives_on_flash,
                               const policies::kvcluster::StepRecord& st) {
  const std::int64_t layers = model.n_layers, replayed = session.n_layers;
  // Section 6.1's layer-wise virtualization: the running layer's and the prefetched one's.
  const std::int64_t resident_layers = std::min<std::int64_t>(2, layers);
  DynaKvDramUse u;
  u.cache = st.cache_bytes * resident_layers / replayed;
  u.representatives = representatives_dram_bytes(session, model, elem_bytes, representatives_on_flash, st);
  u.retrieved = (st.read_bytes + st.forced_bytes + st.hit_bytes) / replayed;
  u.dram_only = st.dram_only_entries * entry_bytes * layers / replayed;  // every layer keeps its own
  return u;
}

class DynaKvExperiment : public Experiment {
 public:
  explicit DynaKvExperiment(const Params& p) {
    devices::require_thermal_none(p, "dynakv");
    const devices::EngineProfile engine = devices::experiment_engine(p);
    device_ = engine.apply(devices::load_device_profile(p.node("device"), p.source_of("device")));
    devices::record_inherited(device_, p.source_of("device"));
    engine_ = engine.resolved;
    model_ = models::load_model_spec(p.node("model"), p.source_of("model"));
    dtype_ = models::parse_dtype(p.text("precision"));
    decode_lengths_ = p.int_list("decode_lengths");
    for (auto t : decode_lengths_)
      if (t <= 0) p.fail("decode_lengths", fmt::format("decode lengths must be positive (got {})", t));
    prefill_ = static_cast<int>(p.integer("prefill"));
    sim_layers_ = static_cast<int>(p.integer("sim_layers"));
    seed_ = static_cast<std::uint64_t>(p.integer("session_seed"));
    if (p.has("session_file")) session_file_ = p.text("session_file");
    if (p.has("capture_checkpoint")) {
      const auto m = kernel::load_model(expand_shared(p.text("capture_checkpoint")));
      const auto prefill = static_cast<int>(p.integer("capture_prefill"));
      if (prefill >= m.config.seq_len)
        p.fail("capture_prefill", fmt::format("must be below the checkpoint's seq_len {}", m.config.seq_len));
      const auto tokens = kernel::sample_sequence(m, m.config.seq_len, static_cast<std::uint64_t>(p.integer("capture_seed")));
      traces::KvSession session = traces::capture_kv_session(m, tokens, prefill);
      // The checkpoint as the config names it: the results do not depend on where the data lives.
      session.source = fmt::format("capture({})", p.text("capture_checkpoint"));
      captured_ = std::make_shared<const traces::KvSession>(std::move(session));
    }
    session_stats_ = p.boolean("session_stats");
    accuracy_every_ = static_cast<int>(p.integer("accuracy_every"));
    read_merge_ = policies::kvcluster::read_merge_from_string(p.text("read_commands"));
    gqa_ = policies::kvcluster::gqa_selection_from_string(p.text("gqa_selection"));
    if (p.has("generator")) {
      const ResolvedWorkload g = resolve_workload_config(p.node("generator"), p.source_of("generator"));
      read_generator(g.config, g.source);
    }
    footprint_lengths_ = p.int_list("footprint_lengths");
    for (auto l : footprint_lengths_)
      if (l <= 0) p.fail("footprint_lengths", fmt::format("lengths must be positive (got {})", l));
    footprint_kv_dtype_ = models::parse_dtype(p.text("footprint_kv_precision"));
    for (const auto& m : p.text_list("footprint_models")) footprint_models_.push_back(models::load_model_spec(m));
    const YAML::Node list = p.node("variants");
    const ConfigSource where = p.source_of("variants");
    const bool footprint_only = !footprint_models_.empty() && !footprint_lengths_.empty();
    if (!footprint_only && (!list.IsDefined() || !list.IsSequence() || list.size() == 0))
      p.fail("variants", "expected a non-empty list of variants");
    for (std::size_t i = 0; list.IsDefined() && list.IsSequence() && i < list.size(); ++i) {
      const YAML::Node v = list[i];
      const ConfigSource vs = where.element(i);
      ParamSchema schema;
      schema.text("name", std::nullopt, "variant name");
      schema.node("policy", "kv_cluster_policy");
      schema.text("placement", std::string("inter"), "flash placement").in({"sequence", "intra", "inter"});
      schema.real("cache_ratio", 0.0, "DRAM cache budget as a share of the KV cache").range(0.0, 1.0);
      schema.node("replacement", "kv_cluster_replacement (default cluster_aligned)");
      schema.node("model", "model spec of this variant (default: the experiment's)");
      schema.node("device", "device profile of this variant (default: the experiment's)");
      schema.text("precision", std::nullopt, "fp8 or int4 (default: the experiment's)").in({"fp8", "int4"}).optional();
      Params vp(v, schema, vs, {});
      VariantSpec spec;
      spec.name = vp.text("name");
      const YAML::Node pol = vp.node("policy");
      spec.policy = Registry<KvClusterPolicy>::instance().create(pol, vs.child("policy"));
      spec.policy_impl = pol.IsMap() && pol["impl"].IsDefined() ? pol["impl"].as<std::string>() : spec.name;
      spec.top_k_percent = spec.policy->top_k().percent;
      spec.placement = policies::kvcluster::placement_from_string(vp.text("placement"));
      spec.cache_ratio = vp.real("cache_ratio");
      spec.replacement = policies::kvcluster::make_replacement(vp.node("replacement"), vs.child("replacement"));
      const YAML::Node rep = vp.node("replacement");
      spec.replacement_impl = rep.IsMap() && rep["impl"].IsDefined() ? rep["impl"].as<std::string>()
                                                                      : policies::kvcluster::kDefaultReplacement;
      spec.model = vp.has("model") ? models::load_model_spec(vp.node("model"), vs.child("model")) : model_;
      // A variant's own phone runs the experiment's engine too (Figure 17: one runtime, four phones).
      spec.device = vp.has("device") ? engine.apply(devices::load_device_profile(vp.node("device"), vs.child("device")))
                                     : device_;
      devices::record_inherited(spec.device, vs.child("device"));
      spec.dtype = vp.has("precision") ? models::parse_dtype(vp.text("precision")) : dtype_;
      // The variant's precision is its weights' and KV's (seed 003: "all experiments are conducted in
      // FP8 precision"): decode streams the weights at that width, not at the model profile's fp16.
      spec.model.weight_dtype = spec.dtype;
      spec.model.kv_dtype = spec.dtype;
      spec.device.require_storage("dynakv experiment");
      spec.device.require_engine_values("cpu", spec.model, "dynakv experiment");
      // Weights that do not fit the phone's usable DRAM stop the run before anything is replayed.
      devices::Dram::check_fits(spec.device.dram, spec.device.name, {{"weights", spec.model.weight_bytes()}});
      for (const auto& other : variants_)
        if (run_group_name(other.name, 0) == run_group_name(spec.name, 0))
          p.fail("variants", fmt::format("variant names '{}' and '{}' name the same result group (runs/{}): names "
                                         "must differ by more than '/' and '.'",
                                         other.name, spec.name, run_group_name(spec.name, 0)));
      variants_.push_back(std::move(spec));
    }
  }

  static ParamSchema schema() {
    ParamSchema s;
    s.node("thermal", devices::kThermalNoneDoc);
    s.node("device", "device profile (name or mapping)");
    devices::add_engine_param(s);
    s.node("model", "model spec (name or mapping)");
    s.text("precision", std::string("fp8"), "weights and KV precision").in({"fp8", "int4"});
    s.int_list("decode_lengths", std::vector<std::int64_t>{1024}, "decode lengths T");
    s.integer("prefill", 512, "prefill length L0 of generated sessions").at_least(1);
    s.integer("sim_layers", 2, "layers generated and replayed").at_least(1);
    s.integer("session_seed", 1, "seed of the drifting generator").non_negative();
    s.text("session_file", std::nullopt, "a mobisim-kv-session file to replay instead").optional().input_path();
    s.text("capture_checkpoint", std::nullopt, "llama2.c checkpoint to capture real K/V/Q from").optional().input_path();
    s.integer("capture_prefill", 64, "prefill of the captured session").at_least(1);
    s.integer("capture_seed", 11, "sampling seed of the captured sequence").non_negative();
    s.node("generator", "drifting-generator parameters (traces::DriftingSpec)");
    s.text("read_commands", std::string("page_runs"), "reads as commands: page_runs or contiguous")
        .in({"page_runs", "contiguous"});
    s.integer("accuracy_every", 1, "exact attention mass on every N-th decode step; 0: never").non_negative();
    s.text("gqa_selection", "union", "how a GQA group retrieves: union of every query head's top clusters, or first_head")
        .in({"union", "first_head"});
    s.boolean("session_stats", false, "write the calibration statistics of every session");
    s.int_list("footprint_lengths", std::vector<std::int64_t>{}, "Table 1: sequence lengths of the KV footprint");
    s.text_list("footprint_models", std::vector<std::string>{}, "Table 1: models of the KV footprint");
    s.text("footprint_kv_precision", std::string("fp16"), "Table 1: K/V element type").in({"fp16", "fp8", "int4"});
    s.node("variants", "list of {name, policy, placement, cache_ratio, replacement, model, device, precision}");
    return s;
  }

  YAML::Node resolved_config(const YAML::Node& given) const override {
    YAML::Node out = yaml_clone(given);
    return devices::with_engine(out, engine_);
  }

  // One piece of replay work: variants `members` sharing a session shape (KV heads, head_dim, query
  // heads per KV head), replayed together step by step (sharing each step's exact attention) at the
  // decode lengths `lengths` (ascending). A generated session is drawn as it is replayed
  // (traces::DriftingStream); when no variant's options depend on the length (no DRAM cache) one
  // replay to the longest length gives every shorter one on the way (replay_stream), otherwise a
  // unit has one length.
  struct Unit {
    std::vector<std::int64_t> lengths;
    std::vector<std::size_t> members;  // variant indices
  };
  // A unit's variants split over `groups` workers (variant k of the unit goes to group k % groups).
  struct Work {
    std::size_t unit = 0, group = 0, groups = 1;
    std::vector<std::vector<Row>> rows;  // [length of the unit][variant of this group]
    StatRows stats;                      // session_stats of the unit's sessions (group 0 only)
  };

  // Whether a unit's variants may share one replay over all decode lengths (see Unit).
  bool lengths_share_replay(const std::vector<std::size_t>& members) const {
    if (captured_ || !session_file_.empty() || session_stats_) return false;
    for (auto i : members)
      if (variants_[i].cache_ratio > 0) return false;
    const int window = ReplayOptions{}.coretrieval_steps;  // the co-retrieval window must be reached
    return std::all_of(decode_lengths_.begin(), decode_lengths_.end(), [&](std::int64_t t) { return t >= window; });
  }

  std::vector<Unit> plan_units() const {
    using SessionKey = std::tuple<int, int, int>;  // (KV heads, head_dim, query heads per KV head)
    auto key_of = [&](std::size_t i) {
      const auto& m = variants_[i].model;
      return SessionKey{m.n_kv_heads, m.head_dim, m.n_heads / m.n_kv_heads};
    };
    std::map<SessionKey, std::vector<std::size_t>> members_of;
    std::vector<SessionKey> order;  // sessions in order of first use
    for (std::size_t i = 0; i < variants_.size(); ++i) {
      auto [it, fresh] = members_of.try_emplace(key_of(i));
      if (fresh) order.push_back(it->first);
      it->second.push_back(i);
    }
    std::vector<std::int64_t> distinct;  // the lengths in the config's order, each once
    for (auto t : decode_lengths_)
      if (std::find(distinct.begin(), distinct.end(), t) == distinct.end()) distinct.push_back(t);
    std::vector<std::int64_t> sorted = distinct;
    std::sort(sorted.begin(), sorted.end());
    std::vector<Unit> units;
    for (const auto& key : order)
      if (lengths_share_replay(members_of.at(key))) units.push_back({sorted, members_of.at(key)});
    for (auto t : distinct)
      for (const auto& key : order)
        if (!lengths_share_replay(members_of.at(key))) units.push_back({{t}, members_of.at(key)});
    return units;
  }

  // The device statistics of every run (variant index, decode length), made before the replays
  // run in parallel: each replay then writes only its own group.
  using DeviceStats = std::map<std::pair<std::size_t, std::int64_t>, sim::StatGroup*>;

  // Replays one group of a unit's variants at every length of the unit, summarised as rows.
  void run_work(const std::vector<Unit>& units, const DeviceStats& device_stats, Work& w) const {
    const Unit& u = units[w.unit];
    std::vector<std::size_t> mine;
    for (std::size_t k = w.group; k < u.members.size(); k += w.groups) mine.push_back(u.members[k]);
    const models::ModelSpec& model = variants_[u.members.front()].model;
    // `decode_lengths`: the unit's lengths the replay's `lengths` stand for (the runs' keys).
    auto replay = [&](traces::KvStream& stream, const std::vector<int>& lengths,
                      const std::vector<std::int64_t>& decode_lengths) {
      std::vector<policies::kvcluster::ReplayJob> jobs;
      for (auto i : mine) jobs.push_back({variants_[i].policy.get(), replay_options(stream.shape(), variants_[i])});
      const auto results = policies::kvcluster::replay_stream(stream, jobs, lengths);
      for (std::size_t k = 0; k < results.size(); ++k) {
        std::vector<Row> rows;
        for (std::size_t j = 0; j < mine.size(); ++j)
          rows.push_back(summarize_variant(stream.shape(), variants_[mine[j]], results[k][j],
                                           *device_stats.at({mine[j], decode_lengths[k]})));
        w.rows.push_back(std::move(rows));
      }
    };
    if (captured_ || !session_file_.empty() || session_stats_) {
      for (auto t : u.lengths) {
        // The captured session is shared (read only) by every unit and thread, never copied.
        std::optional<traces::KvSession> own;
        if (!captured_) own = make_session(model, static_cast<int>(t));
        const traces::KvSession& session = captured_ ? *captured_ : *own;
        if (session_stats_ && w.group == 0) add_session_stats(w.stats, session, t);
        traces::SessionStream stream(session, "replay");
        replay(stream, {session.decode}, {t});
      }
      return;
    }
    traces::DriftingStream stream(drifting_spec(model, static_cast<int>(u.lengths.back())), accuracy_every_ > 0);
    std::vector<int> lengths;
    for (auto t : u.lengths) lengths.push_back(static_cast<int>(t));
    replay(stream, lengths, u.lengths);
  }

  void run(RunContext& ctx) override {
    std::vector<std::string> names, impls, model_names, device_names, precisions, placements, replacements;
    std::vector<std::int64_t> lengths;
    std::vector<double> cache_ratios, top_ks;
    std::vector<Row> rows;
    StatRows stats;
    const std::vector<Unit> units = plan_units();
    // Work items: every unit, its variants split into groups when there are fewer units than
    // threads. A replay's rows do not depend on its group (replays of one stream are independent,
    // bit for bit), so the results do not depend on the thread count.
    const std::size_t threads = static_cast<std::size_t>(std::max(ctx.threads, 1));
    std::vector<Work> work;
    for (std::size_t u = 0; u < units.size(); ++u) {
      const std::size_t per_unit = (threads + units.size() - 1) / units.size();
      const std::size_t groups = std::max<std::size_t>(1, std::min(per_unit, units[u].members.size()));
      for (std::size_t g = 0; g < groups; ++g) work.push_back({u, g, groups, {}, {}});
    }
    for (const auto& u : units) {
      std::vector<std::string> names_of;
      for (auto i : u.members) names_of.push_back(variants_[i].name);
      ctx.progress(fmt::format("T={} {}", fmt::join(u.lengths, ","), fmt::join(names_of, ", ")));
    }
    // Longest first (a replay's cost grows with its heads and the square of its length), so that
    // the last item to start is a short one; each item still writes only its own slot.
    std::vector<std::size_t> order(work.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    auto cost = [&](const Work& w) {
      const Unit& u = units[w.unit];
      const auto& m = variants_[u.members.front()].model;
      const double t = static_cast<double>(prefill_ + u.lengths.back());
      const double variants = static_cast<double>((u.members.size() - w.group + w.groups - 1) / w.groups);
      return variants * m.n_heads * m.head_dim * t * t;
    };
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return cost(work[a]) > cost(work[b]); });
    DeviceStats device_stats;
    for (const auto& u : units)
      for (auto t : u.lengths)
        for (auto i : u.members)
          device_stats[{i, t}] = &ctx.results.variant(run_group_name(variants_[i].name, t)).stats.child("device");
    parallel_for(work.size(), ctx.threads, [&](std::size_t k) { run_work(units, device_stats, work[order[k]]); });
    for (const auto& w : work) {
      const auto& st = w.stats;
      stats.source.insert(stats.source.end(), st.source.begin(), st.source.end());
      stats.length.insert(stats.length.end(), st.length.begin(), st.length.end());
      stats.head_dim.insert(stats.head_dim.end(), st.head_dim.begin(), st.head_dim.end());
      stats.mass.insert(stats.mass.end(), st.mass.begin(), st.mass.end());
      stats.within.insert(stats.within.end(), st.within.begin(), st.within.end());
      stats.novel.insert(stats.novel.end(), st.novel.begin(), st.novel.end());
      stats.position_run.insert(stats.position_run.end(), st.position_run.begin(), st.position_run.end());
      stats.neighbour_lift.insert(stats.neighbour_lift.end(), st.neighbour_lift.begin(), st.neighbour_lift.end());
    }
    // Rows in (decode length as configured, variant) order.
    std::map<std::int64_t, std::vector<const Row*>> row_of;  // length -> row of each variant
    for (const auto& w : work) {
      const Unit& u = units[w.unit];
      for (std::size_t l = 0; l < u.lengths.size(); ++l) {
        auto& slots = row_of[u.lengths[l]];
        slots.resize(variants_.size(), nullptr);
        for (std::size_t k = w.group, j = 0; k < u.members.size(); k += w.groups, ++j) slots[u.members[k]] = &w.rows[l][j];
      }
    }
    for (const auto t : decode_lengths_) {
      for (std::size_t i = 0; i < variants_.size(); ++i) {
        const auto& v = variants_[i];
        rows.push_back(*row_of.at(t)[i]);
        names.push_back(v.name);
        impls.push_back(v.policy_impl);
        replacements.push_back(v.cache_ratio > 0 ? v.replacement_impl : "none");
        model_names.push_back(v.model.name);
        device_names.push_back(v.device.name);
        precisions.push_back(models::to_string(v.dtype));
        placements.push_back(policies::kvcluster::to_string(v.placement));
        lengths.push_back(t);
        cache_ratios.push_back(v.cache_ratio);
        top_ks.push_back(v.top_k_percent);
      }
    }
    h5::Table& sm = ctx.results.summary;
    auto col = [&](const char* name, auto field, const char* unit) {
      std::vector<double> x;
      for (const auto& r : rows) x.push_back(r.*field);
      sm.add(name, x, unit);
    };
    if (!rows.empty()) {
      sm.add("variant", names);
      sm.add("policy", impls);
      sm.add("model", model_names);
      sm.add("device", device_names);
      sm.add("precision", precisions);
      sm.add("placement", placements);
      sm.add("decode_length", lengths, "tokens");
      sm.add("cache_ratio", cache_ratios);
      sm.add("replacement", replacements);
      sm.add("top_k_percent", top_ks, "%");
      col("latency_per_token", &Row::latency_ms, "ms");
      col("compute_per_token", &Row::compute_ms, "ms");
      col("io_per_token", &Row::io_ms, "ms");
      col("exposed_io_per_token", &Row::exposed_io_ms, "ms");
      col("prefetch_io_per_token", &Row::prefetch_ms, "ms");
      col("representatives_io_per_token", &Row::rep_io_ms, "ms");
      col("read_per_token", &Row::read_mb, "MB");
      col("commands_per_token", &Row::cmds, "");
      col("attention_mass", &Row::mass, "");
      col("attended_entries", &Row::attended, "entries");
      col("cluster_variance", &Row::variance, "");
      std::vector<std::int64_t> clusters;
      for (const auto& r : rows) clusters.push_back(r.clusters);
      sm.add("clusters_end", clusters);
      col("effective_bandwidth", &Row::eff_bw, "GB/s");
      col("energy_per_token", &Row::energy_mj, "mJ");
      col("power", &Row::power_w, "W");
      col("forced_read_per_token", &Row::forced_mb, "MB");
      col("flash_moved", &Row::moved_mb, "MB");
      col("naive_layout_moved", &Row::naive_mb, "MB");
      col("flash_allocated", &Row::allocated_mb, "MB");
      col("kv_stored", &Row::kv_stored_mb, "MB");
      col("cache_hit_rate", &Row::hit_rate, "");
      col("cache_peak", &Row::cache_peak_mb, "MB");
      col("memory_model_level", &Row::memory_model_mb, "MB");
      col("memory_layer_level", &Row::memory_layer_mb, "MB");
      col("mean_run_entries", &Row::run_mean, "entries");
      col("max_run_entries", &Row::run_max, "entries");
      col("mean_contiguous_entries", &Row::piece_mean, "entries");
      col("max_contiguous_entries", &Row::piece_max, "entries");
      col("session_transfer", &Row::transfer_mb, "MB");
      constexpr int kHorizons[] = {1, 2, 4, 8, 16};
      for (int h = 0; h < 5; ++h) {
        std::vector<double> x;
        for (const auto& r : rows) x.push_back(r.within.size() > static_cast<std::size_t>(h) ? r.within[h] : 0.0);
        sm.add(fmt::format("updated_retrieved_within_{}", kHorizons[h]), x);
      }
    }
    if (!rows.empty()) write_dram(ctx, rows, names, lengths, device_names);
    if (!footprint_models_.empty() && !footprint_lengths_.empty()) write_footprint(ctx);
    if (session_stats_) {
      h5::Table& st = ctx.results.tables["session_stats"];
      st.add("source", stats.source);
      st.add("decode_length", stats.length, "tokens");
      st.add("head_dim", stats.head_dim);
      st.add("top10_attention_mass", stats.mass);
      st.add("within_over_total_variance", stats.within);
      st.add("novel_key_share", stats.novel);
      st.add("top10_position_run", stats.position_run, "entries");
      st.add("neighbour_same_cluster_lift", stats.neighbour_lift);
    }
  }

 private:
  void read_generator(const YAML::Node& node, const ConfigSource& where) {
    ParamSchema g;
    const traces::DriftingSpec d;
    g.integer("initial_centres", d.initial_centres, "centres at prefill").at_least(1);
    g.real("centre_scale", d.centre_scale, "std of centre coordinates").non_negative();
    g.real("drift_per_step", d.drift_per_step, "std of centre velocity coordinates").non_negative();
    g.real("key_noise", d.key_noise, "std of a key around its centre").non_negative();
    g.integer("birth_every", d.birth_every, "decode steps between centre births").at_least(1);
    g.real("split_offset", d.split_offset, "distance of a newborn centre from its parent").non_negative();
    g.real("p_recent", d.p_recent, "probability a decode key joins a recent centre").range(0.0, 1.0);
    g.integer("recent_centres", d.recent_centres, "how many newest centres count as recent").at_least(1);
    g.real("query_gain", d.query_gain, "query = gain x centre + noise").non_negative();
    g.real("p_query_local", d.p_query_local, "probability a query targets the current token's centre").range(0.0, 1.0);
    g.real("query_noise", d.query_noise, "std of query noise").non_negative();
    g.real("query_persistence", d.query_persistence,
           "probability a query head keeps its previous step's centre").range(0.0, 1.0);
    g.real("query_head_correlation", d.query_head_correlation,
           "probability a GQA group's further query head targets its first head's centre").range(0.0, 1.0);
    const Params gp(node, g, where, {});
    generator_.initial_centres = static_cast<int>(gp.integer("initial_centres"));
    generator_.centre_scale = gp.real("centre_scale");
    generator_.drift_per_step = gp.real("drift_per_step");
    generator_.key_noise = gp.real("key_noise");
    generator_.birth_every = static_cast<int>(gp.integer("birth_every"));
    generator_.split_offset = gp.real("split_offset");
    generator_.p_recent = gp.real("p_recent");
    generator_.recent_centres = static_cast<int>(gp.integer("recent_centres"));
    generator_.query_gain = gp.real("query_gain");
    generator_.p_query_local = gp.real("p_query_local");
    generator_.query_noise = gp.real("query_noise");
    generator_.query_persistence = gp.real("query_persistence");
    generator_.query_head_correlation = gp.real("query_head_correlation");
  }

  void add_session_stats(StatRows& rows, const traces::KvSession& s, std::int64_t t) const {
    const auto st = policies::kvcluster::session_stats(s, 16, std::max(1, s.decode / 64), seed_);
    rows.source.push_back(s.source);
    rows.length.push_back(t);
    rows.head_dim.push_back(s.head_dim);
    rows.mass.push_back(st.top10_attention_mass);
    rows.within.push_back(st.within_over_total_variance);
    rows.novel.push_back(st.novel_key_share);
    rows.position_run.push_back(st.top10_position_run);
    rows.neighbour_lift.push_back(st.neighbour_same_cluster_lift);
  }

  // tables/dram: every run's DRAM ledger (experiments/dynakv_dram.h), in the summary's row order. A
  // table of its own: the summary's CSV stays as it was.
  void write_dram(RunContext& ctx, const std::vector<Row>& rows, const std::vector<std::string>& names,
                  const std::vector<std::int64_t>& lengths, const std::vector<std::string>& device_names) const {
    h5::Table& t = ctx.results.tables["dram"];
    std::vector<std::string> groups;
    std::vector<double> usable, weights, peak, mean;
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const VariantSpec& v = variants_[k % variants_.size()];
      groups.push_back(fmt::format("runs/{}/stats/device/dram/used_bytes", run_group_name(names[k], lengths[k])));
      usable.push_back(v.device.dram.available_bytes());
      weights.push_back(static_cast<double>(std::llround(v.model.weight_bytes())));
      peak.push_back(rows[k].dram_peak_bytes);
      mean.push_back(rows[k].dram_mean_bytes);
    }
    t.add("variant", names);
    t.add("decode_length", lengths, "tokens");
    t.add("device", device_names);
    t.add("dram_usable_bytes", usable, "bytes");
    t.add("weights_bytes", weights, "bytes");
    t.add("dram_peak_bytes", peak, "bytes");
    t.add("dram_mean_bytes", mean, "bytes");
    t.add("ledger", groups);
  }

  // Table 1: KV cache of a whole sequence against the 8-bit weights (the document's reference).
  void write_footprint(RunContext& ctx) const {
    h5::Table& t = ctx.results.tables["table1_footprint"];
    std::vector<std::string> models;
    std::vector<std::int64_t> lens;
    std::vector<double> weights_gb, kv_gb, ratio;
    for (const auto& m : footprint_models_)
      for (auto l : footprint_lengths_) {
        const double w = static_cast<double>(m.total_params()) * models::dtype_bytes(models::DType::kF8);
        const double kv = static_cast<double>(l) * m.kv_bytes_per_token(footprint_kv_dtype_);
        models.push_back(m.name);
        lens.push_back(l);
        weights_gb.push_back(w / 1e9);
        kv_gb.push_back(kv / 1e9);
        ratio.push_back(kv / w);
      }
    t.add("model", models);
    t.add("seq_len", lens, "tokens");
    t.add("weights", weights_gb, "GB");
    t.add("kv_cache", kv_gb, "GB");
    t.add("kv_over_weights", ratio);
  }

  ReplayOptions replay_options(const traces::KvShape& session, const VariantSpec& v) const {
    const double elem_bytes = models::dtype_bytes(v.dtype);
    ReplayOptions opt;
    opt.placement = v.placement;
    opt.entry_bytes = std::max<std::int64_t>(1, std::llround(2.0 * session.head_dim * elem_bytes));
    opt.read_merge = read_merge_;
    opt.cache_ratio = v.cache_ratio;
    opt.replacement = v.cache_ratio > 0 ? v.replacement : nullptr;
    opt.accuracy_every = accuracy_every_;
    opt.gqa = gqa_;
    opt.storage = v.device.require_storage("dynakv experiment");
    return opt;
  }

  // What one decode step of the replay issues: the CPU pieces of every layer (the token attending
  // the retrieved context, per table average), and each replayed layer's flash work.
  DecodeStepWork step_work(const traces::KvShape& session, const VariantSpec& v, const models::CostModel& cost,
                           const policies::kvcluster::StepRecord& st) const {
    const devices::ComputeUnitSpec& cpu = v.device.unit("cpu", "dynakv experiment");
    const double cluster_flops_per_s = cpu.peak_flops(models::DType::kF32) * cpu.gemv_compute_efficiency;
    const double elem_bytes = models::dtype_bytes(v.dtype);
    const auto attended = static_cast<std::int64_t>(std::llround(static_cast<double>(st.attended) / session.tables()));
    DecodeStepWork w;
    w.compute = layer_compute(cost, cpu, v.dtype, attended);
    w.cluster_s = st.cluster_flops / session.n_layers / cluster_flops_per_s;
    w.model_layers = v.model.n_layers;
    w.replayed.reserve(static_cast<std::size_t>(session.n_layers));
    // Representatives held in DRAM (the baselines) are read from no flash.
    const double rep_bytes_each = v.policy->representatives_on_flash() ? session.head_dim * elem_bytes : 0.0;
    for (int l = 0; l < session.n_layers; ++l)
      w.replayed.push_back({static_cast<double>(st.layer_representatives[l]) * rep_bytes_each,
                            st.retrieval_runs(l), st.prefetch_runs(l), static_cast<double>(st.layer_write_bytes[l]),
                            static_cast<double>(st.layer_moved_bytes[l])});
    return w;
  }

  // The replay's decode steps, one after another, as events on `device` (the variant's phone), each
  // holding its DRAM from its start for as long as it runs; the flash branches' times go to `flash`.
  sim::Task<void> decode_steps(devices::Device& device, const traces::KvShape& session, const VariantSpec& v,
                               const policies::kvcluster::ReplaySummary& r, StepFlashTimes& flash) const {
    const models::CostModel cost(v.model);
    const double elem_bytes = models::dtype_bytes(v.dtype);
    const std::int64_t entry_bytes = replay_options(session, v).entry_bytes;
    DynaKvDramLedger dram(device.dram(), std::llround(v.model.weight_bytes()));
    StepRepeats repeats;  // kept from step to step: their buffers are reused
    for (const auto& st : r.steps) {
      dram.hold(dram_use_of_step(session, v.model, elem_bytes, entry_bytes, v.policy->representatives_on_flash(), st));
      const DecodeStepWork work = step_work(session, v, cost, st);
      co_await decode_step_on_device(device, work, flash, repeats);
    }
    dram.finish();
  }

  // Per-token latency, energy and layout statistics of one variant's replay. Its steps run as events
  // on one Device, the variant's phone, whose statistics (CPU, storage, the DRAM ledger) go to
  // `device_stats`; latency, compute, I/O and energy are that Device's.
  Row summarize_variant(const traces::KvShape& session, const VariantSpec& v,
                        const policies::kvcluster::ReplaySummary& r, sim::StatGroup& device_stats) const {
    const auto& model = v.model;
    const double scale = static_cast<double>(model.n_layers) / session.n_layers;
    const double elem_bytes = models::dtype_bytes(v.dtype);
    StepFlashTimes flash;
    SimulatedRun run(v.device, device_stats);
    // Millions of reads per figure: their count, bytes and busy time are kept, not every latency.
    run.device().storage().keep_request_latencies(false);
    run.start(decode_steps(run.device(), session, v, r, flash), "dynakv decode");
    run.run();
    // The CPU's busy time less the compute threads' spinning at the joins is its compute; the
    // spinning is exposed I/O (latency less compute), drawing the CPU's active power.
    const double lat = sim::to_seconds(run.sim().now()),
                 comp = run.device().busy_seconds("cpu") - sim::to_seconds(flash.spin_wait);
    const double io = sim::to_seconds(flash.retrieval), prefetch = sim::to_seconds(flash.background),
                 rep_io = sim::to_seconds(flash.representatives), energy = run.device().energy_j();
    double bytes = 0, wanted = 0, c = 0, m = 0, forced = 0, working = 0, att = 0;
    std::size_t mass_steps = 0;
    for (const auto& st : r.steps) {
      bytes += static_cast<double>(st.read_bytes + st.forced_bytes) * scale;
      wanted += static_cast<double>(st.wanted_bytes) * scale;
      working = std::max(working, static_cast<double>(st.read_bytes + st.hit_bytes) / session.n_layers);
      c += static_cast<double>(st.commands) * scale;
      if (st.mass_measured) {
        m += st.mass;
        ++mass_steps;
      }
      att += static_cast<double>(st.attended) / session.tables();
      forced += static_cast<double>(st.forced_bytes) * scale;
    }
    const double n = static_cast<double>(std::max<std::size_t>(1, r.steps.size()));
    Row row;
    const devices::Dram& dram = run.device().dram();
    row.dram_peak_bytes = dram.peak_bytes();
    row.dram_mean_bytes = dram.mean_used_bytes();
    row.latency_ms = lat / n * 1e3;
    row.compute_ms = comp / n * 1e3;
    row.io_ms = io / n * 1e3;
    row.exposed_io_ms = (lat - comp) / n * 1e3;
    row.prefetch_ms = prefetch / n * 1e3;
    row.rep_io_ms = rep_io / n * 1e3;
    row.read_mb = bytes / n / 1e6;
    row.cmds = c / n;
    // Mean over the sampled steps (every step by default: the same sum and divisor as before).
    row.mass = mass_steps > 0 ? m / static_cast<double>(mass_steps) : std::nan("");
    row.attended = att / n;  // per (layer, KV head) table: clusters are taken whole, so this exceeds top-k %
    row.variance = r.mean_variance;
    row.clusters = r.clusters_end;
    row.eff_bw = io > 0 ? wanted / io / 1e9 : 0.0;
    // Energy per token: the Device's (devices/device.h): every unit's active power while busy and idle
    // power otherwise, the storage's per-byte energies and idle power, the SoC floor for the whole run.
    row.energy_mj = energy / n * 1e3;
    row.power_w = lat > 0 ? energy / lat : 0.0;
    row.forced_mb = forced / n / 1e6;
    row.transfer_mb = bytes / 1e6;
    row.moved_mb = static_cast<double>(r.flash.moved_bytes) * scale / 1e6;
    row.naive_mb = static_cast<double>(r.flash.naive_moved_bytes) * scale / 1e6;
    row.allocated_mb = static_cast<double>(r.flash.allocated_bytes) * scale / 1e6;
    row.kv_stored_mb = static_cast<double>(r.kv_bytes_end) * scale / 1e6;
    const double acc = static_cast<double>(r.cache_hits + r.cache_misses);
    row.hit_rate = acc > 0 ? static_cast<double>(r.cache_hits) / acc : 0.0;
    // Figure 14(a): DRAM for KV. Without virtualization every layer's cache and representatives stay
    // resident; with it (section 6.1) only the running layer's and the one being prefetched, and of
    // the representatives only those a policy keeps on flash (the baselines hold every layer's).
    const double cache_per_layer = static_cast<double>(r.cache_peak_bytes) / session.n_layers;
    const double reps_per_layer = static_cast<double>(r.max_representatives) * session.head_dim * elem_bytes;
    const double virtualized_reps_layers = v.policy->representatives_on_flash() ? 2.0 : model.n_layers;
    row.cache_peak_mb = cache_per_layer * model.n_layers / 1e6;
    row.memory_model_mb = ((cache_per_layer + reps_per_layer) * model.n_layers + working) / 1e6;
    row.memory_layer_mb = (2.0 * cache_per_layer + virtualized_reps_layers * reps_per_layer + working) / 1e6;
    // Integer totals: their double is the running double sum the rows once took (exact below 2^53).
    row.run_mean = r.run_count == 0 ? 0.0 : static_cast<double>(r.run_entries_sum) / static_cast<double>(r.run_count);
    row.run_max = r.run_entries_max;
    row.piece_mean = r.piece_count > 0 ? static_cast<double>(r.piece_entries) / static_cast<double>(r.piece_count) : 0.0;
    row.piece_max = r.longest_piece;
    row.within = r.updated_retrieved_within;
    return row;
  }

  traces::KvSession make_session(const models::ModelSpec& model, int decode) const {
    if (captured_) return *captured_;
    if (!session_file_.empty()) return traces::read_kv_session(session_file_);
    return traces::generate_drifting_session(drifting_spec(model, decode));
  }

  // The generated session of a model's shape and `decode` steps.
  traces::DriftingSpec drifting_spec(const models::ModelSpec& model, int decode) const {
    traces::DriftingSpec s = generator_;
    s.n_layers = sim_layers_;
    s.n_kv_heads = model.n_kv_heads;
    // The model's GQA group when every query head selects; one query per KV head otherwise.
    s.group = gqa_ == policies::kvcluster::GqaSelection::kUnion ? model.n_heads / model.n_kv_heads : 1;
    s.head_dim = model.head_dim;
    s.prefill = prefill_;
    s.decode = decode;
    s.seed = seed_;
    return s;
  }

  devices::DeviceProfile device_;
  YAML::Node engine_;  // the resolved engine profile (stored with results)
  models::ModelSpec model_;
  models::DType dtype_ = models::DType::kF8, footprint_kv_dtype_ = models::DType::kF16;
  std::vector<std::int64_t> decode_lengths_, footprint_lengths_;
  std::vector<models::ModelSpec> footprint_models_;
  int prefill_ = 512, sim_layers_ = 2;
  std::uint64_t seed_ = 1;
  std::string session_file_;
  std::shared_ptr<const traces::KvSession> captured_;
  traces::DriftingSpec generator_;
  bool session_stats_ = false;
  int accuracy_every_ = 1;
  policies::kvcluster::ReadMerge read_merge_ = policies::kvcluster::ReadMerge::kPageRuns;
  policies::kvcluster::GqaSelection gqa_ = policies::kvcluster::GqaSelection::kUnion;

  std::vector<VariantSpec> variants_;
};

MOBISIM_REGISTER(Experiment, DynaKvExperiment, "dynakv",
                 "DynaKV (seed 003): KV-cluster retrieval from phone flash, against PQCache, ClusterKV, no-cluster.")

}  // namespace
}  // namespace mobisim::experiments
