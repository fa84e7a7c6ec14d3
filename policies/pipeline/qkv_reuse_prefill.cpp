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

namespace {
// One pass on the unit at the app's priority, its marginal energy counted as prefill energy. `what` is a
// literal: a temporary std::string in a co_await expression is destroyed twice by g++ 12.
sim::Task<void> qkv_reuse_pass(devices::Device& device, std::string unit, devices::UnitCost c, int layers,
                               const char* what, int priority, double& active_energy_j) {
  const std::string label = what;
  co_await device.compute_layers(unit, c, layers, label, priority);
  active_energy_j += device.profile().marginal_energy_j(unit, c.seconds, "prefill");
}
}  // namespace

QkvReusePrefill::QkvReusePrefill(const Params& p)
    : unit_(p.text("unit")), recompute_q_(p.text("mode") == "kv_projection") {}

sim::Task<void> QkvReusePrefill::run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                                     std::int64_t n_cached, int priority, double& active_energy_j) {
  const devices::UnitCost pass = device.unit_cost(
      unit_, cost.prefill(models::PrefillShape{n_new + n_cached, 0, n_cached, 1}), cost.spec().weight_dtype, "prefill");
  co_await qkv_reuse_pass(device, unit_, pass, cost.spec().n_layers, "prefill", priority, active_energy_j);
  if (!recompute_q_ || n_cached <= 0) co_return;
  const char* q_what = "prefill (Q of cached positions)";
  const devices::UnitCost q = device.unit_cost(unit_, cost.q_projection(n_cached), cost.spec().weight_dtype, q_what);
  co_await qkv_reuse_pass(device, unit_, q, cost.spec().n_layers, q_what, priority, active_energy_j);
}

MOBISIM_REGISTER(PrefillStage, QkvReusePrefill, "qkv_reuse",
                 "PerCache's QKV reuse: the reused positions skip their Q/K/V projections, attention and FFN run "
                 "for every position.")

}  // namespace mobisim::policies::pipeline
