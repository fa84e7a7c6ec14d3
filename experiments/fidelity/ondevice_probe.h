#pragma once
// The "ondevice" fidelity probe: mobisim's throughput (or latency) of one phase of one model on one
// unit of one phone under one runtime, straight from the cost model and the device + engine
// profiles, to set beside a published on-device measurement (experiments/published/ondevice_*.yaml).
//
//   probe: {impl: ondevice, device: oneplus-12, engine: llama.cpp, model: qwen2.5-1.5b,
//           unit: cpu, phase: prefill, tokens: 512, dtype: int4, metric: tokens_per_s}
//
//   prefill  `tokens` prompt tokens from an empty cache; tokens_per_s = tokens / time, ms = time.
//            On the npu: chunks of `chunk` tokens (default: the engine's graph_chunk), each padded
//            and attending to the chunks before it. An engine with npu.cpu_overlap runs each chunk's
//            attention on the CPU (float) beside the next chunk's NPU work (NpuSpec::
//            overlapped_prefill_seconds); an engine with npu.prefill_backend hvx runs the prompt op by op on
//            the HVX units in ubatches of `chunk` tokens (NpuSpec::hvx_prefill_seconds).
//            On the npu every phase is costed on the weights as the runtime's graphs hold them
//            (engine npu.graph_weight_dtype, NpuSpec::graph_model; unset: the probe's dtypes).
//            graphs: online charges the CPU time of building and finalising the graphs at run time
//            (NpuSpec::graph_build_seconds) before the chunks, as a runtime that builds them when it first
//            runs the prompt's shape does inside the timed prefill (MNN's online QNN mode, mllm v1's first
//            chunk); offline leaves it out (graphs compiled beforehand or built in an untimed warm-up);
//            absent: the engine's npu.graph_build. Only for an npu prefill.
//            hmx_clock: max | lowest | none, the HMX clock corner the measured build voted for (engine
//            npu.hmx_clock; ubatches of npu.hmx_min_rows tokens or more run their compute slower by
//            npu.hmx_max_corner_speedup at the lowest corner; none: a build without HMX, every matmul on
//            HVX at npu.hvx_matmul_efficiency, devices/npu.h). Only for an npu prefill.
//            context (npu prefill): the measured export's static KV length, every pass reads it (engine
//            npu.graph_context, devices/npu.h); graph_logits: last | all, the LM-head rows each of its passes
//            computes (engine npu.graph_logits). Absent: the engine's.
//   decode   one token after `context` tokens (default: `tokens`); tokens_per_s = 1 / time, ms = time.
//   verify   npu only: one verification of a `tokens`-token draft after `context` tokens (default 0)
//            on a graph of `chunk` tokens, as the speculative-decoding policies cost it
//            (policies/specdec: npu_verify_split's NPU part with lm_head_unit: npu): padded executions
//            of the linear layers with logits for every row, since each draft token is checked.
//            Attention is left out: the policies run it on the CPU (mllm, CoordGen footnote 2), beside
//            this NPU time. The head stays in the graphs here although the policies' default
//            (lm_head_unit: cpu, mllm) runs it on the CPU: device.npu.half_utilization_chunk is fitted
//            on this phase (Figure 6's 5.7 ms/token) with the head in; taking it out refits that value
//            (redmi-k70-pro: 94.7 instead of the committed one), a calibration left to decide
//            (docs/coordgen.md, "LM head on the CPU").
//            tokens_per_s = tokens / time, ms = time.
//   dtype / activation_dtype override the model profile's weight / activation dtypes (the published
//   run's quantisation, e.g. int4 for Q4_0 / q4f16 / w4a16); group_size and classifier_dtype
//   complete it where the scheme says (ExecuTorch SpinQuant: int4 in groups of 32, 8-bit classifier),
//   since decode streams the scales and the classifier with the weights; scale_dtype is how the run
//   stored those scales (fp32 unless said: QNN's blockwise expansion, ExecuTorch's 16a4w_block, keeps
//   a 4-bit block scale in 8-bit storage, so int8). lora_rank / lora_dtype add
//   the adapters a scheme keeps beside its quantised linears (ExecuTorch QAT+LoRA: `-lora 16`,
//   exported with `-d fp32`), which every token streams and computes too. linear_dtypes names the
//   projections a recipe stores at another dtype ({v_proj: int6, ffn_down: int6}: mllm's Q4_K files).
//   cpu_kernels / threads say how the measured build ran on the CPU, where its source shows it: the
//   engine's cpu kernel class it used (e.g. llama.cpp `vec_dot` when the weights stayed out of ggml's
//   CPU_REPACK buffer) and the app's thread count; an engine without that class (or without
//   isa_kernels, for threads) is a ConfigError. gpu_kernels names the engine's gpu kernel class the
//   measured build ran, where its source dates the build or names the weight layout (ExecuTorch Vulkan's
//   q4gsw GEMM of 2026-06, MLC's q4f16_1 vs q4f16_0 layouts); a class the device's GPU family of that
//   engine does not give is a ConfigError.
//   cpu_isa_detected lists the CPU features the measured build used, where its source shows that it missed one
//   the chip has: those its own run-time detection reported (MNN 2.8.0 on iOS read the A16's cpufamily and set
//   no i8mm, so its int8 GEMMs ran SDOT), or those it was compiled for where the kernels are chosen at compile
//   time (ggml of 2024: the SMMLA kernels exist only under __ARM_FEATURE_MATMUL_INT8, and llama.cpp's Android
//   build instructions of the time gave -march=armv8.4a+dotprod; docs/cpu_isa_sources.md). The engine then
//   picks its first isa_kernels path among these instead of among the device's compute.cpu.isa. A feature the
//   device's isa does not list is a ConfigError (a build cannot use what the chip lacks), and so is the key
//   with any unit but cpu.
#include <cstdint>
#include <string>
#include <vector>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/fidelity/probe.h"
#include "models/model_spec.h"
#include "sim/params.h"

