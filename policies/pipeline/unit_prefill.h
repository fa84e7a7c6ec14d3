#pragma once
// `unit`: the prompt as one batched pass on a compute unit (the roofline of devices/compute_unit.h,
// or for the NPU its graph-chunk model, NpuSpec::work_seconds).
//
// Parameters:
//   unit   the compute unit (a pipeline app fills in its own `unit` when this is not given)
#include "policies/pipeline/prefill_stage.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class UnitPrefill : public PrefillStage {
 public:
  explicit UnitPrefill(const Params& p) : unit_(p.text("unit")) {}
  explicit UnitPrefill(std::string unit) : unit_(std::move(unit)) {}
  static ParamSchema schema();
  sim::Task<void> run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                      std::int64_t n_cached, int priority, double& active_energy_j) override;
  std::string unit() const override { return unit_; }

 private:
  std::string unit_;
};

}  // namespace mobisim::policies::pipeline
