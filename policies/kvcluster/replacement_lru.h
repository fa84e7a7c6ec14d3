#pragma once
// lru (kv_cluster_replacement): the cluster retrieved least recently goes first. No parameters.
#include "policies/kvcluster/cluster_cache.h"

namespace mobisim::policies::kvcluster {

class LruClusters : public ClusterReplacement {
 public:
  explicit LruClusters(const Params& p);
  static ParamSchema schema();
  double score(const CachedCluster& e, int now_step) const override;
};

}  // namespace mobisim::policies::kvcluster