namespace mobisim::fidelity {

struct OnDeviceQuery {
  std::string device, engine = devices::kDefaultEngine, model, unit, phase, metric = "tokens_per_s";
  std::int64_t tokens = 0, context = -1, chunk = 0;
  std::string dtype, activation_dtype, kv_dtype, classifier_dtype, lora_dtype;  // "": the model profile's
  std::string scale_dtype;  // storage of a group's scale (with group_size); "": the model profile's
  std::int64_t group_size = 0, lora_rank = 0;                                    // 0: the model profile's
  YAML::Node linear_dtypes;  // {projection: dtype} (models/model_spec.h); undefined: the model profile's
  std::string cpu_kernels;   // the engine's cpu kernel class the measured build ran ("": the engine's `kernels`)
  std::string gpu_kernels;   // the engine's gpu kernel class the measured build ran ("": the engine's gpu `kernels`)
  std::int64_t threads = 0;  // the measured run's CPU thread count (0: the engine's `threads`)
  std::vector<std::string> cpu_isa_detected;  // CPU features the measured build detected (empty: the device's isa)
  std::string runtime;       // the engine's runtime path the measured run used (engine `runtimes`; "": the profile as it is)
  std::string graphs;        // npu prefill: online | offline, when the measured run's graphs were built ("": the engine's)
  std::string hmx_clock;     // npu prefill: max | lowest | none, the HMX clock corner of the measured build ("": the engine's)
  std::string graph_logits;  // npu prefill: last | all, the LM-head rows each pass of the measured export computes ("": the engine's)
  // unit `storage`, phase `read`: requests of `request_kb` KB with `queue_depth` of them kept outstanding
  // (0: the storage's own queue_depth); metric mb_per_s (StorageSpec::read_bps) or ms per request.
  double request_kb = 0;
  std::int64_t queue_depth = 0;
};

// The storage read throughput (MB/s) or time per request (ms, by Little's law: depth x size / throughput)
// of `q` (unit storage) on `device` (engine applied by the caller: its read command overhead counts).
double storage_prediction(const OnDeviceQuery& q, const devices::DeviceProfile& device);

// The prediction for `q` with `overrides` ("device.KEY=V", "engine.KEY=V", "model.KEY=V") applied
// to the built-in (or given) profiles. Throws ConfigError on an unknown profile, path or value.
double ondevice_prediction(const OnDeviceQuery& q, const std::vector<std::string>& overrides = {});
// The same for already loaded profiles (engine applied by the caller).
double ondevice_prediction(const OnDeviceQuery& q, const devices::DeviceProfile& device, const models::ModelSpec& model);

class OnDeviceProbe : public Probe {
 public:
  explicit OnDeviceProbe(const Params& p);
  static ParamSchema schema();
  double evaluate(const ProbeContext& context) const override;
  const OnDeviceQuery& query() const { return q_; }

 private:
  OnDeviceQuery q_;
};

}  // namespace mobisim::fidelity
