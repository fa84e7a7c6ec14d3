#include "policies/kvcluster/clusterkv.h"

#include <utility>

#include <algorithm>

#include "models/kernel/kmeans.h"
#include "sim/registry.h"

namespace mobisim::policies::kvcluster {

ClusterKv::ClusterKv(const Params& p)
    : KvClusterPolicy(p),
      window_(static_cast<int>(p.integer("window"))),
      local_tokens_per_cluster_(static_cast<int>(p.integer("local_tokens_per_cluster"))) {}

ParamSchema ClusterKv::schema() {
  ParamSchema s = common_cluster_schema();
  // ClusterKV's own defaults (sjtu-zhao-lab/ClusterKV at cb66a229: clusterkv_init's window=320 and
  // window_nlist=8 in clusterkv/clusterkv_models/llama.py, the same in efficiency/bench_textgen.py):
  // every 320 decoded entries are clustered into 8 clusters, 40 entries each on average.
  s.integer("window", 320, "new entries clustered together once the local window is full").at_least(1);
  s.integer("local_tokens_per_cluster", 40, "average entries per local cluster").at_least(1);
  return s;
}

StepOutcome ClusterKv::decode_selected(ClusterTable& t, std::vector<int> selected, int heads, const float* k_new) const {
  StepOutcome out;
  const int m = t.n_alive();
  out.selected = std::move(selected);
  const int w = t.local_window();
  out.attended = t.positions_of(out.selected);
  const auto& recent = t.cluster(w).members;
  out.attended.insert(out.attended.end(), recent.begin(), recent.end());
  out.cluster_flops = cluster_scan_flops(m, t.head_dim()) * static_cast<double>(heads);
  const int pos = t.append_key(k_new);
  t.add_entry(w, pos);
  if (t.cluster(w).size() >= window_) {
    const std::vector<int> local = t.cluster(w).members;
    kernel::Mat points(static_cast<Eigen::Index>(local.size()), t.head_dim());
    for (std::size_t i = 0; i < local.size(); ++i)
      for (int d = 0; d < t.head_dim(); ++d) points(static_cast<Eigen::Index>(i), d) = t.key(local[i])[d];
    const int k = std::max(1, (static_cast<int>(local.size()) + local_tokens_per_cluster_ - 1) / local_tokens_per_cluster_);
    const auto km = kernel::kmeans(points, k, kmeans_iters_, cluster_seed(seed_, t.head(), w, t.step()));
    for (const auto& group : km.members()) {
      if (group.empty()) continue;
      std::vector<int> positions;
      for (int i : group) positions.push_back(local[i]);
      out.created.push_back(t.regroup(positions));
    }
    out.cluster_flops += 3.0 * kmeans_iters_ * static_cast<double>(local.size()) * k * t.head_dim();
  }
  t.next_step();
  return out;
}

MOBISIM_REGISTER(KvClusterPolicy, ClusterKv, "clusterkv",
                 "Local update: new entries are clustered apart in a recent window; many small clusters.")

}  // namespace mobisim::policies::kvcluster
