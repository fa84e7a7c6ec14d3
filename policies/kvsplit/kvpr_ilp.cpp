#include "policies/kvsplit/kvpr_ilp.h"

#include "sim/registry.h"

namespace mobisim::policies::kvsplit {

KvprIlp::KvprIlp(const Params& p) : q_aware_(p.boolean("q_aware")) {}
ParamSchema KvprIlp::schema() {
  ParamSchema s;
  s.boolean("q_aware", false,
            "false: KVPR's objective, blind to Q even when the request needs it; true: the document's "
            "modified ILP with Q(s) on the compute side");
  return s;
}
SplitPlan KvprIlp::plan(const SplitCosts& costs, const SplitRequest& req) const {
  const std::int64_t l = ilp_split(costs, req.s, q_aware_);
  SplitPlan p = simulate_split(costs, req.s, l, req.with_q);
  p.strategy = q_aware_ ? "kvpr_ilp_q" : "kvpr_ilp";
  return p;
}

MOBISIM_REGISTER(KvSplitStrategy, KvprIlp, "kvpr_ilp",
                 "KVPR's ILP min_l X(l) + max(R(l), L(s-l)), solved exactly over every integer l in [0, s].")

}  // namespace mobisim::policies::kvsplit
