#include "policies/kvsplit/always_recompute.h"

#include "sim/registry.h"

namespace mobisim::policies::kvsplit {

AlwaysRecompute::AlwaysRecompute(const Params&) {}
ParamSchema AlwaysRecompute::schema() { return {}; }
SplitPlan AlwaysRecompute::plan(const SplitCosts& costs, const SplitRequest& req) const {
  SplitPlan p = simulate_split(costs, req.s, req.s, req.with_q);
  p.strategy = "always_recompute";
  return p;
}

MOBISIM_REGISTER(KvSplitStrategy, AlwaysRecompute, "always_recompute",
                 "Rebuild every position's K/V on the compute stream (l = s).")

}  // namespace mobisim::policies::kvsplit
