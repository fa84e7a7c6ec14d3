#include "policies/pipeline/vanilla_decode.h"

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema VanillaDecode::schema() {
  ParamSchema s;
  s.text("unit", std::string("cpu"), "compute unit that decodes (a pipeline app's default: its own unit)");
  return s;
}

void VanillaDecode::begin(devices::Device& device, const models::CostModel& cost) {
  device.profile().require_unit(unit_, "decode: vanilla 'unit'");
  costs_ = std::make_unique<DecodeCosts>(cost, unit_);
}

sim::Task<void> VanillaDecode::run(const DecodeJob& job, Decoded& out) {
  devices::Device& device = job.device;
  const std::int64_t n = job.prompt_tokens;
  const bool reads = job.residency.reads_per_step();
  for (std::int64_t i = 1; i < job.request.output_tokens; ++i) {
    const devices::UnitCost step = costs_->at(device, n + i - 1);
    if (reads)
      co_await with_step_reads(device, job.residency, n + i - 1,
                               device.compute_layers(unit_, step, job.cost.spec().n_layers, "decode", job.priority));
    else
      co_await device.compute_layers(unit_, step, job.cost.spec().n_layers, "decode", job.priority);
    job.active_energy_j += device.profile().marginal_energy_j(unit_, step.seconds, "decode");
    ++out.steps;
  }
}

MOBISIM_REGISTER(DecodeStage, VanillaDecode, "vanilla", "One token per step on a compute unit (the default).")

}  // namespace mobisim::policies::pipeline
