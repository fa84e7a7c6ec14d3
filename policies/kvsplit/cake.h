#pragma once
// Cake's two-pointer schedule (seed 002 Algorithm 1): compute from the front, load from the back.
#include "policies/kvsplit/kv_split.h"
#include "sim/params.h"

namespace mobisim::policies::kvsplit {

class Cake : public KvSplitStrategy {
 public:
  explicit Cake(const Params& p);
  static ParamSchema schema();
  SplitPlan plan(const SplitCosts& costs, const SplitRequest& req) const override;
  const CakeOptions* block_schedule() const override { return &opt_; }

 private:
  CakeOptions opt_;
};

}  // namespace mobisim::policies::kvsplit
