#include "policies/kvsplit/kvpr_closed_form.h"

#include "sim/registry.h"

namespace mobisim::policies::kvsplit {

KvprClosedForm::KvprClosedForm(const Params& p) : c1_(p.real("c1")) {}
ParamSchema KvprClosedForm::schema() {
  ParamSchema s;
  s.real("c1", 1.0 / 1.013, "empirical normalising constant of the closed form (seed 002: 1/1.013)").positive();
  return s;
}
SplitPlan KvprClosedForm::plan(const SplitCosts& costs, const SplitRequest& req) const {
  const std::int64_t l = closed_form_split(costs.rates(), req.s, c1_);
  SplitPlan p = simulate_split(costs, req.s, l, req.with_q);
  p.strategy = "kvpr_closed_form";
  return p;
}

MOBISIM_REGISTER(KvSplitStrategy, KvprClosedForm, "kvpr_closed_form",
                 "Closed-form split l* = c1*s*p*v_gpu/(2*h*v_com + p*v_gpu) (recompute time = load time).")

}  // namespace mobisim::policies::kvsplit
