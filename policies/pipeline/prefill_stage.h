#pragma once
// The prefill stage: how the prompt's tokens that were not reused are computed, attending to the
// reused ones. One implementation = one file pair in this folder, registered with
//   MOBISIM_REGISTER(PrefillStage, MyPrefill, "my_prefill", "doc");
// and chosen in a pipeline app's YAML as `prefill: {impl: my_prefill, ...}`.
#include <cstdint>
#include <string>

#include "devices/device.h"
#include "models/cost_model.h"

namespace mobisim::policies::pipeline {

class DecodeStage;

class PrefillStage {
 public:
  static constexpr const char* kRegistryKind = "prefill";
  virtual ~PrefillStage() = default;
  // Before the first request, on the phone the pipeline runs on: set up what the stage keeps for
  // the whole run (e.g. compiled graphs loaded, their buffers held in DRAM under `owner`).
  virtual sim::Task<void> begin(devices::Device& device, const models::CostModel& cost, const std::string& owner) {
    (void)device;
    (void)cost;
    (void)owner;
    co_return;
  }
  // Computes `n_new` tokens after `n_cached` whose K/V is present, at queue `priority`; adds the
  // stage's own marginal energy to `active_energy_j`. A model pass issued with
  // Device::compute_layers(unit, cost, model.n_layers, ...) gives its unit up at its next layer
  // boundary when better-priority work waits (a background app's prefill, docs/compose.md).
  virtual sim::Task<void> run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                              std::int64_t n_cached, int priority, double& active_energy_j) = 0;
  // The unit the stage computes on (what decode hands over from, for the records).
  virtual std::string unit() const = 0;
  // Once, when the pipeline is built, with its decode stage: a prefill that issues the decode
  // stage's own plan for the request (`coordgen`: a CoordGen-document policy's prefill) pairs with
  // it here, and throws ConfigError when that stage cannot be its partner. Others ignore it.
  virtual void pair(DecodeStage& decode) { (void)decode; }
};

}  // namespace mobisim::policies::pipeline
