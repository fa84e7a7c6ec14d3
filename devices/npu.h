#pragma once
// A mobile NPU running static compiled graphs (as Qualcomm QNN / mllm do).
//
// A graph is compiled for a fixed input shape: a chunk of `c` tokens. Running n
// tokens on a graph of chunk c costs ceil(n / c) executions, each padded to c
// tokens. One execution costs
//
//   t_exec(c) = exec_overhead + max( flops(c) / (peak * util(c)), weight_bytes / bandwidth ),
//   util(c)   = max_utilization * c / (c + half_utilization_chunk),
//
// i.e. a weight-stationary array that is poorly used by short inputs and
// saturates for long ones (CoordGen section 2.3: longer chunks are more
// efficient per token). Loading a graph (or switching to another shape) costs
// `graph_load_ms_per_layer` per layer and keeps a copy of the weights resident
// per loaded graph (graphs do not share weights).
//
// Decode (one token per execution) does not use the chunk curve: a single-token graph streams every
// weight from DRAM once per token, so it is bounded by memory bandwidth,
//
//   t_decode = exec_overhead + max( flops / (peak * max_utilization),
//                                   bytes / (mem_bandwidth * decode_bandwidth_efficiency) ).
//
// A chunked prefill runs chunk after chunk, each attending to the K/V of the chunks before it
// (chunked_prefill_seconds).
//
// Static-context graphs (engine `graph_context`, `graph_logits`; Qualcomm AI Hub's Genie exports). A graph
// compiled with a fixed KV-cache input of graph_context - chunk positions (ai-hub-models v0.46.1,
// qai_hub_models/models/_shared/llm/model.py, _get_input_spec: past_key_{l}_in of context_length -
// sequence_length positions, attention_mask (1, 1, sequence_length, context_length)) reads and attends that
// whole buffer in every pass, whatever part of it holds tokens yet (the mask only zeroes the scores): pass i
// of a prefill attends max(graph_context - chunk, n_cached + i * chunk) past positions. With graph_logits
// all, every pass computes the LM head of all `chunk` rows (the shared LLM export returns the model's
// logits of every input position, no logits_to_keep); last: only the final pass's last row. So every pass
// of an n-token prompt costs the same, and T(n) = ceil(n / chunk) * T(chunk), as AI Hub's model cards state
// (their TTFT range: max = min * context_length / 128). The peak depends on the activation dtype too: integer weights with
// 16-bit activations (W4A16/W8A16, as QNN/Genie run LLMs) reach `mixed_precision_fraction` of the
// INT8 peak. The engine profile (devices/engine.h) sets these three; the defaults (1.0, 1.0, 256)
// leave the earlier behaviour unchanged.
#include <memory>
//
// Backends (issue 37 item 2). A Hexagon NPU has more than one engine: the HTP matrix engine (HMX,
// the curve above, which QNN graphs run on) and the HVX vector units, which runtimes that dispatch
// their own kernels use (llama.cpp's ggml-hexagon backend: quantised matmuls as HVX vrmpy loops, one
// ggml op per DSP round trip). An engine profile names the backend of each phase (`prefill_backend`,
// `decode_backend`: htp or hvx). On hvx every operator runs alone, one after the other (no fusion,
// no graph), as a roofline against the HVX peak of the SoC (device profile `hvx_peak_tops_int8`):
//
//   t_hvx(work) = sum over ops of [ max( flops / (hvx_peak * hvx_gemm_efficiency),
//                                        bytes / (mem_bandwidth * hvx_bandwidth_efficiency) )
//                                   + calls * hvx_op_overhead ]
//
// with the runtime's kernel-class efficiencies (engine profile) applied to each SoC's peak. A device
// profile without an HVX peak cannot run an hvx phase: ConfigError naming device, engine and key.
//
// HMX clock corner of the build (engine `hmx_min_rows`, `hmx_clock`, `hmx_max_corner_speedup`). From
// llama.cpp b8475 ggml-hexagon runs a matmul of M >= 32 activation rows on the HMX matrix unit and fewer on
// HVX (htp/matmul-ops.c); hvx_gemm_efficiency is fitted on a build that votes the max HMX clock corner
// (htp/main.c: HAP_power_set_HMX_v2, llama.cpp PR #22334). Builds before it power HMX on without a clock
// request, so HMX runs at the lowest corner, which PR #22334 measured. A ubatch of n >= hmx_min_rows tokens
// of such a build runs its compute at hvx_gemm_efficiency / hmx_max_corner_speedup:
//
//   t_ubatch = sum over ops of [ max( flops * s / (hvx_peak * hvx_gemm_efficiency), bytes / bw ) + calls ],
//   s = hmx_max_corner_speedup if (hmx_clock lowest and n >= hmx_min_rows) else 1
//
// (hmx_clock_slowdown below holds s for the lowest corner, 1 otherwise).
//
// HVX matmuls beside HMX ones (engine `hvx_matmul_efficiency`, `hmx_clock: none`). With HMX in the build,
// hvx_gemm_efficiency is the rate of its HMX ubatches (fitted on a 256-token prefill); the matmuls HMX does
// not take run the flat HVX vrmpy kernels at their own share of the HVX peak: ubatches of fewer than
// hmx_min_rows rows, decode (one row), and every ubatch of a build without HMX (before llama.cpp b8475:
// `hmx_clock: none`). Their compute then runs at hvx_matmul_efficiency:
//
//   s = hvx_gemm_efficiency / hvx_matmul_efficiency  for a ubatch on HVX (hvx_matmul_efficiency set)
//
// An engine that gives hmx_min_rows must give hvx_matmul_efficiency (no silent reuse of the HMX rate).
//
// HVX contexts vs the HMX unit (device `hvx_peak_tops_int8`, `hmx_peak_tflops_fp16`). ggml-hexagon runs one
// worker thread per 128-byte HVX context the DSP reports (htp/main.c, htp_iface_start: n_hvx 0 -> "use all" =
// (qurt_hvx_get_units() >> 8) & 0xFF; its matmul rows are split over those workers), and there is one HMX unit per
// NPU whatever the context count (htp_iface_hwinfo: n_hmx = 1; hwinfo logs "6 HVX, 1 HMX" on v79, "8 HVX, 1 HMX"
// on v81). So an HVX ubatch (and decode) runs against the SoC's HVX peak, which counts its contexts, while an HMX
// ubatch runs against the HMX unit's peak, which does not:
//
//   HMX ubatch:  every op's compute at hmx_peak * hvx_gemm_efficiency / hmx_clock_slowdown (fp16 tiles: HMX
//                multiplies the dequantised fp16 weights whatever the stored dtype, llama.cpp PR #20693)
//   HVX ubatch:  hvx_seconds as above, against hvx_peak_tops_int8 / hvx_peak_tflops_fp16
//
// A device without hmx_peak_tflops_fp16 cannot run an HMX ubatch: ConfigError naming device, engine and key.
//
// Runtimes that send every matmul to HMX, with the weights dequantised on HVX (engine `hmx_min_rows: 1`,
// `hmx_dequant_hvx_cycles_per_tile`; MNN's Hexagon backend, docs/npu_sources.md). HMX multiplies 32 x 32 fp16
// tiles (kHmxTileRows): a matmul of fewer activation rows than a tile still costs whole tiles, so when the
// runtime's hmx_min_rows is below a tile a linear operator of 0 < tokens < 32 rows on HMX computes
// flops x 32 / tokens (MNN alibaba/MNN e128c5503, htp-ops-lib matmul_q4block_fp16_mle32.c: M = 1 runs one
// HMX tile-op per 32 x 32 weight tile, its 32 activation rows holding the block scales). And every 32 x 32
// weight tile is dequantised once per HMX ubatch (the outer loop runs over output-channel chunks, so a
// prefill ubatch dequantises each weight once; decode once per token) by the HVX workers, serially before
// the HMX multiply of that tile:
//
//   t_dequant = sum over linear ops of weights / 1024 * hmx_dequant_hvx_cycles_per_tile
//               / (hvx_peak_tops_int8 / kHvxInt8OpsPerContextCycle)     (HVX context-cycles per second)
//
// 0 (the default, llama.cpp): the dequantisation is folded into hvx_gemm_efficiency.
//
// Weights as the graph holds them (engine `graph_weight_dtype`, graph_model): a runtime that cannot keep
// the model file's quantisation on the NPU builds its graphs from dequantised weights, so NPU work reads
// and multiplies weights of that dtype: MNN's QNN backend keeps only symmetric integer weights quantised
// (source/backend/qnn/execution/QNNConvolution.cpp, isWeightQuantSupported / createWeightAndBias) and
// turns the default asymmetric int4 export into fp16 tensors. Decode then streams 2 bytes per weight
// instead of 0.5, and prefill runs at the fp16 peak. Work that arrives already costed on other weights
// (DeviceProfile::compute_seconds) is refused: it cannot be re-costed from its bytes.
//
// CPU+NPU overlap across prefill chunks (llm.npu / mllm's QNNPipelineExecutor, engine `cpu_overlap`):
// the NPU runs the chunk's linear layers while the CPU runs the float work of the previous chunk
// (attention). With a_i the NPU stage and b_i the CPU stage of chunk i (i = 1..n), the lock-step
// pipeline takes
//
//   T = a_1 + sum_{i=2..n} max(a_i, b_{i-1}) + b_n          (fill a_1, n-1 steady steps, drain b_n)
//
// (pipelined_seconds). It is the exact two-stage flow-shop makespan whenever one stage dominates
// throughout (a_i >= b_{i-1} for every i: T = sum a + b_n; or b_{i-1} >= a_i: T = a_1 + sum b), and an
// upper bound of it otherwise.
//
// Graphs built at run time (engine `graph_build: online`): a runtime that composes and finalises its QNN
// graphs on the phone when it first runs a shape (MNN's online QNN mode: QnnBackend::onResizeBegin /
// onResizeEnd -> graphFinalize; mllm v1's first chunk, Module::isFirstChunk) spends that time inside the
// request, on the CPU (QNN's HTP prepare library runs on the application processor; the accelerator's
// own share of a finalise is a few ms). The time is
//
//   t_build = n_layers * k * [ f_npu + (f - f_npu) * host_ghz / device_ghz ]     (graph_build_seconds)
//
// one finalise cost per linear layer (projection) the graphs hold, k per block (ModelSpec::
// linear_layers_per_block: 7 with a gated FFN, 6 with a plain one): the evidence is a one-matmul graph's
// finalise time f (configs/engines/mnn.yaml), so a layer's other operators (norms, RoPE, activations) are
// counted inside its linears' cost, and the classifier, embedding and CPU fallbacks are not counted. QNN's
// profile splits f into the remote call to the accelerator, f_npu ("RPC (finalize) time"), and the host's
// part, which is single-threaded CPU work: it is scaled from the measuring phone's prime-core clock
// (host_ghz, engine graph_finalize_host_ghz) to this device's fastest core clock (device_ghz, from
// compute.cpu.clusters; a device without clusters cannot build graphs online: ConfigError). ASSUMED: the
// same work per clock on every core (Cortex-X3 and Oryon alike), so newer cores with more work per clock are
// predicted slower than they are.
// Offline (the default: a context binary, or graphs built in a warm-up before the timed request), it is 0.
#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "devices/engine_gaps.h"
#include "models/cost_model.h"
#include "sim/params.h"

