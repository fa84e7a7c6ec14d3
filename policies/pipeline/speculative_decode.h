#pragma once
// `speculative`: the answer decoded by one of the CoordGen document's policies (seed 004,
// policies/specdec): CoordGen (NPU graph switching + retrieval-based speculative decoding with
// in-context calibration and draft reuse), its baselines PLD, SAM and EAGLE-2, or plain NPU/CPU
// decoding. The policy's own cost model is used unchanged:
//   - accept lengths: the policy's drafter replays the request's answer (replay_decode), its
//     history store growing over the app's requests (SAM's historical context);
//   - costs: SpecDecPolicy::run's phases for the request; this stage replays the ones after the
//     prefill (the exposed graph switch, the exposed calibration tail, then every step's draft,
//     verify and CPU attention) as busy time on the phone's NPU and CPU at the request's priority.
//     The pipeline's own prefill stage computes the prompt (use `prefill: {impl: npu_graphs}` for
//     the NPU's graphs). With nothing else on the phone the stage takes exactly the policy's
//     closed-form time after the prefill (switch_s + calibration_s + decode_s + draft_s),
//     recorded beside it as decode_estimate_s. The hidden part of pipelined calibration is
//     charged as CPU energy, not time.
//   - energy: every phase at the power the policy gives it (specdec_policy.h, Energy), as the
//     coordgen driver's replay charges it: an NPU execution draws the NPU's active power plus, with
//     the policy's `npu_rpc_polling` (default true, as the driver), one CPU core spinning on its
//     completion (rpc_polling_power_w = the CPU's single_thread_power_w - its idle_power_w);
//     sampling (calibration) and retrieval drafting draw single_thread_power_w. The request's
//     active energy is each phase's power minus its unit's idle power, times its time; the device
//     draws the same (Device::busy_drawing), so a phone with a thermal model (one power per unit
//     and operating point) stops such a run with a ConfigError.
//   - memory: while a request decodes, what the policy's peak holds beyond the request's K/V
//     (held by the KV-residency stage) and beyond the weight copies the app already holds (its
//     own, when the policy decodes on the CPU, and the NPU graph of an npu_graphs prefill) is
//     reserved as "<app>/decoder": the decode graph under switching, the calibrated tree,
//     EAGLE's drafter. A phone that cannot hold it stops the run naming DRAM.
//   - the KV-residency stage is called before every verification.
//
// Paired with `prefill: {impl: coordgen}` (coordgen_prefill.h) the stage runs the policy end to
// end, as the coordgen driver does: the request is planned before its prefill, the prefill stage
// issues the policy's own prefill phases (its NPU slots and CPU attention, progressive graph
// switching, pipelined calibration started beside them as a background CPU stream) and this stage
// the rest of the policy's phases (specdec::PhaseReplay, through policy_phases.h's PolicyPlan),
// joining the calibration stream where the policy does. The policy's memory beyond the K/V is
// then held from the prefill on. Alone on a phone a request takes what the coordgen driver's
// pipeline takes for the same plan (tests/test_pipeline_decode.cpp). Paired or not, a KV-residency
// stage that reads per step (`dynakv` with a cluster cache below the whole K/V) issues each
// verification's reads beside it, the verification attending the prompt plus the tokens the steps
// before it produced.
//
// The answers' tokens (what the drafter can or cannot predict) are synthetic, made over the
// request's prompt tokens by traces/cag_synth.h's output process (copied spans of the context,
// model-preferred variants carried by the prefill's top-n, the user's earlier answers), seeded
// by `outputs.seed`; a workload with real answers would replace it.
//
// Parameters:
//   policy    {impl: coordgen|npu_sam|npu_pld|npu_sam_graph|sam_ours|pld_ours|cpu_sam|npu_eagle|
//             cpu_eagle|npu_vanilla|npu_graph|cpu_vanilla, ...}: a specdec_policy with its knobs
//             (required; `mobisim list` shows each one's)
//   outputs   the answer-token process: {seed, copy_start_prob, mean_span_tokens, history_fraction,
//             variant_prob, variant_in_top_n_prob, top_n, vocab, zipf_exponent} (traces/cag_synth.h;
//             default: its defaults; the keys for generated contexts are not used here)
#include <memory>
#include <string>
#include <vector>

#include "policies/pipeline/decode_stage.h"
#include "policies/pipeline/policy_phases.h"
#include "policies/specdec/specdec_policy.h"
#include "sim/params.h"
#include "sim/rng.h"
#include "traces/cag_synth.h"

namespace mobisim::policies::pipeline {

class SpeculativeDecode : public DecodeStage {
 public:
  explicit SpeculativeDecode(const Params& p);
  ~SpeculativeDecode() override;
  static ParamSchema schema();
  void begin(devices::Device& device, const models::CostModel& cost) override;
  sim::Task<void> run(const DecodeJob& job, Decoded& out) override;
  std::string unit() const override { return unit_; }

  // The policy's plan for the next request of `prompt` tokens and `output_tokens` answer tokens:
  // its acceptance trace and breakdown (advances the answer stream and the history store).
  struct Plan {
    specdec::DecodeTrace trace;
    specdec::RequestBreakdown breakdown;
  };
  Plan plan(const std::vector<std::int32_t>& prompt, std::int64_t output_tokens);

  // `prefill: coordgen` pairs here (once, before the first request): from then on each request is
  // planned by plan_request, its prefill phases issued by the prefill stage through the returned plan.
  std::shared_ptr<PolicyPlan> pair_with_prefill();
  void plan_request(const Request& r, std::int64_t prompt_tokens, const models::CostModel& cost) override;

 private:
  sim::Task<void> run_paired(const DecodeJob& job, Decoded& out);

  std::shared_ptr<PolicyPlan> paired_;  // set when `prefill: coordgen` pairs with this stage
  Plan current_;                        // paired: the request planned by plan_request
  std::unique_ptr<specdec::SpecDecPolicy> policy_;
  traces::CagSynthParams synth_;
  sim::Rng rng_;
  sim::ZipfSampler zipf_;
  std::unique_ptr<specdec::SpecDecEnv> env_;  // set by begin()
  specdec::HistoryStore history_;
  std::vector<std::vector<int>> past_outputs_;
  std::string unit_ = "npu";  // where verification runs (from the policy, in begin())
};

}  // namespace mobisim::policies::pipeline
