#pragma once
// A CoordGen-document policy's own request plan (policies/specdec: its prefill slots, then the
// graph switch, the calibration and every step's draft / verify / attention, with pipelined
// calibration as a background CPU stream) issued by two pipeline stages on the phone's queues:
//
//   PolicyPrefill   the plan's prefill phases (NPU slots and their CPU attention), after
//                   starting the background calibration stream beside them: the policy's own
//                   prefill, progressive graph switching and all
//   PolicyDecode    the rest of the main chain, waiting for the background stream where the
//                   policy joins it (the first drafting step needs the calibrated tree)
//
// The two share one PolicyPlan, which the driver fills for each request before the pipeline
// serves it: acceptance comes from the driver's workload (reference answers, the real kernel's
// drafts, stored prefill predictions), so the driver runs the drafter and the policy, and these
// stages only issue what the policy planned. Both run specdec::PhaseReplay, the one replay of a
// policy's phases that specdec::replay_phases (the coordgen driver's old loop) runs too; alone on
// a phone they take exactly what it takes (tested). Each phase queues at its own priority plus the
// pipeline's.
//
// Not in the stage registries: here the plan comes from the driver. In YAML the same pair is
// `prefill: {impl: coordgen}` (coordgen_prefill.h) with `decode: {impl: speculative, policy: ...}`
// (speculative_decode.h), which plan each request from the stage's own answer stream and run it
// through a PolicyPlan too.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "policies/pipeline/decode_stage.h"
#include "policies/pipeline/prefill_stage.h"
#include "policies/specdec/phase_replay.h"
#include "policies/specdec/specdec_policy.h"
#include "sim/event.h"

namespace mobisim::policies::pipeline {

// What a policy phase of `seconds` on `unit` costs above the unit's idle power, at the power the
// policy says it draws (specdec::Phase::power_w, specdec_policy.h's Energy): an NPU execution the
// runtime's calling thread polls through draws the NPU's active power plus one CPU core's
// (PolicyKnobs::npu_rpc_polling, rpc_polling_power_w), sampling and drafting keep one core busy
// (single_thread_power_w); without power_w, the unit's active power. What the coordgen driver's
// replay makes the phone draw for it (Device::busy_drawing), above the idle floor.
double phase_marginal_energy_j(const devices::DeviceProfile& phone, const std::string& unit, double seconds,
                               std::optional<double> power_w, const std::string& needed_by);

class PolicyPlan {
 public:
  // The next request's phases and what its peak holds in DRAM beyond the K/V the KV-residency
  // stage holds (graphs, the CPU's weight copy, the calibrated tree), reserved while it runs.
  void set(std::vector<specdec::Phase> phases, double extra_dram_bytes);
  void begin(const std::string& owner) { owner_ = owner + "/decoder"; }
  // The prefill's main-chain phases, the background stream started first.
  sim::Task<void> prefill(devices::Device& device, int priority);
  // The main chain after the prefill, then the end of the background stream (each verification
  // through `wrap` when one is given, see specdec::PhaseReplay::rest).
  sim::Task<void> rest(devices::Device& device, int priority, specdec::PhaseReplay::VerifyWrap wrap = {});
  // What the main chain of the last request waited at joins (the exposed calibration).
  double join_wait_s() const { return replay_.join_wait_s(); }
  std::int64_t verifications() const { return replay_.verifications(); }
  const specdec::PhaseReplay& replay() const { return replay_; }

 private:
  specdec::PhaseReplay replay_;  // the one replay of a policy's phases (replay_phases uses it too)
  double extra_bytes_ = 0;
  std::string owner_ = "decoder";
};

class PolicyPrefill : public PrefillStage {
 public:
  explicit PolicyPrefill(std::shared_ptr<PolicyPlan> plan) : plan_(std::move(plan)) {}
  sim::Task<void> begin(devices::Device& device, const models::CostModel& cost, const std::string& owner) override;
  sim::Task<void> run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                      std::int64_t n_cached, int priority, double& active_energy_j) override;
  std::string unit() const override { return "npu"; }

 private:
  std::shared_ptr<PolicyPlan> plan_;
};

class PolicyDecode : public DecodeStage {
 public:
  explicit PolicyDecode(std::shared_ptr<PolicyPlan> plan) : plan_(std::move(plan)) {}
  sim::Task<void> run(const DecodeJob& job, Decoded& out) override;
  std::string unit() const override { return "npu"; }

 private:
  std::shared_ptr<PolicyPlan> plan_;
};

}  // namespace mobisim::policies::pipeline
