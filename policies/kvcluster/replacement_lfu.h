#pragma once
// lfu (kv_cluster_replacement): the cluster retrieved least often goes first
// (ties: least recently). No parameters.
#include "policies/kvcluster/cluster_cache.h"

namespace mobisim::policies::kvcluster {

class LfuClusters : public ClusterReplacement {
 public:
  explicit LfuClusters(const Params& p);
  static ParamSchema schema();
  double score(const CachedCluster& e, int now_step) const override;
};

}  // namespace mobisim::policies::kvcluster
