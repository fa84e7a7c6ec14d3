#pragma once
// KVPR's ILP (seed 002 eq. 1), solved exactly by checking every integer l in [0, s].
#include "policies/kvsplit/kv_split.h"
#include "sim/params.h"

namespace mobisim::policies::kvsplit {

class KvprIlp : public KvSplitStrategy {
 public:
  explicit KvprIlp(const Params& p);
  static ParamSchema schema();
  SplitPlan plan(const SplitCosts& costs, const SplitRequest& req) const override;
 private:
  bool q_aware_;
};

}  // namespace mobisim::policies::kvsplit
