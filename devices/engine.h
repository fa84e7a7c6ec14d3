#pragma once
// An inference engine (runtime): mllm, llama.cpp, MNN, MLC-LLM, QNN (Qualcomm Genie / AI Hub), ExecuTorch.
//
// The same phone runs the same model at very different speeds under different runtimes (kernels,
// quantisation schemes, threading, graph compilation). An engine profile (configs/engines/*.yaml)
// holds what depends on the runtime rather than on the silicon, per unit and phase:
//
//   cpu / gpu:  prefill_efficiency   fraction of the unit's peak on batched (GEMM) work, a number or
//                                    a mapping per weight dtype ({int4: 0.2, fp16: 0.1})
//               decode_efficiency    the same for single-token (GEMV) work
//               bandwidth_efficiency achieved fraction of DRAM bandwidth, a number or a mapping per
//                                    weight dtype
//               call_overhead_us     fixed cost per operator per layer
//               lm_head_bandwidth_efficiency  {dtype: fraction}: the LM head's GEMV rate on DRAM bandwidth when
//                                    its weights are stored at that dtype and the runtime runs another kernel
//                                    for it (e.g. llama.cpp's flat K-quant GEMV for a vocab-scale Q6_K classifier)
//               kernel_cost          {dtype: factor}: the runtime's kernels for a weight dtype take that many
//                                    times longer than the unit's rate (a per-projection recipe dtype)
//   gpu only:   families             {family: {prefill_efficiency, decode_efficiency, bandwidth_efficiency,
//                                    call_overhead_us, kernel_cost}}: the runtime's kernels per GPU family
//                                    (adreno, mali, apple): one efficiency per kernel class (weight dtype
//                                    and phase), applied to each SoC's published peaks. A device whose
//                                    compute.gpu.family is absent or not listed cannot run them:
//                                    ConfigError naming device, engine, family and key, where first needed.
//                                    What ran is recorded in the result (`derived_from_soc`). A family may
//                                    give kernel_classes {CLASS: {kernel values}} (builds or weight layouts
//                                    whose GEMMs differ, e.g. ExecuTorch Vulkan before/after its 2026 q4gsw
//                                    GEMM): the gpu unit's `kernels` names the one a run uses (ondevice probe:
//                                    `gpu_kernels`), and the family's efficiencies are then per class only.
//                                    A family block may hold `generations: {GEN: {kernel values}}`, laid
//                                    over the family's on a GPU whose compute.gpu.generation is GEN.
//   cpu only:   isa_kernels          the ISA paths of the runtime's integer-weight kernels, best first
//                                    ([i8mm, dotprod]): with it, the prefill/decode efficiency it gives for
//                                    int4, int6 and int8 weights is a fraction of the SoC's ISA peak for the
//                                    first path the device's CPU has (`isa`), on `threads` cores (fastest
//                                    first; ComputeUnitSpec::isa_peak_ops), not of the device's peak_tflops.
//                                    A device without `clusters`/`isa` cannot run those: ConfigError naming
//                                    device, engine and key, where the value is first needed.
//               threads              the runtime's thread count: a number or `all` (every core)
//               kernel_classes       {CLASS: {prefill_efficiency, decode_efficiency, ...}} or {CLASS: {relative_to:
//                                    BASE, speedup: {dtype: ratio}}}: the runtime's integer-matmul kernel paths
//                                    (llama.cpp: `repack`, the interleaved GEMMs of ggml-cpu's CPU_REPACK buffer,
//                                    and `vec_dot`, the row-by-row dot products of weights left in the plain CPU
//                                    buffer). A relative class's efficiencies are BASE's times `speedup` (a measured
//                                    ratio of the two paths' GEMM rates), for the dtypes `speedup` names only.
//                                    With classes the efficiencies are per class (none at unit level), so a dtype
//                                    a class does not give is a gap, never another class's value.
//               kernels              the class a run uses (a probe may name another: ondevice `cpu_kernels`)
//               matmul_chunks_per_thread  (a class's or the unit's; with isa_kernels) each matmul is cut into
//                                    threads x N equal chunks the threads claim one at a time: the ISA peak is
//                                    then the work over the time the last chunk ends on the threads' cores
//                                    (a slow core that claims a late chunk holds the matmul back), not the
//                                    sum of the cores' peaks (ComputeUnitSpec::isa_chunked_peak_ops)
//   npu:        max_utilization, half_utilization_chunk, exec_overhead_ms, graph_chunk,
//               decode_bandwidth_efficiency, mixed_precision_fraction (see devices/npu.h)
//               prefill_backend, decode_backend (htp | hvx), hvx_gemm_efficiency, hvx_bandwidth_efficiency,
//               hvx_op_overhead_us, cpu_overlap (backends and overlap, devices/npu.h),
//               hmx_min_rows, hmx_clock (max | lowest | none), hmx_max_corner_speedup (HMX ubatches of an hvx
//               prefill and the build's HMX clock corner, devices/npu.h), hvx_matmul_efficiency (the
//               matmuls HMX does not take; required with hmx_min_rows or hmx_clock none)
//               hmx_dequant_hvx_cycles_per_tile (HVX dequantisation of each weight tile before HMX, npu.h)
//               graph_weight_dtype (the dtype the NPU graphs hold the weights in, devices/npu.h; stored:
//               the model's own, e.g. a runtime path over an engine whose graphs dequantise)
//               graph_build (offline | online: graphs finalised on the phone inside the first request of a
//               shape) and graph_finalize_ms_per_linear (required when online; devices/npu.h)
//   storage:    read_command_overhead_us  host time per read command of the runtime's loader
//               load_ns_per_byte          host time per byte it loads (conversion, copies)
//               (devices/storage.h)
//
// No silent fallback: every (unit, phase, weight dtype) a run can select needs each of its values
// (cpu/gpu: the phase's efficiency for that dtype, bandwidth_efficiency for that dtype,
// call_overhead_us; npu: the phase's curve, see engine_npu_keys) from the engine profile, or the
// profile says by name that it takes the device profile's (mllm-fitted) value, with a reason:
//
//   inherit_device:                 # selector -> why the device's value stands for this runtime
//     cpu: "..."                    # every phase and dtype of unit cpu
//     gpu.decode: "..."             # one phase of one unit
//     cpu.prefill.int6: "..."       # one phase, one weight dtype
//     all: "..."                    # every unit (mllm: the device profiles were fitted to it)
//
// Anything else is a ConfigError naming the engine, unit, phase, dtype, missing keys and file, raised
// where the value is first needed (EngineGaps below). What was inherited is recorded in the result
// (attribute `inherited_from_device`). `base: NAME` inherits another engine profile, as device
// profiles do (inherit_device entries merge).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "devices/device.h"
#include "models/model_spec.h"
#include "sim/params.h"

