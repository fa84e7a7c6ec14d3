#pragma once
// CoordGen section 4.1 policies (registry kind "specdec_policy"): how one context-augmented
// request (prompt of P tokens, output of N tokens) runs on an NPU phone.
//
//   npu_vanilla   NPU prefill and decode on one graph (G_p's chunk); attention on the CPU (fn. 2)
//   cpu_vanilla   NPU prefill, CPU decode (separate CPU weights: twice the memory)
//   npu_graph     +G: G_d for decoding, switched by progressive graph scheduling
//   npu_sam / cpu_sam / npu_pld / npu_sam_graph / coordgen: retrieval-based SD
//   npu_eagle / cpu_eagle: EAGLE-2 simulated as the document does
//
// A policy turns the request's acceptance trace (from replay_decode / speculative_decode with
// the policy's drafter options) into a latency / energy / memory breakdown with the device's
// NPU and CPU specs and the cost model. Verification of d draft tokens (+1 pending):
//   NPU: ceil((d+1)/c) padded executions of the decode graph's linear layers,
//        plus the attention of the d+1 rows on the CPU;
//   CPU: the whole verify Work on the CPU.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devices/compute_unit.h"
#include "devices/npu.h"
#include "models/cost_model.h"
#include "policies/specdec/graph_schedule.h"
#include "policies/specdec/retrieval_drafter.h"

namespace mobisim::policies::specdec {

struct SpecDecEnv {
  devices::NpuSpec npu;
  devices::ComputeUnitSpec cpu;
  double base_power_w = 0;
  models::CostModel cost;
};

// One stretch of work on one unit, in execution order (replayed on the simulated device).
struct Phase {
  std::string unit;   // "npu" or "cpu"
  double seconds = 0;
  std::string label;  // prefill, prefill attention, graph switch, calibration, draft, verify, attention
};

struct RequestBreakdown {
  std::vector<Phase> phases;
  double prefill_s = 0;      // chunked NPU prefill (with progressive switching when it applies)
  double switch_s = 0;       // exposed graph switching
  double calibration_s = 0;  // in-context calibration (~2 ms per input token)
  double decode_s = 0;       // verification / decode steps
  double draft_s = 0;        // drafting (retrieval, tree building, EAGLE's draft model)
  double npu_busy_s = 0, cpu_busy_s = 0;
  double energy_j = 0;
  double peak_memory_bytes = 0;
  std::int64_t output_tokens = 0;
  std::int64_t steps = 0;
  double mean_accepted = 0;  // accepted draft tokens per verification
  double mean_drafted = 0;   // draft tokens verified per step (rows after the pending token)
  double total_s() const { return prefill_s + switch_s + calibration_s + decode_s + draft_s; }
  double ms_per_token() const { return output_tokens ? 1e3 * total_s() / static_cast<double>(output_tokens) : 0; }
};

// One execution unit's timing pieces.
double npu_verify_seconds(const SpecDecEnv& env, std::int64_t rows, std::int64_t context, int graph_chunk);
double cpu_verify_seconds(const SpecDecEnv& env, std::int64_t rows, std::int64_t context);
// NPU part only (linear layers) and CPU attention part of an NPU verification, for busy/energy.
std::pair<double, double> npu_verify_split(const SpecDecEnv& env, std::int64_t rows, std::int64_t context,
                                           int graph_chunk);

class SpecDecPolicy {
 public:
  static constexpr const char* kRegistryKind = "specdec_policy";
  virtual ~SpecDecPolicy() = default;
  // The drafter this policy uses (none: plain decoding, or EAGLE's simulated drafter).
  virtual std::optional<DrafterOptions> drafter() const = 0;
  // `trace` = the acceptance trace of the request under drafter() (steps of 0 draft tokens for
  // plain decoding); `prompt_tokens` = P.
  virtual RequestBreakdown run(const SpecDecEnv& env, std::int64_t prompt_tokens, const DecodeTrace& trace) const = 0;
  virtual std::string name() const = 0;
};

// Shared knobs (documented in each policy's schema).
struct PolicyKnobs {
  GraphShapes graphs;
  int draft_budget = 31;
  double calibration_ms_per_token = 2.0;
  double draft_ms_per_step = 1.0;  // retrieval + tree construction (document: < 3 ms)
  double calibration_bytes_per_node = 16;
};
ParamSchema knob_schema();
PolicyKnobs knobs_from(const Params& p);

// Pieces the policies combine.
struct PrefillResult {
  double prefill_s = 0, switch_s = 0, npu_s = 0, cpu_s = 0, peak_npu_bytes = 0;
};
// Chunked NPU prefill on G_p; with `switch_strategy`, also switching to G_d as scheduled.
PrefillResult npu_prefill(const SpecDecEnv& env, std::int64_t prompt_tokens, const GraphShapes& g,
                          std::optional<SwitchStrategy> switch_strategy);
// Energy: active power of each unit while busy, idle power otherwise, plus the SoC base power.
double request_energy_j(const SpecDecEnv& env, double total_s, double npu_busy_s, double cpu_busy_s);

}  // namespace mobisim::policies::specdec
