#pragma once
// The Q-aware closed form l* = c2 * s*(p*v_gpu - h*v_com) / (2*h*v_com + p*v_gpu), c2 = 1/1.026.
#include "policies/kvsplit/kv_split.h"
#include "sim/params.h"

namespace mobisim::policies::kvsplit {

class KvprClosedFormQ : public KvSplitStrategy {
 public:
  explicit KvprClosedFormQ(const Params& p);
  static ParamSchema schema();
  SplitPlan plan(const SplitCosts& costs, const SplitRequest& req) const override;
 private:
  double c2_;
};

}  // namespace mobisim::policies::kvsplit
