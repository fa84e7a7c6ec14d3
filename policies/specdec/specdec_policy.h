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
//
// In-context calibration (section 3.3) samples the top-n next tokens of every context position
// from the prefill logits at `calibration_ms_per_token` of CPU time (the document: "an amortized
// latency of about 2 ms per input token", "negligible performance overhead"). How that cost meets
// the critical path is `calibration_overlap`:
//   pipelined (default)  the prefill is chunked, so the logits of chunk i exist once chunk i has
//                        run; the CPU, idle apart from the prefill's attention, samples chunk i
//                        while the NPU computes chunk i+1 (a two-stage pipeline). Sampling is
//                        issued in slices of `calibration_slice_tokens` at a lower CPU priority than
//                        the prefill's attention, which therefore waits at most one slice; only the
//                        sampling that outlasts prefill + graph switch delays the first decoding
//                        step. This is our reading of "amortized" / "negligible overhead" (the
//                        document does not describe the overlap; its Table 3 "ours" leaves no room
//                        for a sequential 2 ms/token over 1-2K-token contexts).
//   sequential           sampling starts after prefill and switch and is fully exposed (the
//                        literal "after prefill completes" of the workflow paragraph).
// Either way the CPU is charged the whole sampling time (energy).
//
// Energy: each unit draws its active power while busy and its idle power otherwise, plus the SoC's
// base power (the device's energy model). What runs on the CPU, read in mllm (branch v1, commit
// 013e4cec, the code CoordGen builds on):
//   - the CPU ops beside the NPU graphs (attention, footnote 2; the LM head) and CPU decoding run
//     on mllm's worker threads, CPUBackend::cpu_threads (examples/demo_qwen_npu.cpp: `-t`, default
//     4): charged the CPU's active_power_w (the device profile gives it for that pool);
//   - sampling from the logits (mllm/Generate.cpp: std::max_element / std::partial_sort over the
//     vocabulary, on the calling thread) and retrieval drafting (mllm/Draft.hpp: TracePool and
//     SuffixAutomaton, plain single-threaded code) keep one core busy: the in-context calibration's
//     sampling and the retrieval `draft` phases are charged the CPU's single_thread_power_w (the
//     active power when the profile does not give it).
//   - EAGLE's drafter model runs as the target's ops do (its layer on the decoding unit).
//   - every NPU execution is a QNN graph run called from that thread: mllm splits each decoder layer
//     into two QNN subgraphs with the CPU attention between (models/qwen/modeling_qwen_npu_v2.hpp,
//     SubgraphStart/SubgraphFinalize), and its QNN backend sets an RPC polling time of 9999 us
//     (backends/qnn/QNNBackend.cpp, setRpcLatencyAndPolling, at backend creation). FastRPC's polling
//     mode "polls a shared memory location for completion after sending the invocation" where the
//     CPU would otherwise "enter low power modes", falling back to the interrupt path only when the
//     poll times out (Linux misc/fastrpc, "Add polling mode support for fastRPC driver"). A
//     subgraph of a 1.5B model runs for ~1 ms per decode step and a few ms per 256-token prefill
//     chunk, inside the window: the calling thread spins through all NPU execution time (prefill,
//     verification, EAGLE's NPU drafter; not graph loading), charged as one core on top of the
//     idle CPU, rpc_polling_power_w = single_thread_power - idle_power (npu_rpc_polling: false
//     drops it).
//
// The LM head (docs/coordgen.md "LM head"). In upstream mllm the final norm and the LM head are CPU
// ops after the last QNN graph: the last decoder layer closes its second subgraph
// (models/qwen/modeling_qwen_npu_v2.hpp, QwenNPU_CPUDecoder::Forward, SubgraphFinalize), after which
// Module::tmp_device is the CPU (Layer.hpp, SubgraphFinalize) and QNNBackend::runLayer creates the
// model's `norm` (RMSNorm) and `lm_head` (HeadLinear) there, on CPUBackend::cpu_threads. The head is
// fp32 (npu_lm_head_dtype) and read whole each time it runs. Two knobs, because the evidence differs:
//   prefill_lm_head_unit (default cpu): upstream's NPU prefill is the code CoordGen builds on, so after
//                 the last chunk (mllm's ChunkPipeline runs the last graph for the last chunk only) the
//                 CPU runs the norm of that chunk's prefill_chunk rows and the LM head of ONE row
//                 (CPUHeadLinear::execute takes row seqLength % chunk_size - 1), as a CPU phase on the
//                 worker pool. The logits of every context position that in-context calibration samples
//                 are inside the document's calibration_ms_per_token, not charged again. It is part of
//                 the prefill (it gives the first token), before the exposed graph switch (mllm's
//                 demo_qwen_npu.cpp toggles switching after the prefill's generate() returns its token).
//   lm_head_unit (default npu): verification, NPU decoding and EAGLE's NPU drafter. Upstream mllm at
//                 that commit has no NPU verification (its speculative decoding runs on the CPU), so the
//                 fork's placement cannot be read; and the document's measured 32-row verification
//                 (Figure 6, 5.7 ms/token, 182 ms, a calibration point of the NPU's utilisation) is
//                 shorter than a CPU fp32 head over 32 rows alone on this CPU model (~0.2-0.5 s), so the
//                 fork cannot be computing the head that way. `npu` keeps the norm and head inside the
//                 graphs at their weight dtype; `cpu` charges upstream's CPU path after each step's
//                 graphs and CPU attention: the norm of the padded graph rows and the head of every real
//                 row (d + 1, Generate.cpp generate_SD), and after each EAGLE draft pass the head of its
//                 draft_topk rows.
// The NPU draws its idle power while the CPU drafts, samples or attends (mllm votes the HTP to
// burst with sleep disabled for the whole session, QNNBackend.cpp setPowerConfigBurst, so that idle
// is an awake HTP's; no figure for it was found: the profiles' idle_power_w is kept).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devices/compute_unit.h"
#include "devices/device.h"
#include "devices/npu.h"
#include "models/cost_model.h"
#include "policies/specdec/graph_schedule.h"
#include "policies/specdec/retrieval_drafter.h"
#include "sim/simulator.h"

