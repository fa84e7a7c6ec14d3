#pragma once
// Always recompute: every position's K/V rebuilt on the compute stream (l = s).
#include "policies/kvsplit/kv_split.h"
#include "sim/params.h"

namespace mobisim::policies::kvsplit {

class AlwaysRecompute : public KvSplitStrategy {
 public:
  explicit AlwaysRecompute(const Params& p);
  static ParamSchema schema();
  SplitPlan plan(const SplitCosts& costs, const SplitRequest& req) const override;

};

}  // namespace mobisim::policies::kvsplit
