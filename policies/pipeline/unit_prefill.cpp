#include "policies/pipeline/unit_prefill.h"

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema UnitPrefill::schema() {
  ParamSchema s;
  s.text("unit", std::string("cpu"), "compute unit that prefills (a pipeline app's default: its own unit)");
  return s;
}

sim::Task<void> UnitPrefill::run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                                 std::int64_t n_cached, int priority, double& active_energy_j) {
  const devices::UnitCost c = device.unit_cost(unit_, cost.prefill(models::PrefillShape{n_new, n_cached, 0, 1}),
                                               cost.spec().weight_dtype, "prefill");
  co_await device.compute_layers(unit_, c, cost.spec().n_layers, "prefill", priority);
  active_energy_j += device.profile().marginal_energy_j(unit_, c.seconds, "prefill");
}

MOBISIM_REGISTER(PrefillStage, UnitPrefill, "unit", "The prompt as one batched pass on a compute unit.")

}  // namespace mobisim::policies::pipeline