namespace mobisim::policies::specdec {

struct SpecDecEnv {
  devices::NpuSpec npu;
  devices::ComputeUnitSpec cpu;
  double base_power_w = 0;
  models::CostModel cost;      // the model the NPU graphs run (and the CPU's attention beside them)
  // The model the CPU decodes with when decoding runs there (cpu_vanilla, cpu_sam, cpu_eagle): mllm keeps a
  // separate CPU copy of the weights in its own format (its NPU demos decode with a Q4_0_4x4 file beside
  // the NPU's int8 one). The same architecture as `cost`; often the same weights too.
  models::CostModel cpu_cost;
};

// One stretch of work on one unit, in execution order (replayed on the simulated device).
// Phases run in order on the main chain, except `background` ones (pipelined calibration), which
// run in order among themselves on a second stream, each once main-chain phase `after` finished.
// A main-chain phase with `join` starts only when every background phase has finished.
struct Phase {
  std::string unit;   // "npu" or "cpu"
  double seconds = 0;
  std::string label;  // prefill, prefill attention, graph switch, calibration, draft, verify, attention
  bool background = false;
  int after = -1;     // background: index of the main-chain phase it waits for (-1: none)
  bool join = false;  // main chain: wait for the background stream first
  int priority = 0;   // the unit's queue priority (lower is served first)
  // What the unit draws while this phase runs, when not its own active power: host code on the
  // runtime's calling thread (sampling, retrieval drafting) keeps one CPU core busy, not mllm's pool
  // of worker threads that the CPU's active_power_w describes (specdec_policy.h, Energy).
  std::optional<double> power_w = std::nullopt;
};

struct RequestBreakdown {
  std::vector<Phase> phases;
  double prefill_s = 0;      // chunked NPU prefill (with progressive switching when it applies)
  double switch_s = 0;       // exposed graph switching
  double calibration_s = 0;      // in-context calibration on the critical path (exposed)
  double calibration_cpu_s = 0;  // all of its sampling (CPU time, ~2 ms per input token)
  double decode_s = 0;       // verification / decode steps
  double draft_s = 0;        // drafting (retrieval, tree building, EAGLE's draft model)
  double npu_busy_s = 0, cpu_busy_s = 0;
  double cpu_single_thread_s = 0;  // the part of cpu_busy_s that keeps one core busy (sampling, drafting)
  double npu_polled_s = 0;  // NPU execution time the calling thread spins through (PolicyKnobs::npu_rpc_polling)
  double energy_j = 0;
  double peak_memory_bytes = 0;
  std::int64_t output_tokens = 0;
  std::int64_t steps = 0;
  double mean_accepted = 0;  // accepted draft tokens per verification
  double mean_drafted = 0;   // draft tokens verified per step (rows after the pending token)
  double total_s() const { return prefill_s + switch_s + calibration_s + decode_s + draft_s; }
  double ms_per_token() const { return output_tokens ? 1e3 * total_s() / static_cast<double>(output_tokens) : 0; }
};

// Where the final norm and the LM head run (PolicyKnobs::lm_head_unit; the Energy note above).
enum class LmHeadUnit { kCpu, kNpu };
const char* to_string(LmHeadUnit u);
LmHeadUnit parse_lm_head_unit(const std::string& name);  // "cpu" | "npu", else ConfigError naming the choices

// The CPU ops after the last NPU graph (lm_head_unit: cpu): the final RMSNorm of the graph's `norm_rows`
// output rows and the LM head of `logit_rows` of them, weights and activations at `dtype` (mllm: fp32),
// with the cost model's FLOP and byte convention (models/cost_model.h): 4*n*d and 2*t*d*vocab FLOPs,
// the whole vocab x hidden head read once per call.
models::Work cpu_lm_head_work(const models::ModelSpec& s, std::int64_t norm_rows, std::int64_t logit_rows,
                              models::DType dtype);
// The NPU graphs' share of a pass: npu_part (graph_schedule.h), without the final norm and LM head
// when they run on the CPU (`head` kCpu).
models::Work npu_graph_part(const models::Work& w, LmHeadUnit head);
// cpu_lm_head_work's time on the SpecDecEnv's CPU (the runtime's worker pool), at `dtype`.
double cpu_lm_head_seconds(const SpecDecEnv& env, std::int64_t norm_rows, std::int64_t logit_rows, models::DType dtype);

// One execution unit's timing pieces.
double cpu_verify_seconds(const SpecDecEnv& env, std::int64_t rows, std::int64_t context);
// NPU part (the graphs' linear layers; with `head` kNpu also the final norm and LM head) and CPU
// attention part of an NPU verification of `rows` rows on graphs of `graph_chunk`, for busy/energy.
std::pair<double, double> npu_verify_split(const SpecDecEnv& env, std::int64_t rows, std::int64_t context,
                                           int graph_chunk, LmHeadUnit head);
// The CPU piece after an NPU verification's graphs (0 with `head` kNpu): the norm of the padded
// graph rows, the LM head of the `rows` real ones.
double npu_verify_head_seconds(const SpecDecEnv& env, std::int64_t rows, int graph_chunk, LmHeadUnit head,
                               models::DType head_dtype);
// The whole NPU verification: graphs + CPU attention + the CPU head piece.
double npu_verify_seconds(const SpecDecEnv& env, std::int64_t rows, std::int64_t context, int graph_chunk,
                          LmHeadUnit head, models::DType head_dtype);

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
enum class CalibrationOverlap { kPipelined, kSequential };

struct PolicyKnobs {
  GraphShapes graphs;
  int draft_budget = 31;
  double calibration_ms_per_token = 2.0;
  CalibrationOverlap calibration_overlap = CalibrationOverlap::kPipelined;
  int calibration_slice_tokens = 1;
  double draft_ms_per_step = 1.0;  // retrieval + tree construction (document: < 3 ms)
  double calibration_bytes_per_node = 16;
  // What the runtime (mllm, the document's base) keeps beside the transformer blocks, in CPU memory
  // (docs/coordgen.md, "Memory (Figure 12)"): the embedding table and the LM head are two tensors,
  // each loaded by its own CPU op (Embedding; HeadLinear, or Parameter when tied), so a tied model
  // holds the table twice. The embedding table is float in both of mllm's files (its QNN export
  // quantises only the linear layers and its converter writes floats as fp32; its CPU quantiser
  // keeps embed_tokens in fp32); the NPU model's LM head is float too (the export skips lm_head),
  // the CPU copy's is quantised with its linear layers (the CPU spec's classifier dtype).
  models::DType embedding_dtype = models::DType::kF32;
  models::DType npu_lm_head_dtype = models::DType::kF32;
  // The runtime's calling thread polls for each QNN graph execution's completion instead of sleeping
  // (mllm's QNNBackend::setRpcLatencyAndPolling: RPC polling time 9999 us, longer than any execution of
  // its per-layer subgraphs), so one CPU core spins through all NPU execution time (Energy, above).
  bool npu_rpc_polling = true;
  // Where the NPU model's final norm and LM head run (Energy, above): mllm's CPU ops after the last
  // QNN graph (kCpu), or inside the graphs (kNpu, the earlier model).
  // Verification, NPU decoding and EAGLE's NPU drafter: inside the graphs by default (the LM head note).
  LmHeadUnit lm_head_unit = LmHeadUnit::kNpu;
  // After an NPU prefill: upstream mllm's CPU head over the one row that gives the first token.
  LmHeadUnit prefill_lm_head_unit = LmHeadUnit::kCpu;
};
ParamSchema knob_schema();
// What one CPU core spinning on an NPU execution's completion adds to the idle CPU (>= 0).
double rpc_polling_power_w(const SpecDecEnv& env);
// The device values the policies' energy reads beyond each unit's active and idle power (the CPU's
// single_thread_power_w): a ConfigError naming the device and the key when one is missing, checked
// where a driver or stage takes up the phone, before any request runs.
void require_energy_values(const devices::DeviceProfile& phone, const std::string& who);
PolicyKnobs knobs_from(const Params& p);

// Pieces the policies combine.
struct PrefillSlot {
  int chunk = 0;
  double npu_s = 0, cpu_s = 0;  // NPU part (incl. waiting for its block's load), CPU attention
  double end_s = 0;             // when the slot finishes (from the schedule)
};
struct PrefillResult {
  // lm_head_s: the CPU LM head after the last slot (lm_head_unit: cpu), added to prefill_s by the policies.
  double prefill_s = 0, switch_s = 0, npu_s = 0, cpu_s = 0, peak_npu_bytes = 0, lm_head_s = 0;
  std::vector<PrefillSlot> slots;          // execution order
  std::vector<double> chunk_end_s;         // [chunk]: when its last slot finishes (its logits exist)
  std::vector<std::int64_t> chunk_tokens;  // [chunk]: real (unpadded) prompt tokens in it
};
// Chunked NPU prefill on G_p; with `switch_strategy`, also switching to G_d as scheduled.
PrefillResult npu_prefill(const SpecDecEnv& env, std::int64_t prompt_tokens, const GraphShapes& g,
                          std::optional<SwitchStrategy> switch_strategy);
// Two-stage pipeline (calibration overlapped with the chunked prefill): stage 2 item i can start
// once stage 1 delivered it (`ready_s[i]`) and stage 2 finished item i-1:
//   F_0 = ready_0 + work_0,  F_i = max(F_{i-1}, ready_i) + work_i;  returns F_last (0 if empty).
double pipeline_finish_s(const std::vector<double>& ready_s, const std::vector<double>& work_s);

// The same pipeline when the CPU also runs the prefill's attention (footnote 2): sampling fills
// only the CPU's idle time (the NPU part of each slot and the exposed switch), chunk c's once its
// last slot has run. Returns the sampling left when prefill + switch end (the exposed tail), not
// counting the up-to-one-slice waits of the attention that the device replay adds.
double calibration_tail_on_idle_cpu_s(const PrefillResult& p, const std::vector<double>& chunk_work_s);

// Replays a request's phases on the simulated device (phase_replay.h: main chain + background stream, each phase
// queued on its unit with its priority). `join_wait_s`: time the main chain spent waiting at joins.
struct ReplayResult {
  double latency_s = 0, energy_j = 0, join_wait_s = 0;
};
sim::Task<void> replay_phases(devices::Device& device, const std::vector<Phase>& phases, ReplayResult& out);

// Energy: active power of each unit while busy, idle power otherwise, plus the SoC base power;
// `cpu_single_thread_s` of the CPU's busy time at its single-thread power instead.
double request_energy_j(const SpecDecEnv& env, double total_s, double npu_busy_s, double cpu_busy_s,
                        double cpu_single_thread_s = 0);

}  // namespace mobisim::policies::specdec