namespace mobisim::devices {

// A value that may depend on the weight dtype: `fallback` unless `by_dtype` names the dtype.
struct PerDtype {
  std::optional<double> fallback;
  std::map<models::DType, double> by_dtype;
  bool empty() const { return !fallback && by_dtype.empty(); }
};

// The values of a runtime's kernels on a unit (or on one GPU family of it).
struct EngineKernelValues {
  PerDtype prefill_efficiency, decode_efficiency, bandwidth_efficiency;
  std::optional<double> call_overhead_us;
  std::map<models::DType, double> kernel_cost;  // per weight dtype: time factor of its kernels (compute_unit.h)
  // per stored dtype of the LM head's weights: the fraction of DRAM bandwidth its classifier GEMV reaches
  // when the runtime runs another kernel for it (compute_unit.h lm_head_bandwidth_efficiency_by_dtype)
  std::map<models::DType, double> lm_head_bandwidth_efficiency;
  // cpu with isa_kernels: each matmul is cut into threads x this many equal chunks that the threads claim
  // one at a time (ComputeUnitSpec::isa_chunked_peak_ops); absent: the work follows the cores' peaks.
  std::optional<int> matmul_chunks_per_thread;
  // These values, then `over`'s wherever it gives one (per dtype: `over`'s dtypes replace these).
  EngineKernelValues overlaid_by(const EngineKernelValues& over) const;
};

struct EngineUnitSpec : EngineKernelValues {
  std::vector<std::string> isa_kernels;  // cpu: ISA paths of its integer kernels, best first (empty: none)
  int threads = 0;                       // with isa_kernels: threads (0: every core)
  // cpu: the runtime's kernel classes and the one this run uses; the unit's efficiencies above are that
  // class's (resolved when the profile is read, EngineProfile::from_yaml).
  std::map<std::string, EngineKernelValues> kernel_classes;
  std::string kernels;
  // gpu: the runtime's kernels per GPU family (`families: {adreno: {...}}`); non-empty: a device runs the
  // values of its GPU's family (compute.gpu.family) over the ones above, and a GPU of another family, or
  // one without a family, has none of them: every value is a gap there, inherit_device or not (a family
  // listed with an empty block takes what inherit_device names from the device, recorded).
  std::map<std::string, EngineKernelValues> families;
  // gpu: the kernel class (`kernels`) each family giving kernel_classes runs, resolved into `families` above.
  std::map<std::string, std::string> family_kernel_class;
  // gpu: values for one generation of a family (`families: {adreno: {generations: {a7x: {...}}}}`), laid over
  // the family's on a GPU of that generation (compute.gpu.generation): a driver compiler or a kernel choice
  // that only that generation has. Keyed by {family, generation}.
  std::map<std::pair<std::string, std::string>, EngineKernelValues> generations;
};

// engine npu.graph_weight_dtype value that keeps the model's own weights (a runtime path laid over an
// engine whose graphs dequantise them, e.g. MNN's Hexagon backend over its QNN backend).
inline constexpr const char* kGraphWeightsAsStored = "stored";

struct EngineNpuSpec {
  std::optional<double> max_utilization, half_utilization_chunk, exec_overhead_ms, graph_chunk,
      decode_bandwidth_efficiency, mixed_precision_fraction;
  // NPU backends per phase and the runtime's HVX kernel-class efficiencies; CPU+NPU overlap (npu.h).
  std::optional<std::string> prefill_backend, decode_backend;
  std::optional<double> hvx_gemm_efficiency, hvx_bandwidth_efficiency, hvx_op_overhead_us;
  // HMX matmuls inside the hvx prefill (llama.cpp's ggml-hexagon from b8475): rows from which a matmul runs
  // on HMX, the build's HMX clock corner (max | lowest) and the measured max/lowest throughput ratio (npu.h).
  std::optional<std::int64_t> hmx_min_rows;
  std::optional<std::string> hmx_clock;
  std::optional<double> hmx_max_corner_speedup;
  // The share of the HVX peak of the matmuls that stay on HVX beside HMX (fewer rows, decode, builds
  // without HMX: hmx_clock none).
  std::optional<double> hvx_matmul_efficiency;
  // HVX context-cycles per 32 x 32 weight tile dequantised before HMX (npu.h; MNN's Hexagon backend).
  std::optional<double> hmx_dequant_hvx_cycles_per_tile;
  std::optional<bool> cpu_overlap;
  // Static-context prefill graphs (npu.h): the KV length every pass reads, and last | all logit rows.
  std::optional<std::int64_t> graph_context;
  std::optional<std::string> graph_logits;
  // The dtype the runtime's NPU graphs hold the linear weights in, whatever the model file stores
  // (NpuSpec::graph_model; e.g. MNN's QNN backend dequantises asymmetric int4 weights to fp16); "stored"
  // (kGraphWeightsAsStored): the model's own, for a runtime path that keeps the file's weights.
  std::optional<std::string> graph_weight_dtype;
  // offline | online (NpuSpec::graph_build_seconds), and the finalise time per linear layer (ms) on the
  // measuring phone, the accelerator's share of it (ms), and that phone's prime-core clock (GHz).
  std::optional<std::string> graph_build;
  std::optional<double> graph_finalize_ms_per_linear;
  std::optional<double> graph_finalize_npu_ms_per_linear;
  std::optional<double> graph_finalize_host_ghz;
};

struct EngineStorageSpec {
  std::optional<double> read_command_overhead_us, load_ns_per_byte;
};

struct EngineProfile {
  std::string name, description, origin;
  std::map<std::string, EngineUnitSpec> units;  // "cpu", "gpu": applied to the device unit of that name
  EngineNpuSpec npu;
  EngineStorageSpec storage;
  // `inherit_device`: selector ("all", "UNIT", "UNIT.PHASE", "UNIT.PHASE.DTYPE") -> reason.
  std::map<std::string, std::string> inherit_device;
  // The reason an (unit, phase, dtype) takes the device's values, or null when not inherited (the most
  // specific selector wins).
  const std::string* inherit_reason(const std::string& unit, Phase phase, models::DType dtype) const;
  YAML::Node resolved;  // every given field (bases expanded), stored with results

