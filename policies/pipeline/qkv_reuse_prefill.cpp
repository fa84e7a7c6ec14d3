#include "policies/pipeline/qkv_reuse_prefill.h"

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema QkvReusePrefill::schema() {
  ParamSchema s;
  s.text("unit", std::string("cpu"), "compute unit that prefills (a pipeline app's default: its own unit)");
  s.text("mode", std::string("qkv_projection"),
         "qkv_projection (PerCache: Q/K/V of reused positions stored) | kv_projection (K/V stored, Q recomputed)")
      .in({"qkv_projection", "kv_projection"});
  return s;
}

QkvReusePrefill::QkvReusePrefill(const Params& p)
    : unit_(p.text("unit")), recompute_q_(p.text("mode") == "kv_projection") {}

sim::Task<void> QkvReusePrefill::run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                                     std::int64_t n_cached, int priority, double& active_energy_j) {
  const devices::UnitCost pass = device.unit_cost(
      unit_, cost.prefill(models::PrefillShape{n_new + n_cached, 0, n_cached, 1}), cost.spec().weight_dtype, "prefill");
  co_await device.compute_for(unit_, pass, "prefill", priority);
  active_energy_j += device.profile().marginal_energy_j(unit_, pass.seconds, "prefill");
  if (!recompute_q_ || n_cached <= 0) co_return;
  const devices::UnitCost q =
      device.unit_cost(unit_, cost.q_projection(n_cached), cost.spec().weight_dtype, "prefill (Q of cached positions)");
  co_await device.compute_for(unit_, q, "prefill (Q of cached positions)", priority);
  active_energy_j += device.profile().marginal_energy_j(unit_, q.seconds, "prefill");
}

MOBISIM_REGISTER(PrefillStage, QkvReusePrefill, "qkv_reuse",
                 "PerCache's QKV reuse: the reused positions skip their Q/K/V projections, attention and FFN run "
                 "for every position.")

}  // namespace mobisim::policies::pipeline
