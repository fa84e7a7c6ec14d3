#include "policies/kvcluster/replacement_lru.h"

#include "sim/registry.h"

namespace mobisim::policies::kvcluster {

LruClusters::LruClusters(const Params&) {}
ParamSchema LruClusters::schema() { return {}; }
double LruClusters::score(const CachedCluster& e, int) const { return e.last_access_step; }

MOBISIM_REGISTER(ClusterReplacement, LruClusters, "lru", "Least recently retrieved cluster first.")

}  // namespace mobisim::policies::kvcluster
