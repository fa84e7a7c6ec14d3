#include "policies/kvcluster/no_cluster.h"

#include <utility>

#include "sim/registry.h"

namespace mobisim::policies::kvcluster {

NoCluster::NoCluster(const Params& p) : KvClusterPolicy(p) {}
ParamSchema NoCluster::schema() { return common_cluster_schema(); }

void NoCluster::prefill(ClusterTable& t, const kernel::Mat& keys) const {
  for (Eigen::Index i = 0; i < keys.rows(); ++i) t.make_cluster({t.append_key(keys.row(i).data())});
}

StepOutcome NoCluster::decode_selected(ClusterTable& t, std::vector<int> selected, int heads, const float* k_new) const {
  StepOutcome out;
  // A singleton's representative is the key itself, so ranking clusters is exact top-k.
  out.selected = std::move(selected);
  out.attended = t.positions_of(out.selected);
  out.cluster_flops = cluster_scan_flops(t.n_entries(), t.head_dim()) * static_cast<double>(heads);
  const int c = t.make_cluster({t.append_key(k_new)});
  out.created.push_back(c);
  t.next_step();
  return out;
}

MOBISIM_REGISTER(KvClusterPolicy, NoCluster, "no_cluster",
                 "Token-level top-k over every key: the accuracy upper bound, scattered flash reads.")

}  // namespace mobisim::policies::kvcluster
