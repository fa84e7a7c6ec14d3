#include "policies/pipeline/coordgen_prefill.h"

#include <fmt/format.h>

#include "policies/pipeline/speculative_decode.h"
#include "sim/error.h"
#include "sim/registry.h"

namespace mobisim::policies::pipeline {

void CoordGenPrefill::pair(DecodeStage& decode) {
  auto* speculative = dynamic_cast<SpeculativeDecode*>(&decode);
  if (!speculative)
    throw ConfigError(
        "prefill: coordgen issues the prefill of the decode stage's CoordGen-document policy; it needs "
        "decode: {impl: speculative, policy: {impl: coordgen, ...}}");
  plan_ = speculative->pair_with_prefill();
}

sim::Task<void> CoordGenPrefill::begin(devices::Device& device, const models::CostModel& cost,
                                       const std::string& owner) {
  (void)device;
  (void)cost;
  if (!plan_) throw Error("internal: prefill 'coordgen' started without its decode stage");
  plan_->begin(owner);
  co_return;
}

sim::Task<void> CoordGenPrefill::run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                                     std::int64_t n_cached, int priority, double& active_energy_j) {
  (void)cost;
  (void)n_new;
  if (n_cached > 0)
    throw ConfigError(fmt::format("prefill: coordgen plans the whole prompt, but {} of its tokens were reused; use "
                                  "kv_reuse: {{impl: none}} with it",
                                  n_cached));
  co_await plan_->prefill(device, priority);
  // The marginal energy of what the prefill issued: its phases (their NPU slots polled, as the policy
  // says) and the background calibration (one core), at the power each draws.
  const std::string who = "prefill: coordgen";
  const specdec::PhaseReplay& replay = plan_->replay();
  for (std::size_t i = 0; i < replay.phases().size(); ++i) {
    const specdec::Phase& ph = replay.phases()[i];
    if (ph.background || replay.is_prefill_phase(i))
      active_energy_j += phase_marginal_energy_j(device.profile(), ph.unit, ph.seconds, ph.power_w, who);
  }
}

MOBISIM_REGISTER(PrefillStage, CoordGenPrefill, "coordgen",
                 "A CoordGen-document policy's own prefill (NPU graph slots, CPU attention, graph switching, "
                 "pipelined calibration); pairs with decode: speculative, whose policy it runs.")

}  // namespace mobisim::policies::pipeline
