#pragma once
// Always load (pure cache): every position's K/V read on the copy stream (l = 0).
#include "policies/kvsplit/kv_split.h"
#include "sim/params.h"

namespace mobisim::policies::kvsplit {

class AlwaysLoad : public KvSplitStrategy {
 public:
  explicit AlwaysLoad(const Params& p);
  static ParamSchema schema();
  SplitPlan plan(const SplitCosts& costs, const SplitRequest& req) const override;

};

}  // namespace mobisim::policies::kvsplit
