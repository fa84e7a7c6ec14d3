#pragma once
// cluster_aligned (kv_cluster_replacement), seed 003 section 6.2.
//   Principle 1 (prefer small clusters): score = retrievals per KB, so a large
//   cluster must be retrieved proportionally more often to stay.
//   Principle 2 (retain updated clusters): clusters appended to or split within
//   `recent_steps` are never evicted while they fit in `reserved_fraction` of the
//   budget (Table 2: an updated cluster is retrieved again within 16 steps with
//   probability 55-80%).
// Parameters:
//   reserved_fraction  real 0.25  share of the budget kept for updated clusters
//                                 (the document gives no value)
//   recent_steps       int  16    how long an update protects a cluster (Table 2's horizon)
#include "policies/kvcluster/cluster_cache.h"

namespace mobisim::policies::kvcluster {

class ClusterAligned : public ClusterReplacement {
 public:
  explicit ClusterAligned(const Params& p);
  static ParamSchema schema();
  double score(const CachedCluster& e, int now_step) const override;
  double reserved_fraction() const override { return reserved_fraction_; }
  int recent_steps() const override { return recent_steps_; }

 private:
  double reserved_fraction_;
  int recent_steps_;
};

}  // namespace mobisim::policies::kvcluster
