#include "policies/kvsplit/cake.h"

#include "sim/registry.h"

namespace mobisim::policies::kvsplit {

Cake::Cake(const Params& p) {
  opt_.block_tokens = p.integer("block_tokens");
  opt_.compute_block_overhead_us = p.real("compute_block_overhead_us");
  opt_.load_block_overhead_us = p.real("load_block_overhead_us");
}
ParamSchema Cake::schema() {
  ParamSchema s;
  s.integer("block_tokens", 64, "positions per block").range(1, 1048576).with_unit("tokens");
  s.real("compute_block_overhead_us", 0.0,
         "per block and layer on the compute stream: pointer check, event record, kernel relaunch")
      .non_negative()
      .with_unit("us");
  s.real("load_block_overhead_us", 0.0, "per block and layer on the copy stream: memcpy issue and event record")
      .non_negative()
      .with_unit("us");
  return s;
}
SplitPlan Cake::plan(const SplitCosts& costs, const SplitRequest& req) const {
  SplitPlan p = simulate_cake(costs, req, opt_);
  p.strategy = "cake";
  return p;
}

MOBISIM_REGISTER(KvSplitStrategy, Cake, "cake",
                 "Cake's two-pointer schedule: compute blocks from the front, load from the back, until they meet.")

}  // namespace mobisim::policies::kvsplit