namespace mobisim::devices {

enum class NpuBackend { kHtp, kHvx };
const char* to_string(NpuBackend b);
NpuBackend parse_npu_backend(const std::string& s);  // "htp" | "hvx", else ConfigError

// The lock-step two-stage pipeline over chunks (see above): stage a on the NPU, stage b on the CPU.
// a and b must have the same length; empty: 0.
double pipelined_seconds(const std::vector<double>& a, const std::vector<double>& b);

// HMX multiplies 32 x 32 fp16 tiles (htp-ops-lib and ggml-hexagon: 32 x 32 x 2-byte = 2048-byte tiles).
inline constexpr std::int64_t kHmxTileRows = 32;
inline constexpr double kHmxTileWeights = 1024;
// The int8 ops one 128-byte HVX context does per cycle in the device profiles' HVX peak (npu.hvx_peak_tops_int8
// = contexts x 512 x clock: one vrmpy of 128 byte pairs on each of two multiply resources): dividing the peak by
// it gives the contexts' cycles per second.
inline constexpr double kHvxInt8OpsPerContextCycle = 512;

struct NpuSpec {
  double peak_tops_int8 = 0;
  // The HVX vector units of the same NPU (0: the device profile does not give them).
  double hvx_peak_tops_int8 = 0;
  double hvx_peak_tflops_fp16 = 0;
  // The HMX matrix unit of the same NPU (one per NPU): what ubatches of >= hmx_min_rows rows run against.
  double hmx_peak_tflops_fp16 = 0;
  double peak_tflops_fp16 = 0;
  double max_utilization = 1.0;
  double half_utilization_chunk = 64;
  double exec_overhead_ms = 0;
  double mem_bandwidth_gbps = 0;
  double graph_load_ms_per_layer = 0;
  double active_power_w = 0;
  double idle_power_w = 0;
  // Runtime properties, set by an engine profile (not device-profile fields).
  double decode_bandwidth_efficiency = 1.0;
  double mixed_precision_fraction = 1.0;
  std::int64_t graph_chunk = 256;
  // Static-context graphs (see above): the KV length every prefill pass reads (0: only the positions
  // present), and whether every pass computes the LM head of all its rows.
  std::int64_t graph_context = 0;
  bool graph_logits_all_rows = false;
  // Past positions pass `pass_index` of a prefill after `n_cached` reads on graphs of `chunk` tokens.
  std::int64_t pass_past_positions(std::int64_t n_cached, std::int64_t done, std::int64_t chunk) const {
    return std::max(graph_context - chunk, n_cached + done);
  }
  // Set by an engine profile: the (phase, weight dtype) values it neither sets nor inherits; the
  // timing functions below raise them (devices/engine_gaps.h). null: no engine applied.
  std::shared_ptr<const EngineGaps> gaps;
  void check(Phase phase, models::DType weight) const {
    if (gaps) gaps->check(phase, weight);
  }
  NpuBackend prefill_backend = NpuBackend::kHtp, decode_backend = NpuBackend::kHtp;
  double hvx_gemm_efficiency = 1.0;       // fraction of the HVX peak on the runtime's matmul kernels
  double hvx_bandwidth_efficiency = 1.0;  // fraction of DRAM bandwidth its kernels stream at
  double hvx_op_overhead_us = 0;          // per operator call (dispatch, DSP round trip)
  std::int64_t hmx_min_rows = 0;          // ubatches of at least this many tokens run their matmuls on HMX (0: none)
  double hmx_clock_slowdown = 1.0;        // their compute time factor at the build's HMX clock corner (see above)
  bool hmx_in_build = true;               // false: the build predates HMX (engine/probe hmx_clock: none)
  double hvx_matmul_efficiency = 0;       // fraction of the HVX peak of matmuls on HVX beside HMX (0: not given)
  // HVX context-cycles to dequantise one 32 x 32 weight tile to fp16 before HMX multiplies it (see above;
  // 0: folded into hvx_gemm_efficiency).
  double hmx_dequant_hvx_cycles_per_tile = 0;
  bool cpu_overlap = false;               // chunk i's NPU work overlaps chunk i-1's CPU float work
  // The dtype the runtime's NPU graphs hold every linear weight in (engine profile; unset: the model's own).
  std::optional<models::DType> graph_weight_dtype;
  // Graphs built at run time (engine `graph_build: online`) and the finalise cost per linear layer they hold
  // (engine `graph_finalize_ms_per_linear`; required when online, EngineProfile::from_yaml).
  bool online_graph_build = false;
  std::optional<double> graph_finalize_ms_per_linear;
  // Of which the accelerator's (RPC) share, and the prime-core clock of the phone it was measured on (engine
  // keys; required when online): the rest is host CPU work, scaled to this device's fastest core clock.
  std::optional<double> graph_finalize_npu_ms_per_linear;
  std::optional<double> graph_finalize_host_ghz;
  double host_fastest_core_ghz = 0;       // the device's compute.cpu.clusters (0: not described; EngineProfile::apply)
  std::string device_name, engine_name;   // for error messages (set by DeviceProfile / EngineProfile::apply)

