#include "policies/kvsplit/kvpr_closed_form_q.h"

#include "sim/registry.h"

namespace mobisim::policies::kvsplit {

KvprClosedFormQ::KvprClosedFormQ(const Params& p) : c2_(p.real("c2")) {}
ParamSchema KvprClosedFormQ::schema() {
  ParamSchema s;
  s.real("c2", 1.0 / 1.026, "empirical normalising constant of the Q-aware closed form (seed 002: 1/1.026)")
      .positive();
  return s;
}
SplitPlan KvprClosedFormQ::plan(const SplitCosts& costs, const SplitRequest& req) const {
  // Negative when computing Q alone outlasts loading every K/V (p*v_gpu < h*v_com): clamped to 0.
  const std::int64_t l = closed_form_split_q(costs.rates(), req.s, c2_);
  SplitPlan p = simulate_split(costs, req.s, l, req.with_q);
  p.strategy = "kvpr_closed_form_q";
  return p;
}

MOBISIM_REGISTER(KvSplitStrategy, KvprClosedFormQ, "kvpr_closed_form_q",
                 "Q-aware closed-form split l* = c2*s*(p*v_gpu - h*v_com)/(2*h*v_com + p*v_gpu), clamped to [0, s].")

}  // namespace mobisim::policies::kvsplit
