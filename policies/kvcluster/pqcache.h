#pragma once
// pqcache: static update (seed 003 section 2.3, after PQCache). K-means at
// prefill; each new entry is appended greedily to its nearest cluster, whose
// centroid follows (running mean). Clusters never split, so under the
// distribution shift they grow and their variance rises (Table 5).
//
// Parameters: the common ones (kv_cluster.h).
#include "policies/kvcluster/kv_cluster.h"

namespace mobisim::policies::kvcluster {

class PqCache : public KvClusterPolicy {
 public:
  explicit PqCache(const Params& p);
  static ParamSchema schema();
  StepOutcome decode_selected(ClusterTable& t, std::vector<int> selected, int heads, const float* k_new) const override;
};

}  // namespace mobisim::policies::kvcluster
