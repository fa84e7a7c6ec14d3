#pragma once
// The document's closed-form split l* = c1 * s*p*v_gpu / (2*h*v_com + p*v_gpu), c1 = 1/1.013.
#include "policies/kvsplit/kv_split.h"
#include "sim/params.h"

namespace mobisim::policies::kvsplit {

class KvprClosedForm : public KvSplitStrategy {
 public:
  explicit KvprClosedForm(const Params& p);
  static ParamSchema schema();
  SplitPlan plan(const SplitCosts& costs, const SplitRequest& req) const override;
 private:
  double c1_;
};

}  // namespace mobisim::policies::kvsplit
