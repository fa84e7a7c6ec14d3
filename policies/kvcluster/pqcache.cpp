#include "policies/kvcluster/pqcache.h"

#include <utility>

#include "sim/registry.h"

namespace mobisim::policies::kvcluster {

PqCache::PqCache(const Params& p) : KvClusterPolicy(p) {}
ParamSchema PqCache::schema() { return common_cluster_schema(); }

StepOutcome PqCache::decode_selected(ClusterTable& t, std::vector<int> selected, int heads, const float* k_new) const {
  StepOutcome out;
  const int m = t.n_alive();
  out.selected = std::move(selected);
  out.attended = t.positions_of(out.selected);
  const int pos = t.append_key(k_new);
  const int j = t.nearest_cluster(k_new);
  if (j < 0) {
    out.created.push_back(t.make_cluster({pos}));
  } else {
    t.add_entry(j, pos);
    t.mark_updated(j);
    out.updated.push_back(j);
  }
  // q . r_j per query head, then ||k - r_j||^2
  out.cluster_flops = cluster_scan_flops(m, t.head_dim()) * (static_cast<double>(heads) + 1.5);
  t.next_step();
  return out;
}

MOBISIM_REGISTER(KvClusterPolicy, PqCache, "pqcache",
                 "Static update: each new entry joins its nearest prefill cluster; no split.")

}  // namespace mobisim::policies::kvcluster
