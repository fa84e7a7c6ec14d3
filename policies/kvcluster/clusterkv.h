#pragma once
// clusterkv: local update (seed 003 section 2.3, after ClusterKV). K-means at
// prefill; new entries gather in a local window that stays in DRAM and is
// always attended; when it holds `window` entries they are clustered among
// themselves (never with the prefill clusters) into ceil(window /
// local_tokens_per_cluster) clusters and written to flash. Without global
// information this fragments the cache into many small clusters.
//
// Parameters: the common ones (kv_cluster.h) and
//   window                    int 64  entries re-clustered together (the document gives no value)
//   local_tokens_per_cluster  int 8   average size of a local cluster (small: the fragmentation
//                                     the document describes)
#include "policies/kvcluster/kv_cluster.h"

namespace mobisim::policies::kvcluster {

class ClusterKv : public KvClusterPolicy {
 public:
  explicit ClusterKv(const Params& p);
  static ParamSchema schema();
  StepOutcome decode_selected(ClusterTable& t, std::vector<int> selected, int heads, const float* k_new) const override;

 private:
  int window_;
  int local_tokens_per_cluster_;
};

}  // namespace mobisim::policies::kvcluster
