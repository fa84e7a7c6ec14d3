#include "policies/kvsplit/always_load.h"

#include "sim/registry.h"

namespace mobisim::policies::kvsplit {

AlwaysLoad::AlwaysLoad(const Params&) {}
ParamSchema AlwaysLoad::schema() { return {}; }
SplitPlan AlwaysLoad::plan(const SplitCosts& costs, const SplitRequest& req) const {
  // With Q needed, Q is still computed on the compute stream while the K/V stream in.
  SplitPlan p = simulate_split(costs, req.s, 0, req.with_q);
  p.strategy = "always_load";
  return p;
}

MOBISIM_REGISTER(KvSplitStrategy, AlwaysLoad, "always_load",
                 "Read every position's K/V on the copy stream (l = 0): the pure-cache baseline.")

}  // namespace mobisim::policies::kvsplit
