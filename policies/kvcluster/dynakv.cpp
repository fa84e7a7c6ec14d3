#include "policies/kvcluster/dynakv.h"

#include <utility>

#include <fmt/format.h>

#include <algorithm>

#include "sim/error.h"
#include "sim/registry.h"

namespace mobisim::policies::kvcluster {

DynaKv::DynaKv(const Params& p)
    : KvClusterPolicy(p),
      tau_scale_(p.real("tau_scale")),
      b_max_(static_cast<int>(p.integer("b_max"))),
      tau_source_(p.source_of("tau_h")) {
  if (p.has("tau_h")) {
    tau_h_ = p.real_list("tau_h");
    for (double tau : tau_h_)
      if (!(tau > 0)) p.fail("tau_h", fmt::format("every tau_h must be positive (got {})", tau));
  }
}

ParamSchema DynaKv::schema() {
  // Section 6.1, Pipeline 1: DynaKV stores its representatives on flash and loads each layer's
  // beside the Q projection.
  ParamSchema s = common_cluster_schema("flash");
  s.real_list("tau_h", std::nullopt, "split threshold per (layer, KV head) table, layer-major").optional();
  s.real("tau_scale", 1.5, "without tau_h: tau_h = tau_scale x mean prefill cluster variance of the head")
      .positive();
  s.integer("b_max", 16, "delayed-split buffer budget B_max").with_unit("entries").non_negative();
  return s;
}

void DynaKv::check_heads(int n_heads) const {
  if (!tau_h_.empty() && static_cast<int>(tau_h_.size()) != n_heads)
    throw ConfigError(fmt::format("{}: tau_h has {} values but the session has {} (layer, KV head) tables; "
                                  "give one threshold per head",
                                  tau_source_.where(YAML::Node()), tau_h_.size(), n_heads));
}

void DynaKv::prefill(ClusterTable& t, const kernel::Mat& keys) const {
  KvClusterPolicy::prefill(t, keys);
  if (!tau_h_.empty()) {
    if (t.head() < 0 || t.head() >= static_cast<int>(tau_h_.size()))
      throw ConfigError(fmt::format("{}: tau_h has no value for head {} ({} given)", tau_source_.where(YAML::Node()),
                                    t.head(), tau_h_.size()));
    t.set_threshold(tau_h_[t.head()]);
  } else {
    t.set_threshold(tau_scale_ * std::max(t.mean_variance(), 1e-12));
  }
}

int DynaKv::split_cluster(ClusterTable& t, int c, StepOutcome& out) const {
  const int n = t.cluster(c).size();
  const int child = t.split(c, kmeans_iters_, cluster_seed(seed_, t.head(), c, t.step()));
  out.cluster_flops += 2.0 * 3.0 * kmeans_iters_ * n * t.head_dim();  // 2-means: distances to two centres
  out.updated.push_back(c);
  if (child >= 0) {
    ++out.splits;
    out.created.push_back(child);
  }
  return child;
}

StepOutcome DynaKv::decode_selected(ClusterTable& t, std::vector<int> selected, int heads, const float* k_new) const {
  StepOutcome out;
  const int m = t.n_alive();
  out.selected = std::move(selected);
  out.attended = t.positions_of(out.selected);
  // q . r_j per query head, then the new key's distances and variance update.
  out.cluster_flops = cluster_scan_flops(m, t.head_dim()) * (static_cast<double>(heads) + 1.5) + 4.0 * t.head_dim();
  const auto in_dram = [&](int c) { return std::find(out.selected.begin(), out.selected.end(), c) != out.selected.end(); };

  const int pos = t.append_key(k_new);
  const int j = t.nearest_cluster(k_new);
  if (j < 0) {
    out.created.push_back(t.make_cluster({pos}));
  } else if (t.cluster(j).split_pending) {
    // Seed 003, section 4.2 (delayed split): "If the flagged cluster is not yet in memory, the split
    // is deferred. Instead, newly added KV entries belonging to the flagged cluster are stored in a
    // memory buffer until the cluster is eventually loaded." A flagged cluster takes no appends on
    // flash, whatever its variance with the new entry (Algorithm 1 commits UpdateVar's sigma_j^2 before
    // its test, so a later entry's test starts above tau_h). A flagged C_j in P_req splits just below.
    t.buffer_entry(j, pos);
  } else if (t.variance_with(j, k_new) <= t.threshold()) {
    t.add_entry(j, pos);
    t.mark_updated(j);
    out.updated.push_back(j);
  } else {
    t.buffer_entry(j, pos);  // in DRAM either way; split now if C_j is loaded, later otherwise
    if (in_dram(j)) split_cluster(t, j, out);
  }
  // Delayed splits of flagged clusters that this step retrieved anyway.
  for (int c : out.selected)
    if (t.cluster(c).split_pending) split_cluster(t, c, out);
  // Buffer budget: load the cluster with the most buffered entries and split it.
  while (t.total_buffered() > 0 && t.total_buffered() >= b_max_) {
    int worst = -1;
    for (int c = 0; c < static_cast<int>(t.clusters().size()); ++c)
      if (!t.cluster(c).buffered.empty() &&
          (worst < 0 || t.cluster(c).buffered.size() > t.cluster(worst).buffered.size()))
        worst = c;
    out.forced_loads.push_back(worst);
    split_cluster(t, worst, out);
  }
  t.next_step();
  return out;
}

MOBISIM_REGISTER(KvClusterPolicy, DynaKv, "dynakv",
                 "Variance-scored clusters with head-specific tau_h and delayed split (Buf_j, B_max).")

}  // namespace mobisim::policies::kvcluster
