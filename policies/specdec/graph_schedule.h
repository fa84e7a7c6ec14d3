#pragma once
// Progressive graph scheduling (CoordGen section 3.2, equations 1-2, appendix A).
//
// The NPU runs static graphs: a prefill graph G_p (chunk c_p, e.g. 256) and a
// decoding graph G_d (chunk c_d, e.g. 32). The model is cut into B blocks of
// layers; each block starts on G_p and must be switched (its G_d loaded) once.
// Prefill runs chunk by chunk, each chunk through blocks 1..B; a block already
// switched runs its part of a chunk on G_d by repetition (ceil(c_p / c_d) padded
// executions). Rules of the problem (appendix A):
//   - computations are serial (one NPU), loads are serial (one loader);
//   - a load overlaps computations of *other* blocks, never its own block's;
//   - latency = max(prefill completion, switch completion).
// While a block loads, both of its graphs are resident (graphs never share
// weights), so every schedule here peaks at W + the largest block, except
// `both_resident`, which keeps two whole graphs (2 W) and never switches.
//
// A schedule is described by one trigger per block: the load of block b is
// requested when compute slot trigger[b] - 1 finishes (0: at time 0; S = B*C:
// after the prefill). Requests are served in (trigger, block) order. Every
// strategy, the exact search included, is evaluated by the same simulator.
#include <cstdint>
#include <string>
#include <vector>

#include "devices/compute_unit.h"
#include "devices/npu.h"
#include "models/cost_model.h"

namespace mobisim::policies::specdec {

// Costs of one prefill request cut into blocks and chunks.
struct ScheduleProblem {
  int blocks = 0;
  int chunks = 0;
  std::vector<double> load_s;                     // [block]: loading its G_d
  std::vector<std::vector<double>> prefill_s;     // [block][chunk]: its part of chunk j on G_p
  std::vector<std::vector<double>> decode_s;      // [block][chunk]: the same on G_d (repeated sub-chunks)
  // [block][chunk]: the CPU attention inside both of the above (make_schedule_problem fills it;
  // may be left empty by hand-made problems: then no CPU part is known).
  std::vector<std::vector<double>> attention_s;
  std::vector<double> weight_bytes;               // [block]: one graph's copy of its weights
  double other_weight_bytes = 0;                  // embeddings, head (resident once)
  void validate() const;                          // throws InputError on inconsistent shapes / negative costs
  int slots() const { return blocks * chunks; }
  double total_weight_bytes() const;
};

enum class SwitchStrategy { kSynchronous, kNaiveAsync, kProgressive, kProgressiveLate, kExact, kBothResident };
const char* to_string(SwitchStrategy s);
SwitchStrategy parse_switch_strategy(const std::string& name);  // throws ConfigError naming the choices
std::vector<std::string> switch_strategy_names();

struct ComputeSlot {
  int block = 0, chunk = 0;
  bool on_decode_graph = false;
  double start_s = 0, end_s = 0;
};
struct LoadSpan {
  int block = 0;
  double start_s = 0, end_s = 0;
  int overlapped_slots = 0;  // compute slots that ran (at least partly) while it loaded
};

struct GraphSchedule {
  SwitchStrategy strategy = SwitchStrategy::kSynchronous;
  std::vector<int> trigger;  // per block (see the header comment); empty for both_resident
  std::vector<ComputeSlot> computes;
  std::vector<LoadSpan> loads;
  double prefill_end_s = 0;
  double switch_end_s = 0;
  double peak_npu_bytes = 0;
  std::int64_t evaluated_schedules = 1;  // exact search: how many trigger vectors it simulated
  double latency_s() const { return prefill_end_s > switch_end_s ? prefill_end_s : switch_end_s; }
  // Time the decoding phase is delayed by switching: latency - prefill time had every chunk run on G_p.
  double exposed_switch_s(const ScheduleProblem& p) const;
};

// Runs a trigger vector (one entry per block, each in [0, S]) on the rules above.
GraphSchedule simulate_triggers(const ScheduleProblem& p, const std::vector<int>& trigger);

// Equation 2: the least k such that the next k compute slots after `slot` (their estimated
// times in `slot_seconds`) cover load_seconds (equation 1); -1 when no k in the remaining slots does.
int least_overlap_slots(const std::vector<double>& slot_seconds, int slot, double load_seconds);

// Synchronous: prefill entirely on G_p, then load every block (G_p released block by block).
GraphSchedule schedule_synchronous(const ScheduleProblem& p);
// Naive asynchronous: each block's load is requested when its last-chunk computation finishes.
GraphSchedule schedule_naive_async(const ScheduleProblem& p);
// CoordGen's greedy (eqs. 1-2): after computing block i (not yet switched), load it while the
// least number k of next blocks whose compute covers its load run; then consider block i+k.
// `first_slot`: the greedy considers loads only from that compute slot on (0 = the document's).
GraphSchedule schedule_progressive(const ScheduleProblem& p, int first_slot = 0);
// Extension (not in the document): the same greedy started at the slot that minimises latency
// (S + 1 candidates). Starting late keeps fewer chunks on the slower G_d repetition when G_d
// prefill is slower than G_p's, while still hiding the loads.
GraphSchedule schedule_progressive_late(const ScheduleProblem& p);
// Exhaustive search over all trigger vectors ((S+1)^B of them; ConfigError beyond max_evaluations).
// Never worse than the other strategies, whose trigger vectors are in its search space.
GraphSchedule schedule_exact(const ScheduleProblem& p, std::int64_t max_evaluations = 5'000'000);
// Both graphs resident from the start: prefill on G_p, no switch, twice the block weights.
GraphSchedule schedule_both_resident(const ScheduleProblem& p);
GraphSchedule schedule(const ScheduleProblem& p, SwitchStrategy s);

// Builds the problem of a prompt of `prompt_tokens` on the NPU (linear layers) with attention on
// the CPU (mllm, footnote 2): layers split into `blocks` contiguous blocks (the first ones get the
// remainder), G_p of `prefill_chunk` and G_d of `decode_chunk` tokens. Throws ConfigError when
// decode_chunk > prefill_chunk, blocks > layers or anything is not positive.
struct GraphShapes {
  int blocks = 4;
  int prefill_chunk = 256;
  int decode_chunk = 32;
};
void validate_shapes(const GraphShapes& g, int n_layers);
ScheduleProblem make_schedule_problem(const devices::NpuSpec& npu, const devices::ComputeUnitSpec& cpu,
                                      const models::CostModel& cost, std::int64_t prompt_tokens,
                                      const GraphShapes& shapes);

// The NPU-resident part of a transformer Work (everything but the attention score / softmax /
// context operators, which mllm runs on the CPU) and the CPU part.
models::Work npu_part(const models::Work& w);
models::Work cpu_attention_part(const models::Work& w);

}  // namespace mobisim::policies::specdec