  static ParamSchema schema();
  static NpuSpec from_params(const Params& p);

  // The model as the runtime's NPU graphs hold it: with graph_weight_dtype set, every linear weight
  // (projections, classifier and the embedding tied to it) in that dtype, with no group scales (the
  // graph stores plain tensors); unset, `m` itself. NPU work is costed on this spec (its bytes and peak).
  models::ModelSpec graph_model(const models::ModelSpec& m) const;

  double utilization(double chunk) const { return max_utilization * chunk / (chunk + half_utilization_chunk); }
  // One execution of a graph of `chunk` tokens doing `work` (the work of exactly `chunk` tokens).
  // `overhead_share` is the part of the model the graph covers: exec_overhead_ms is a cost per
  // pass through the whole model (it is fitted to whole-model decode steps), so a graph of one
  // block of layers out of B carries its share of it, and B block executions cost one pass's.
  double exec_seconds(const models::Work& work_of_chunk, double chunk, models::DType weight_dtype,
                      double overhead_share = 1.0) const;
  // n tokens on a graph of chunk c: ceil(n/c) padded executions (work_of_chunk as above).
  double run_seconds(std::int64_t n_tokens, std::int64_t chunk, const models::Work& work_of_chunk,
                     models::DType weight_dtype) const;
  // ConfigError naming `path` when static-context graph keys are set on a path that does not model them.
  void refuse_static_graph(const std::string& path) const;
  double graph_load_seconds(int layers) const { return graph_load_ms_per_layer * 1e-3 * layers; }
  // CPU time to compose and finalise the graphs of model `m` at run time (see above): 0 offline; online
  // without graph_finalize_ms_per_linear, a ConfigError naming the engine and that key.
  double graph_build_seconds(const models::ModelSpec& m) const;

