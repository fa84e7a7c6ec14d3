#include "policies/kvcluster/replacement_lfu.h"

#include "sim/registry.h"

namespace mobisim::policies::kvcluster {

LfuClusters::LfuClusters(const Params&) {}
ParamSchema LfuClusters::schema() { return {}; }
// Hits dominate; the access step (< 2^20 steps) breaks ties toward the least recent.
double LfuClusters::score(const CachedCluster& e, int) const { return e.hits * 1048576.0 + e.last_access_step; }

MOBISIM_REGISTER(ClusterReplacement, LfuClusters, "lfu", "Least often retrieved cluster first.")

}  // namespace mobisim::policies::kvcluster
