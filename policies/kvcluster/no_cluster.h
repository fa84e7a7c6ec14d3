#pragma once
// no_cluster: token-level top-k retrieval over every cached key (seed 003's
// naive baseline and accuracy upper bound). Every entry is its own retrieval
// unit, so the selected entries are scattered over flash.
//
// Parameters: the common ones (kv_cluster.h); tokens_per_cluster and
// kmeans_iters are ignored. top_k counts entries, top_k_percent is the share
// of cached entries retrieved.
#include "policies/kvcluster/kv_cluster.h"

namespace mobisim::policies::kvcluster {

class NoCluster : public KvClusterPolicy {
 public:
  explicit NoCluster(const Params& p);
  static ParamSchema schema();
  void prefill(ClusterTable& t, const kernel::Mat& keys) const override;
  StepOutcome decode_selected(ClusterTable& t, std::vector<int> selected, int heads, const float* k_new) const override;
};

}  // namespace mobisim::policies::kvcluster
