#pragma once
// clusterkv: local update (seed 003 section 2.3, after ClusterKV). K-means at
// prefill; new entries gather in a local window that stays in DRAM and is
// always attended; when it holds `window` entries they are clustered among
// themselves (never with the prefill clusters) into ceil(window /
// local_tokens_per_cluster) clusters and written to flash. Without global
// information this fragments the cache into many small clusters.
//
// Parameters: the common ones (kv_cluster.h) and
//   window                    int 320  entries re-clustered together
//   local_tokens_per_cluster  int 40   average size of a local cluster
// Seed 003 gives neither value; both are ClusterKV's own (sjtu-zhao-lab/ClusterKV at
// cb66a2291c660dbc4f38de26514af7c4d54e8f31, clusterkv/clusterkv_models/llama.py clusterkv_init:
// window=320, window_nlist=8 clusters per window; efficiency/bench_textgen.py the same), whose decode
// step re-clusters the window once `generated_len % window == 0`
// (clusterkv/clusterkv_models/ClusterKVAttention.py). The fragmentation the document describes
// is what these local clusters do over a long decode: none ever joins a prefill cluster.
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