  // Peak operations per second for weights of `weight` dtype and activations of `activation` dtype.
  double peak_ops(models::DType weight, models::DType activation) const;
  // One decode step (the work of one token): bandwidth-bound weight streaming.
  double decode_seconds(const models::Work& work_of_token, models::DType weight, models::DType activation) const;
  // Prefill of `n_new` tokens after `n_cached` on graphs of `chunk` tokens: each chunk padded to
  // `chunk` and attending to every earlier position (cached ones and earlier chunks).
  double chunked_prefill_seconds(const models::CostModel& cost, std::int64_t n_new, std::int64_t n_cached,
                                 std::int64_t chunk) const;
  // Any work submitted to the NPU as a whole (Device::compute): single-token work as decode_seconds,
  // longer work in graph_chunk-token executions at the chunk's utilisation.
  double work_seconds(const models::Work& work, models::DType weight, models::DType activation) const;

  // HVX: the peak for `weight` (ConfigError naming device, engine and key when the profile lacks it;
  // `phase` says what needed it), and `work` run op by op on the vector units.
  double hvx_peak_ops(models::DType weight, const std::string& phase) const;
  // `compute_slowdown` multiplies every op's compute time (hvx_gemm_efficiency / hvx_matmul_efficiency).
  double hvx_seconds(const models::Work& work, models::DType weight, const std::string& phase,
                     double compute_slowdown = 1.0) const;
  // The HMX unit's peak (ConfigError naming device, engine and key when the profile lacks it), and `work` run
  // op by op with every op's compute on it at hvx_gemm_efficiency / `compute_slowdown` (the clock corner).
  double hmx_peak_ops(const std::string& phase) const;
  // Linear ops of fewer rows than a tile pay whole tiles when hmx_min_rows is below a tile, and the weight
  // tiles' HVX dequantisation is added (see above).
  double hmx_seconds(const models::Work& work, const std::string& phase, double compute_slowdown) const;
  // The HVX time to dequantise the weight tiles of `work`'s linear operators once (0 when
  // hmx_dequant_hvx_cycles_per_tile is 0); ConfigError naming the device when it gives no HVX peak.
  double hmx_dequant_seconds(const models::Work& work, const std::string& phase) const;
  // The compute factor of a linear operator of `tokens` rows on HMX: kHmxTileRows / tokens when the runtime
  // sends sub-tile matmuls to HMX (hmx_min_rows < kHmxTileRows) and 0 < tokens < kHmxTileRows, else 1.
  double hmx_tile_padding(const models::Op& op) const;
  // One hvx-backend ubatch of `rows` tokens (decode: 1): on the HMX unit when on_hmx(rows), else on HVX.
  double hvx_ubatch_seconds(const models::Work& work, models::DType weight, const std::string& phase,
                            std::int64_t rows) const {
    return on_hmx(rows) ? hmx_seconds(work, phase, hvx_ubatch_slowdown(rows))
                        : hvx_seconds(work, weight, phase, hvx_ubatch_slowdown(rows));
  }
  // Whether a ubatch of `rows` tokens runs its matmuls on HMX (see above).
  bool on_hmx(std::int64_t rows) const { return hmx_min_rows > 0 && hmx_in_build && rows >= hmx_min_rows; }
  // The compute factor of an hvx ubatch of `rows` tokens (decode: 1) against hvx_gemm_efficiency:
  // hmx_clock_slowdown on HMX; on HVX hvx_gemm_efficiency / hvx_matmul_efficiency when that is given, else 1.
  double hvx_ubatch_slowdown(std::int64_t rows) const {
    if (on_hmx(rows)) return hmx_clock_slowdown;
    return hvx_matmul_efficiency > 0 ? hvx_gemm_efficiency / hvx_matmul_efficiency : 1.0;
  }
  // Prefill on HVX in micro-batches of `chunk` tokens (no padding: the runtime's ubatch).
  double hvx_prefill_seconds(const models::CostModel& cost, std::int64_t n_new, std::int64_t n_cached,
                             std::int64_t chunk) const;
  // Prefill on HTP graphs with CPU overlap: per chunk, the NPU runs everything but attention (as
  // chunked_prefill_seconds costs a chunk) and `cpu_seconds` the attention operators; the chunks
  // combine by pipelined_seconds.
  double overlapped_prefill_seconds(const models::CostModel& cost, std::int64_t n_new, std::int64_t n_cached,
                                    std::int64_t chunk,
                                    const std::function<double(const models::Work&)>& cpu_seconds) const;
};

}  // namespace mobisim::devices
