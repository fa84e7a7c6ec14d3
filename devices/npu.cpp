#include "devices/npu.h"

#include "devices/npu_prefill.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "sim/error.h"

namespace mobisim::devices {

ParamSchema NpuSpec::schema() {
  ParamSchema s;
  s.real("peak_tops_int8", std::nullopt, "peak INT8 TOPS (vendor figure)").positive().with_unit("TOPS");
  s.real("peak_tflops_fp16", 0.0, "peak FP16 TFLOP/s (0: half the INT8 figure)").non_negative().with_unit("TFLOP/s");
  s.real("max_utilization", std::nullopt, "fraction of peak reached by long chunks on LLM graphs").range(1e-6, 1.0);
  s.real("half_utilization_chunk", std::nullopt, "chunk length at which half of max_utilization is reached")
      .positive()
      .with_unit("tokens");
  s.real("exec_overhead_ms", std::nullopt, "fixed cost per graph execution").non_negative().with_unit("ms");
  s.real("mem_bandwidth_gbps", std::nullopt, "DRAM bandwidth available to the NPU").positive().with_unit("GB/s");
  s.real("graph_load_ms_per_layer", std::nullopt, "time to load/switch one layer's compiled graph")
      .non_negative()
      .with_unit("ms");
  s.real("active_power_w", std::nullopt, "power while executing").non_negative().with_unit("W");
  s.real("idle_power_w", std::nullopt, "power while idle").non_negative().with_unit("W");
  s.real("hvx_peak_tops_int8", std::nullopt,
         "peak INT8 TOPS of the HVX vector units (contexts x MACs per cycle x 2 x clock); needed only by engines "
         "that run a phase on backend hvx")
      .positive()
      .with_unit("TOPS")
      .optional();
  s.real("hvx_peak_tflops_fp16", std::nullopt, "peak FP16 TFLOP/s of the HVX vector units (float weights on hvx)")
      .positive()
      .with_unit("TFLOP/s")
      .optional();
  s.real("hmx_peak_tflops_fp16", std::nullopt,
         "peak FP16 TFLOP/s of the NPU's HMX matrix unit (one per NPU); needed only by engines whose hvx "
         "prefill runs ubatches on HMX (engine npu.hmx_min_rows)")
      .positive()
      .with_unit("TFLOP/s")
      .optional();
  s.text("source", std::string(""), "where these numbers come from");
  return s;
}

NpuSpec NpuSpec::from_params(const Params& p) {
  NpuSpec n;
  n.peak_tops_int8 = p.real("peak_tops_int8");
  n.peak_tflops_fp16 = p.real("peak_tflops_fp16");
  if (n.peak_tflops_fp16 == 0) n.peak_tflops_fp16 = n.peak_tops_int8 / 2.0;
  n.max_utilization = p.real("max_utilization");
  n.half_utilization_chunk = p.real("half_utilization_chunk");
  n.exec_overhead_ms = p.real("exec_overhead_ms");
  n.mem_bandwidth_gbps = p.real("mem_bandwidth_gbps");
  n.graph_load_ms_per_layer = p.real("graph_load_ms_per_layer");
  n.active_power_w = p.real("active_power_w");
  n.idle_power_w = p.real("idle_power_w");
  if (p.has("hvx_peak_tops_int8")) n.hvx_peak_tops_int8 = p.real("hvx_peak_tops_int8");
  if (p.has("hvx_peak_tflops_fp16")) n.hvx_peak_tflops_fp16 = p.real("hvx_peak_tflops_fp16");
  if (p.has("hmx_peak_tflops_fp16")) n.hmx_peak_tflops_fp16 = p.real("hmx_peak_tflops_fp16");
  return n;
}

double NpuSpec::exec_seconds(const models::Work& work, double chunk, models::DType weight_dtype,
                             double overhead_share) const {
  check(chunk > 1 ? Phase::kPrefill : Phase::kDecode, weight_dtype);
  const bool integer = weight_dtype == models::DType::kInt8 || weight_dtype == models::DType::kInt4 ||
                       weight_dtype == models::DType::kInt6 || weight_dtype == models::DType::kF8;
  const double peak = (integer ? peak_tops_int8 : peak_tflops_fp16) * 1e12;
  const double compute = work.flops() / (peak * utilization(chunk));
  const double memory = work.bytes() / (mem_bandwidth_gbps * 1e9);
  return overhead_share * exec_overhead_ms * 1e-3 + std::max(compute, memory);
}

double NpuSpec::graph_build_seconds(const models::ModelSpec& m) const {
  if (!online_graph_build) return 0.0;
  if (!graph_finalize_ms_per_linear)
    throw ConfigError(fmt::format("device '{}', engine '{}': the NPU graphs are built at run time (npu.graph_build: "
                                  "online) but the engine gives no npu.graph_finalize_ms_per_linear (the finalise "
                                  "time of one linear layer's graph, ms)",
                                  device_name, engine_name));
  if (!graph_finalize_npu_ms_per_linear || !graph_finalize_host_ghz)
    throw ConfigError(fmt::format("device '{}', engine '{}': the NPU graphs are built at run time (npu.graph_build: "
                                  "online) but the engine gives no npu.graph_finalize_npu_ms_per_linear and "
                                  "npu.graph_finalize_host_ghz (the accelerator's share of the finalise time and the "
                                  "measuring phone's prime-core clock)",
                                  device_name, engine_name));
  if (!(host_fastest_core_ghz > 0))
    throw ConfigError(fmt::format("device '{}', engine '{}': the NPU graphs are built at run time on the host CPU, "
                                  "whose speed is scaled by its fastest core's clock, but the device gives no "
                                  "compute.cpu.clusters",
                                  device_name, engine_name));
  const double host_ms = (*graph_finalize_ms_per_linear - *graph_finalize_npu_ms_per_linear) *
                         (*graph_finalize_host_ghz / host_fastest_core_ghz);
  const double linears = static_cast<double>(m.n_layers) * m.linear_layers_per_block();
  return linears * (*graph_finalize_npu_ms_per_linear + host_ms) * 1e-3;
}

models::ModelSpec NpuSpec::graph_model(const models::ModelSpec& m) const {
  if (!graph_weight_dtype) return m;
  models::ModelSpec g = m;
  g.weight_dtype = *graph_weight_dtype;
  g.classifier_dtype.reset();
  g.projection_dtypes.fill(std::nullopt);
  g.weight_group_size = 0;
  return g;
}

double NpuSpec::run_seconds(std::int64_t n_tokens, std::int64_t chunk, const models::Work& work_of_chunk,
                            models::DType weight_dtype) const {
  if (n_tokens <= 0) return 0.0;
  const std::int64_t execs = (n_tokens + chunk - 1) / chunk;
  return static_cast<double>(execs) * exec_seconds(work_of_chunk, static_cast<double>(chunk), weight_dtype);
}

namespace {
bool is_integer(models::DType t) {
  return t == models::DType::kInt8 || t == models::DType::kInt4 || t == models::DType::kInt6 || t == models::DType::kF8;
}
}  // namespace

double NpuSpec::peak_ops(models::DType weight, models::DType activation) const {
  if (!is_integer(weight)) return peak_tflops_fp16 * 1e12;
  return peak_tops_int8 * 1e12 * (is_integer(activation) ? 1.0 : mixed_precision_fraction);
}

double NpuSpec::decode_seconds(const models::Work& w, models::DType weight, models::DType activation) const {
  check(Phase::kDecode, weight);
  if (decode_backend == NpuBackend::kHvx) return hvx_ubatch_seconds(w, weight, "decode", 1);
  const double compute = w.flops() / (peak_ops(weight, activation) * max_utilization);
  const double memory = w.bytes() / (mem_bandwidth_gbps * 1e9 * decode_bandwidth_efficiency);
  return exec_overhead_ms * 1e-3 + std::max(compute, memory);
}

double NpuSpec::chunked_prefill_seconds(const models::CostModel& cost, std::int64_t n_new, std::int64_t n_cached,
                                        std::int64_t chunk) const {
  // A padded chunk computes all `chunk` rows; only the last needs logits (one row).
  return devices::chunked_prefill_seconds(*this, cost, n_new, n_cached, chunk, 1);
}

namespace {

double hvx_chunks_seconds(const NpuSpec& npu, const models::CostModel& cost, std::int64_t n_new, std::int64_t n_cached,
                          std::int64_t chunk, std::int64_t last_logit_tokens) {
  if (n_new <= 0) return 0.0;
  if (chunk <= 0) chunk = n_new;
  const auto& m = cost.spec();
  double s = 0;
  for (std::int64_t done = 0; done < n_new; done += chunk) {
    const std::int64_t n = std::min(chunk, n_new - done);
    const bool last = done + n >= n_new;
    s += npu.hvx_ubatch_seconds(
        cost.prefill(models::PrefillShape{n, n_cached + done, 0, last ? last_logit_tokens : 0}), m.weight_dtype,
        "prefill", n);
  }
  return s;
}

}  // namespace

double chunked_prefill_seconds(const NpuSpec& npu, const models::CostModel& cost, std::int64_t n_new,
                               std::int64_t n_cached, std::int64_t chunk, std::int64_t last_logit_tokens) {
  if (n_new <= 0) return 0.0;
  const auto& m = cost.spec();
  npu.check(Phase::kPrefill, m.weight_dtype);
  if (chunk <= 0) chunk = npu.graph_chunk;
  if (npu.prefill_backend == NpuBackend::kHvx) {
    npu.refuse_static_graph("an hvx prefill (op by op, no graph)");
    return hvx_chunks_seconds(npu, cost, n_new, n_cached, chunk, last_logit_tokens);
  }
  const double peak = npu.peak_ops(m.weight_dtype, m.activation_dtype) * npu.utilization(static_cast<double>(chunk));
  const double bw = npu.mem_bandwidth_gbps * 1e9;
  double s = 0;
  for (std::int64_t done = 0; done < n_new; done += chunk) {
    const bool last = done + chunk >= n_new;
    const std::int64_t logit_rows = npu.graph_logits_all_rows ? chunk : last ? last_logit_tokens : 0;
    const models::Work w =
        cost.prefill(models::PrefillShape{chunk, npu.pass_past_positions(n_cached, done, chunk), 0, logit_rows});
    s += npu.exec_overhead_ms * 1e-3 + std::max(w.flops() / peak, w.bytes() / bw);
  }
  return s;
}

double NpuSpec::work_seconds(const models::Work& w, models::DType weight, models::DType activation) const {
  std::int64_t n = 0;
  for (const auto& op : w.ops) n = std::max(n, op.tokens);
  if (n <= 1) return decode_seconds(w, weight, activation);
  check(Phase::kPrefill, weight);
  if (prefill_backend == NpuBackend::kHvx) return hvx_ubatch_seconds(w, weight, "prefill", n);
  const std::int64_t chunk = std::min<std::int64_t>(graph_chunk, n);
  const std::int64_t execs = (n + chunk - 1) / chunk;
  const double padded = static_cast<double>(execs * chunk) / static_cast<double>(n);
  const double compute = w.flops() * padded / (peak_ops(weight, activation) * utilization(static_cast<double>(chunk)));
  // Weights are read once per execution, everything else once.
  const double bytes = w.bytes() + static_cast<double>(execs - 1) * w.weight_bytes();
  return static_cast<double>(execs) * exec_overhead_ms * 1e-3 + std::max(compute, bytes / (mem_bandwidth_gbps * 1e9));
}

void NpuSpec::refuse_static_graph(const std::string& path) const {
  if (graph_context > 0 || graph_logits_all_rows)
    throw ConfigError(fmt::format("device '{}', engine '{}': static-context graphs (npu.graph_context / npu.graph_logits) "
                                  "are modelled for HTP graph prefill only, not for {}",
                                  device_name, engine_name, path));
}

const char* to_string(NpuBackend b) { return b == NpuBackend::kHvx ? "hvx" : "htp"; }

NpuBackend parse_npu_backend(const std::string& s) {
  if (s == "htp") return NpuBackend::kHtp;
  if (s == "hvx") return NpuBackend::kHvx;
  throw ConfigError(fmt::format("unknown npu backend '{}' (htp: the HTP/HMX matrix engine, hvx: the HVX vector units)", s));
}

double pipelined_seconds(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("pipelined_seconds: stages of different lengths");
  if (a.empty()) return 0.0;
  double t = a.front();                                                       // fill: the first NPU stage
  for (std::size_t i = 1; i < a.size(); ++i) t += std::max(a[i], b[i - 1]);  // steady: NPU i beside CPU i-1
  return t + b.back();                                                        // drain: the last CPU stage
}

double NpuSpec::hvx_peak_ops(models::DType weight, const std::string& phase) const {
  const bool integer = is_integer(weight);
  const double peak = integer ? hvx_peak_tops_int8 : hvx_peak_tflops_fp16;
  if (!(peak > 0))
    throw ConfigError(fmt::format(
        "engine '{}' runs the npu {} on backend hvx, but device '{}' gives no npu.{} (the HVX vector units' peak "
        "for {} weights): add it to the device profile with its source, or run that phase on backend htp",
        engine_name.empty() ? "?" : engine_name, phase, device_name.empty() ? "?" : device_name,
        integer ? "hvx_peak_tops_int8" : "hvx_peak_tflops_fp16", models::to_string(weight)));
  return peak * 1e12;
}

double NpuSpec::hvx_seconds(const models::Work& w, models::DType weight, const std::string& phase,
                            double compute_slowdown) const {
  const double peak = hvx_peak_ops(weight, phase) * hvx_gemm_efficiency / compute_slowdown;
  const double bw = mem_bandwidth_gbps * 1e9 * hvx_bandwidth_efficiency;
  double s = 0;
  for (const auto& op : w.ops) {
    const double op_peak =
        op.dtype && *op.dtype != weight ? hvx_peak_ops(*op.dtype, phase) * hvx_gemm_efficiency / compute_slowdown : peak;
    s += std::max(op.flops / op_peak, op.bytes() / bw) + op.layers * hvx_op_overhead_us * 1e-6;
  }
  return s;
}

double NpuSpec::hmx_peak_ops(const std::string& phase) const {
  if (!(hmx_peak_tflops_fp16 > 0))
    throw ConfigError(fmt::format(
        "engine '{}' runs npu {} ubatches on HMX (npu.hmx_min_rows), but device '{}' gives no "
        "npu.hmx_peak_tflops_fp16 (the HMX unit's peak): add it to the device profile with its source, or set "
        "the engine's npu.hmx_clock to none",
        engine_name.empty() ? "?" : engine_name, phase, device_name.empty() ? "?" : device_name));
  return hmx_peak_tflops_fp16 * 1e12;
}

namespace {
// The operators whose weights are quantised matrices multiplied on HMX (the projections and the LM head).
bool is_hmx_linear(models::OpKind k) {
  using models::OpKind;
  return k == OpKind::kQProj || k == OpKind::kKProj || k == OpKind::kVProj || k == OpKind::kOProj ||
         k == OpKind::kFfnGate || k == OpKind::kFfnUp || k == OpKind::kFfnDown || k == OpKind::kLmHead;
}
}  // namespace

double NpuSpec::hmx_tile_padding(const models::Op& op) const {
  if (hmx_min_rows <= 0 || hmx_min_rows >= kHmxTileRows || !is_hmx_linear(op.kind)) return 1.0;
  if (op.tokens <= 0 || op.tokens >= kHmxTileRows) return 1.0;
  return static_cast<double>(kHmxTileRows) / static_cast<double>(op.tokens);
}

double NpuSpec::hmx_dequant_seconds(const models::Work& w, const std::string& phase) const {
  if (!(hmx_dequant_hvx_cycles_per_tile > 0)) return 0.0;
  double weights = 0;
  // A linear of `tokens` rows does 2 flops per weight per row (models/cost_model.cpp), over all its layers.
  for (const auto& op : w.ops)
    if (is_hmx_linear(op.kind) && op.tokens > 0) weights += op.flops / (2.0 * static_cast<double>(op.tokens));
  const double context_cycles_per_s = hvx_peak_ops(models::DType::kInt8, phase) / kHvxInt8OpsPerContextCycle;
  return weights / kHmxTileWeights * hmx_dequant_hvx_cycles_per_tile / context_cycles_per_s;
}

double NpuSpec::hmx_seconds(const models::Work& w, const std::string& phase, double compute_slowdown) const {
  const double peak = hmx_peak_ops(phase) * hvx_gemm_efficiency / compute_slowdown;
  const double bw = mem_bandwidth_gbps * 1e9 * hvx_bandwidth_efficiency;
  double s = 0;
  for (const auto& op : w.ops)
    s += std::max(op.flops * hmx_tile_padding(op) / peak, op.bytes() / bw) + op.layers * hvx_op_overhead_us * 1e-6;
  return s + hmx_dequant_seconds(w, phase);
}

double NpuSpec::hvx_prefill_seconds(const models::CostModel& cost, std::int64_t n_new, std::int64_t n_cached,
                                    std::int64_t chunk) const {
  return hvx_chunks_seconds(*this, cost, n_new, n_cached, chunk, 1);
}

double NpuSpec::overlapped_prefill_seconds(const models::CostModel& cost, std::int64_t n_new, std::int64_t n_cached,
                                           std::int64_t chunk,
                                           const std::function<double(const models::Work&)>& cpu_seconds) const {
  if (n_new <= 0) return 0.0;
  refuse_static_graph("a prefill overlapped with CPU attention (npu.cpu_overlap)");
  if (chunk <= 0) chunk = graph_chunk;
  const auto& m = cost.spec();
  const double peak = peak_ops(m.weight_dtype, m.activation_dtype) * utilization(static_cast<double>(chunk));
  const double bw = mem_bandwidth_gbps * 1e9;
  std::vector<double> npu_stage, cpu_stage;
  for (std::int64_t done = 0; done < n_new; done += chunk) {
    const bool last = done + chunk >= n_new;
    const models::Work w = cost.prefill(models::PrefillShape{chunk, n_cached + done, 0, last ? 1 : 0});
    models::Work on_npu, on_cpu;
    for (const auto& op : w.ops) (models::is_attention(op.kind) ? on_cpu : on_npu).ops.push_back(op);
    npu_stage.push_back(exec_overhead_ms * 1e-3 + std::max(on_npu.flops() / peak, on_npu.bytes() / bw));
    cpu_stage.push_back(on_cpu.ops.empty() ? 0.0 : cpu_seconds(on_cpu));
  }
  return pipelined_seconds(npu_stage, cpu_stage);
}

}  // namespace mobisim::devices
