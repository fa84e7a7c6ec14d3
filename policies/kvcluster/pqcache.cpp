#include "policies/kvcluster/pqcache.h"

#include "sim/registry.h"

namespace mobisim::policies::kvcluster {

PqCache::PqCache(const Params& p) : KvClusterPolicy(p) {}
ParamSchema PqCache::schema() { return common_cluster_schema(); }

StepOutcome PqCache::decode_step(ClusterTable& t, const float* q, const float* k_new) const {
  StepOutcome out;
  const int m = t.n_alive();
  out.selected = t.select(q, top_k());
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
  out.cluster_flops = cluster_scan_flops(m, t.head_dim()) * 2.5;  // q . r_j, then ||k - r_j||^2
  t.next_step();
  return out;
}

MOBISIM_REGISTER(KvClusterPolicy, PqCache, "pqcache",
                 "Static update: each new entry joins its nearest prefill cluster; no split.")

}  // namespace mobisim::policies::kvcluster