  static EngineProfile from_yaml(const YAML::Node& root, const ConfigSource& source);
  // The device as this engine runs it: the engine's values replace the device profile's; a value the
  // engine neither sets nor inherits is a gap (EngineGaps: a ConfigError when a run needs it); what is
  // inherited is listed in DeviceProfile::inherited_from_device.
  DeviceProfile apply(const DeviceProfile& device) const;
};

inline constexpr const char* kDefaultEngine = "mllm";

// An engine profile's YAML with its runtime path `runtime` laid over it (`runtimes: {NAME: {cpu/gpu/npu}}`,
// e.g. mllm's QNN-AOT runtime): every key the runtime block gives replaces the profile's, and `runtimes`
// is dropped. The profile's `base:` must already be expanded if the block lives in a base. An engine without
// that runtime: ConfigError naming the engine and the key.
YAML::Node with_engine_runtime(const YAML::Node& engine_yaml, const std::string& runtime);

// An engine: a built-in name, a YAML path, or a mapping (optionally `base: NAME` plus overrides).
EngineProfile load_engine_profile(const std::string& name_or_path);
EngineProfile load_engine_profile(const YAML::Node& node, const ConfigSource& source);
std::vector<std::string> builtin_engine_names();
// The fields of an engine profile, section by section (for `mobisim list engines`).
std::vector<ProfileSection> engine_profile_schema();

// The NPU keys an engine must set (or inherit) for a phase and weight dtype.
std::vector<std::string> engine_npu_keys(Phase phase, models::DType dtype);

// Records `device.inherited_from_device` in the run's collector (ConfigSource::inherited), if any.
void record_inherited(const DeviceProfile& device, const ConfigSource& source);

// The `engine` key every experiment driver accepts (default mllm).
void add_engine_param(ParamSchema& schema);
// The experiment's `engine` (absent: mllm, which changes nothing).
EngineProfile experiment_engine(const Params& p);
// Loads `device` and applies the experiment's `engine` (absent: mllm, which changes nothing); records
// what it inherits from the device profile in the run's result (record_inherited).
DeviceProfile load_device_for_engine(const Params& p, const std::string& device_key = "device");
// The resolved engine of an experiment's parameters (for resolved_config).
YAML::Node resolved_engine(const Params& p);
// `config` with `engine` set right after its `device` key (or last), whether or not it had one, so
// that a stored configuration re-runs to byte-identical results.
YAML::Node with_engine(const YAML::Node& config, const YAML::Node& engine);

}  // namespace mobisim::devices
