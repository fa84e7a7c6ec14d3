#include "policies/kvcluster/replacement_cluster_aligned.h"

#include <algorithm>

#include "sim/registry.h"

namespace mobisim::policies::kvcluster {

ClusterAligned::ClusterAligned(const Params& p)
    : reserved_fraction_(p.real("reserved_fraction")), recent_steps_(static_cast<int>(p.integer("recent_steps"))) {}

ParamSchema ClusterAligned::schema() {
  ParamSchema s;
  s.real("reserved_fraction", 0.25, "share of the budget kept for recently updated clusters").range(0.0, 1.0);
  s.integer("recent_steps", 16, "decode steps an append or split protects a cluster").non_negative();
  return s;
}

double ClusterAligned::score(const CachedCluster& e, int now_step) const {
  const double kb = std::max<double>(1.0, static_cast<double>(e.bytes) / 1024.0);
  // Retrievals per KB; an older last access lowers the score a little (ties toward LRU).
  return static_cast<double>(e.hits) / kb - 1e-9 * (now_step - e.last_access_step);
}

MOBISIM_REGISTER(ClusterReplacement, ClusterAligned, "cluster_aligned",
                 "Prefer small clusters (retrievals per KB); keep recently updated clusters in a reserved share.")

}  // namespace mobisim::policies::kvcluster
