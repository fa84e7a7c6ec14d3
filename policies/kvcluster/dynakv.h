#pragma once
// dynakv: migration-free cluster adaptation (seed 003 section 4.2, Algorithm 1).
//
// Per decode step and head:
//   1. P_req <- top-k clusters by q . r_j (retrieved from flash);
//   2. the new key goes to its nearest cluster j; UpdateVar gives sigma_j'^2 in O(d)
//      from (n_j, r_j, sigma_j^2, k_new) (Welford, see ClusterTable::add_entry);
//   3. C_j already flagged: k_new waits in Buf_j (section 4.2: a flagged cluster's new entries are
//      "stored in a memory buffer until the cluster is eventually loaded");
//      sigma_j'^2 <= tau_h: append (n_j, r_j, sigma_j^2 updated);
//      else, C_j in P_req (already in DRAM): split C_j together with k_new (2-means);
//      else: park k_new in Buf_j and flag C_j (delayed split: no extra I/O);
//   4. every flagged cluster of P_req splits with its buffer;
//   5. when sum_j |Buf_j| >= B_max, the cluster with the largest buffer is loaded
//      (extra I/O, StepOutcome::forced_loads) and split.
//
// Parameters: the common ones (kv_cluster.h) and
//   tau_h      real list  (optional)  tau per (layer, KV head) table, in table order
//                                     (layer-major); its length must equal the number of heads
//   tau_scale  real  1.5  without tau_h: tau_h = tau_scale x the head's mean prefill cluster
//                         variance (the document calls tau_h head-specific but gives no values)
//   b_max      int   16   buffer budget B_max in entries (Figure 11 varies it up to 16;
//                         0: never delay, load every flagged cluster at once)
#include <optional>
#include <vector>

#include "policies/kvcluster/kv_cluster.h"

namespace mobisim::policies::kvcluster {

class DynaKv : public KvClusterPolicy {
 public:
  explicit DynaKv(const Params& p);
  static ParamSchema schema();
  void check_heads(int n_heads) const override;
  void prefill(ClusterTable& t, const kernel::Mat& keys) const override;
  StepOutcome decode_selected(ClusterTable& t, std::vector<int> selected, int heads, const float* k_new) const override;
  int b_max() const { return b_max_; }

 private:
  int split_cluster(ClusterTable& t, int c, StepOutcome& out) const;
  std::vector<double> tau_h_;
  double tau_scale_;
  int b_max_;
  ConfigSource tau_source_;
};

}  // namespace mobisim::policies::kvcluster
