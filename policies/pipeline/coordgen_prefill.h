#pragma once
// `coordgen`: the prompt prefilled the way the decode stage's CoordGen-document policy plans it
// (seed 004, policies/specdec): its chunked prefill on the NPU's prefill graph G_p with the
// attention on the CPU (footnote 2), progressive graph switching to the decode graph G_d where
// the policy switches (+G, CoordGen), and in-context calibration started beside it as a
// background CPU stream (pipelined calibration, joined by the decode stage where the policy joins
// it). Together with `decode: {impl: speculative, policy: {...}}` a pipeline app runs a policy end
// to end, exactly as the coordgen driver does (PolicyPlan, policy_phases.h): the request is
// planned before its prefill (accept lengths from the decode stage's drafter and answer stream),
// this stage issues the plan's prefill and background phases, the decode stage the rest.
//
// Parameters: none; the policy and its knobs (prefill_chunk, blocks, switch_strategy,
// calibration_ms_per_token, calibration_overlap, ...) are the decode stage's `policy`.
// Requirements (ConfigError otherwise): the decode stage is `speculative` (the pipeline pairs the
// two when it is built); no prefix of the prompt is reused (the policy plans the whole prompt:
// use `kv_reuse: {impl: none}`); K/V residency in DRAM (see speculative_decode.h).
#include <memory>

#include "policies/pipeline/policy_phases.h"
#include "policies/pipeline/prefill_stage.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class CoordGenPrefill : public PrefillStage {
 public:
  explicit CoordGenPrefill(const Params& p) { (void)p; }
  static ParamSchema schema() { return ParamSchema{}; }
  void pair(DecodeStage& decode) override;
  sim::Task<void> begin(devices::Device& device, const models::CostModel& cost, const std::string& owner) override;
  sim::Task<void> run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                      std::int64_t n_cached, int priority, double& active_energy_j) override;
  std::string unit() const override { return "npu"; }

 private:
  std::shared_ptr<PolicyPlan> plan_;  // the paired decode stage's (set by pair())
};

}  // namespace mobisim::policies::pipeline
