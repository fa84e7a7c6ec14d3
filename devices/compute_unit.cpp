#include "devices/compute_unit.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <queue>
#include <cmath>
#include <functional>
#include <span>

#include "sim/error.h"

namespace mobisim::devices {

using models::DType;

ParamSchema ComputeUnitSpec::schema() {
  ParamSchema s;
  s.node("peak_tflops", "peak TFLOP/s (TOPS for integer dtypes) per weight dtype, e.g. {fp32: 0.2, int8: 1.6}");
  s.real("mem_bandwidth_gbps", std::nullopt, "DRAM bandwidth available to this unit").positive().with_unit("GB/s");
  s.real("compute_efficiency", std::nullopt, "achieved fraction of peak on GEMM-like work (batched prefill)")
      .range(1e-6, 1.0);
  s.real("gemv_compute_efficiency", std::nullopt,
         "achieved fraction of peak on single-token operators, e.g. decode (0: same as compute_efficiency)")
      .range(0.0, 1.0);
  s.real("attention_compute_efficiency", 0.0,
         "achieved fraction of peak on the attention operators (scores, softmax, weighted values) at any "
         "width (0: the same as the other operators)")
      .range(0.0, 1.0);
  s.real("bandwidth_efficiency", std::nullopt, "achieved fraction of peak memory bandwidth").range(1e-6, 1.0);
  s.real("call_overhead_us", std::nullopt, "fixed cost per operator per layer (kernel launch, sync)")
      .non_negative()
      .with_unit("us");
  s.real("active_power_w", std::nullopt, "power while busy").non_negative().with_unit("W");
  s.real("idle_power_w", std::nullopt, "power while idle").non_negative().with_unit("W");
  s.real("single_thread_power_w", std::nullopt,
         "power while one thread runs alone (work a runtime does on its calling thread, e.g. sampling); "
         "absent: such work is charged active_power_w")
      .non_negative()
      .with_unit("W")
      .optional();
  s.integer("cores", 1, "cores used (informational)").range(1, 1024);
  s.boolean("dedicated_memory", false,
            "the unit streams from memory of its own (a discrete GPU's GDDR/HBM), not the shared DRAM bus");
  s.node("clusters",
         "CPU clusters, fastest first: [{core: cortex-x4, count: 1, ghz: 3.3, vector_pipes: 4}, ...] (vector_pipes: "
         "128-bit SIMD pipes per core issuing SDOT/SMMLA); used by runtimes with isa_kernels");
  s.text_list("isa", std::nullopt, "CPU ISA features: dotprod, i8mm, bf16, sve, sve2, sme, sme2 (Armv8.2+ extensions)")
      .optional();
  s.text("family", std::nullopt,
         "GPU family: adreno, mali, apple, nvidia (used by runtimes whose GPU kernels are per family, engine gpu.families)")
      .optional();
  s.text("generation", std::nullopt, "GPU generation within its family, e.g. a7x, a8x, valhall-4, apple8").optional();
  s.text("source", std::string(""), "where these numbers come from");
  return s;
}

namespace {
ParamSchema cluster_schema() {
  ParamSchema s;
  s.text("core", std::nullopt, "core name (e.g. cortex-x4, oryon-v2, apple-everest)");
  s.integer("count", std::nullopt, "cores in the cluster").range(1, 256);
  s.real("ghz", std::nullopt, "peak clock").positive().with_unit("GHz");
  s.integer("vector_pipes", std::nullopt, "128-bit SIMD pipes per core that issue SDOT/SMMLA").range(1, 16);
  s.node("issue_per_cycle",
         "per ISA path, instructions one core issues per cycle where that is not one per vector pipe, e.g. "
         "{i8mm: 2} (the core's scheduling model); absent: vector_pipes");
  return s;
}

std::map<std::string, double> parse_issue_per_cycle(const Params& cp, int vector_pipes) {
  std::map<std::string, double> out;
  const YAML::Node n = cp.node("issue_per_cycle");
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsMap()) cp.fail("issue_per_cycle", "expected a mapping ISA path -> instructions per cycle, e.g. {i8mm: 2}");
  for (const auto& kv : n) {
    const std::string path = kv.first.as<std::string>();
    try {
      int8_ops_per_pipe_cycle(path);
    } catch (const ConfigError& e) {
      cp.fail("issue_per_cycle", e.what());
    }
    double v = 0;
    try {
      v = kv.second.as<double>();
    } catch (const YAML::Exception&) {
      cp.fail("issue_per_cycle", fmt::format("issue_per_cycle.{} must be a number", path));
    }
    // More than one per pipe per cycle would need more pipes than the core has: a contradiction, not a rate.
    if (!(v > 0 && v <= vector_pipes))
      cp.fail("issue_per_cycle", fmt::format("issue_per_cycle.{} must be > 0 and at most vector_pipes ({}), got {}",
                                             path, vector_pipes, v));
    out[path] = v;
  }
  return out;
}
}  // namespace

double CpuCluster::instructions_per_cycle(const std::string& isa_path) const {
  const auto it = issue_per_cycle.find(isa_path);
  return it == issue_per_cycle.end() ? vector_pipes : it->second;
}

double int8_ops_per_pipe_cycle(const std::string& isa_path) {
  if (isa_path == "neon") return 16;
  if (isa_path == "dotprod") return 32;
  if (isa_path == "i8mm") return 64;
  throw ConfigError(fmt::format("ISA path '{}' has no int8 peak model (known: neon, dotprod, i8mm)", isa_path));
}

bool ComputeUnitSpec::has_isa(const std::string& feature) const {
  return feature == "neon" ? !clusters.empty() : std::find(isa.begin(), isa.end(), feature) != isa.end();
}

double chunked_throughput(const std::vector<double>& core_rates, int chunks) {
  if (core_rates.empty()) throw ConfigError("chunked_throughput: no cores");
  if (chunks < static_cast<int>(core_rates.size()))
    throw ConfigError(fmt::format("chunked_throughput: {} chunks for {} threads (each thread starts on a chunk of its own)",
                                  chunks, core_rates.size()));
  for (double r : core_rates)
    if (!(r > 0)) throw ConfigError(fmt::format("chunked_throughput: a core rate must be > 0, got {}", r));
  // (time the thread's current chunk ends, thread): the earliest end claims the next chunk.
  using Busy = std::pair<double, std::size_t>;
  std::priority_queue<Busy, std::vector<Busy>, std::greater<>> running;
  for (std::size_t i = 0; i < core_rates.size(); ++i) running.emplace(1.0 / core_rates[i], i);
  int claimed = static_cast<int>(core_rates.size());
  double last_end_s = 0;
  while (!running.empty()) {
    const auto [end_s, thread] = running.top();
    running.pop();
    last_end_s = std::max(last_end_s, end_s);
    if (claimed < chunks) {
      ++claimed;
      running.emplace(end_s + 1.0 / core_rates[thread], thread);
    }
  }
  return chunks / last_end_s;
}

namespace {
// Peak int8 op/s of each of the `threads` fastest cores (0: every core) on `isa_path`, fastest first.
std::vector<double> fastest_core_peaks(const ComputeUnitSpec& u, const std::string& isa_path, int threads) {
  if (u.clusters.empty())
    throw ConfigError(fmt::format("compute unit '{}' gives no clusters (the ISA peak needs cores, clocks and pipes)", u.name));
  const double per_pipe = int8_ops_per_pipe_cycle(isa_path);
  std::vector<double> per_core;
  for (const CpuCluster& c : u.clusters)
    for (int i = 0; i < c.count; ++i) per_core.push_back(c.ghz * 1e9 * c.instructions_per_cycle(isa_path) * per_pipe);
  if (threads > static_cast<int>(per_core.size()))
    throw ConfigError(fmt::format("{} threads on compute unit '{}', which has {} cores", threads, u.name, per_core.size()));
  std::sort(per_core.begin(), per_core.end(), std::greater<>());
  if (threads > 0) per_core.resize(static_cast<std::size_t>(threads));
  return per_core;
}
}  // namespace

double ComputeUnitSpec::isa_peak_ops(const std::string& isa_path, int threads) const {
  const std::vector<double> per_core = fastest_core_peaks(*this, isa_path, threads);
  return std::accumulate(per_core.begin(), per_core.end(), 0.0);
}

double ComputeUnitSpec::isa_chunked_peak_ops(const std::string& isa_path, int threads, int chunks_per_thread) const {
  if (chunks_per_thread <= 0) return isa_peak_ops(isa_path, threads);
  const std::vector<double> per_core = fastest_core_peaks(*this, isa_path, threads);
  // Rates in units of the fastest core keep the chunk times near 1 (the result is scaled back).
  std::vector<double> relative;
  for (double r : per_core) relative.push_back(r / per_core.front());
  return chunked_throughput(relative, chunks_per_thread * static_cast<int>(per_core.size())) * per_core.front();
}

ComputeUnitSpec ComputeUnitSpec::from_params(const std::string& name, const Params& p) {
  ComputeUnitSpec u;
  u.name = name;
  u.mem_bandwidth_gbps = p.real("mem_bandwidth_gbps");
  u.compute_efficiency = p.real("compute_efficiency");
  u.bandwidth_efficiency = p.real("bandwidth_efficiency");
  u.gemv_compute_efficiency = p.real("gemv_compute_efficiency");
  if (u.gemv_compute_efficiency == 0) u.gemv_compute_efficiency = u.compute_efficiency;
  u.attention_compute_efficiency = p.real("attention_compute_efficiency");
  u.call_overhead_us = p.real("call_overhead_us");
  u.active_power_w = p.real("active_power_w");
  u.idle_power_w = p.real("idle_power_w");
  if (p.has("single_thread_power_w")) u.single_thread_power_w = p.real("single_thread_power_w");
  u.dedicated_memory = p.boolean("dedicated_memory");
  u.cores = static_cast<int>(p.integer("cores"));
  u.peak_tflops = parse_positive_per_dtype(p, "peak_tflops", "TFLOP/s, e.g. {fp16: 1.0}");
  if (u.peak_tflops.empty()) p.fail("peak_tflops", "expected a mapping dtype -> TFLOP/s, e.g. {fp16: 1.0}");
  if (p.has("isa")) u.isa = p.text_list("isa");
  if (p.has("family")) u.family = p.text("family");
  if (p.has("generation")) u.generation = p.text("generation");
  if (const YAML::Node n = p.node("clusters"); n.IsDefined() && !n.IsNull()) {
    if (!n.IsSequence() || n.size() == 0)
      p.fail("clusters", "expected a list of clusters [{core, count, ghz, vector_pipes}, ...]");
    ParamSchema cs = cluster_schema();
    for (std::size_t i = 0; i < n.size(); ++i) {
      const Params cp(n[i], cs, p.source().child("clusters").element(i), {});
      const int pipes = static_cast<int>(cp.integer("vector_pipes"));
      u.clusters.push_back(CpuCluster{cp.text("core"), static_cast<int>(cp.integer("count")), cp.real("ghz"), pipes,
                                      parse_issue_per_cycle(cp, pipes)});
    }
  }
  return u;
}

std::map<DType, double> parse_positive_per_dtype(const Params& p, const std::string& key, const std::string& what) {
  std::map<DType, double> out;
  const YAML::Node n = p.node(key);
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsMap()) p.fail(key, fmt::format("expected a mapping dtype -> {}", what));
  for (const auto& kv : n) {
    const std::string dt = kv.first.as<std::string>();
    DType t;
    try {
      t = models::parse_dtype(dt);
    } catch (const ConfigError& e) {
      p.fail(key, e.what());
    }
    double v = 0;
    try {
      v = kv.second.as<double>();
    } catch (const YAML::Exception&) {
      p.fail(key, fmt::format("{}.{} must be a number", key, dt));
    }
    if (!(v > 0 && std::isfinite(v))) p.fail(key, fmt::format("{}.{} must be a number > 0, got {}", key, dt, v));
    out[t] = v;
  }
  return out;
}

double ComputeUnitSpec::single_thread_power() const {
  if (!single_thread_power_w)
    throw ConfigError(fmt::format(
        "compute unit '{}' gives no single_thread_power_w (W: one thread running alone, which work on a runtime's "
        "calling thread draws -- sampling, retrieval drafting, polling an NPU for completion); add it to the device "
        "profile's compute.{} with its source (its active_power_w is the runtime's thread pool, no stand-in)",
        name, name));
  return *single_thread_power_w;
}

namespace {
// Fallback chain: the arithmetic a unit actually runs for a dtype it has no peak for.
std::span<const DType> peak_fallback_chain(DType t) {
  static constexpr DType kInt4[] = {DType::kInt4, DType::kInt8, DType::kF16, DType::kF32};
  static constexpr DType kInt6[] = {DType::kInt6, DType::kInt8, DType::kF16, DType::kF32};
  static constexpr DType kF8[] = {DType::kF8, DType::kInt8, DType::kF16, DType::kF32};
  static constexpr DType kInt8[] = {DType::kInt8, DType::kF16, DType::kF32};
  static constexpr DType kBF16[] = {DType::kBF16, DType::kF16, DType::kF32};
  static constexpr DType kF16[] = {DType::kF16, DType::kF32};
  static constexpr DType kF32[] = {DType::kF32};
  switch (t) {
    case DType::kInt4: return kInt4;
    case DType::kInt6: return kInt6;
    case DType::kF8: return kF8;
    case DType::kInt8: return kInt8;
    case DType::kBF16: return kBF16;
    case DType::kF16: return kF16;
    case DType::kF32: return kF32;
  }
  throw Error("internal: unknown dtype");
}
}  // namespace

double ComputeUnitSpec::peak_flops(DType t) const {
  for (DType c : peak_fallback_chain(t)) {
    auto it = peak_tflops.find(c);
    if (it != peak_tflops.end()) return it->second * 1e12;
  }
  throw ConfigError(fmt::format("compute unit '{}' has no peak_tflops usable for dtype {}", name, to_string(t)));
}

const char* to_string(Phase p) { return p == Phase::kPrefill ? "prefill" : "decode"; }

void EngineGaps::check(Phase phase, DType dtype) const {
  if (const std::string* m = find(phase, dtype)) throw ConfigError(*m);
}

double ComputeUnitSpec::efficiency(DType t, bool single_token) const {
  if (gaps) gaps->check(single_token ? Phase::kDecode : Phase::kPrefill, t);
  return raw_efficiency(t, single_token);
}

double ComputeUnitSpec::raw_efficiency(DType t, bool single_token) const {
  const auto& by_dtype = single_token ? gemv_efficiency_by_dtype : efficiency_by_dtype;
  const double cost = kernel_cost(t);
  if (auto it = by_dtype.find(t); it != by_dtype.end()) return it->second / cost;
  return (single_token ? gemv_compute_efficiency : compute_efficiency) / cost;
}

double ComputeUnitSpec::kernel_cost(DType t) const {
  auto it = kernel_cost_by_dtype.find(t);
  return it == kernel_cost_by_dtype.end() ? 1.0 : it->second;
}

double ComputeUnitSpec::bandwidth_efficiency_for(DType t) const {
  if (auto it = bandwidth_efficiency_by_dtype.find(t); it != bandwidth_efficiency_by_dtype.end()) return it->second;
  return bandwidth_efficiency;
}

// The roofline terms that depend only on the unit and the dtype, looked up once per Work rather
// than once per operator (the same values, so the same sums).
// An engine's gap for this dtype (single-token or batched work) is raised by the first operator that
// needs it, so decode-only work never asks for a prefill value.
struct ComputeUnitSpec::Roofline {
  const ComputeUnitSpec& unit;
  DType dtype;
  double peak, gemv_efficiency, batched_efficiency, attention_efficiency, bandwidth, overhead_s;
  const std::string *gemv_gap = nullptr, *batched_gap = nullptr;
  Roofline(const ComputeUnitSpec& u, DType t)
      : unit(u),
        dtype(t),
        peak(u.peak_flops(t)),
        gemv_efficiency(u.raw_efficiency(t, true)),
        batched_efficiency(u.raw_efficiency(t, false)),
        attention_efficiency(u.attention_compute_efficiency),
        bandwidth(u.mem_bandwidth_gbps * 1e9 * u.bandwidth_efficiency_for(t)),
        overhead_s(u.call_overhead_us * 1e-6) {
    if (u.gaps) {
      gemv_gap = u.gaps->find(Phase::kDecode, t);
      batched_gap = u.gaps->find(Phase::kPrefill, t);
    }
  }
  double op_seconds(const models::Op& op) const {
    if (const std::string* gap = op.tokens == 1 ? gemv_gap : batched_gap) throw ConfigError(*gap);
    const double eff = attention_efficiency > 0 && models::is_attention(op.kind) ? attention_efficiency
                       : op.tokens == 1                                         ? gemv_efficiency
                                                                                : batched_efficiency;
    const double compute = op.flops / (peak * eff);
    return std::max(compute, memory_seconds(op)) + overhead_s * op.layers;
  }
  // The LM head's weights at the runtime's classifier rate for their stored dtype, when it gives one.
  double memory_seconds(const models::Op& op) const {
    if (op.kind == models::OpKind::kLmHead) {
      const auto it = unit.lm_head_bandwidth_efficiency_by_dtype.find(op.stored_dtype.value_or(dtype));
      if (it != unit.lm_head_bandwidth_efficiency_by_dtype.end())
        return op.weight_bytes / (unit.mem_bandwidth_gbps * 1e9 * it->second) + (op.bytes() - op.weight_bytes) / bandwidth;
    }
    return op.bytes() / bandwidth;
  }
};

double ComputeUnitSpec::op_seconds(const models::Op& op, DType dtype) const {
  return Roofline(*this, op.dtype.value_or(dtype)).op_seconds(op);
}

double ComputeUnitSpec::seconds(const models::Work& w, DType dtype) const {
  if (w.ops.empty()) return 0.0;
  const Roofline roofline(*this, dtype);
  double s = 0;
  for (const auto& op : w.ops)
    s += op.dtype && *op.dtype != dtype ? Roofline(*this, *op.dtype).op_seconds(op) : roofline.op_seconds(op);
  return s;
}

double ComputeUnitSpec::copy_seconds(double bytes) const {
  // A copy reads and writes every byte.
  return 2.0 * bytes / (mem_bandwidth_gbps * 1e9 * bandwidth_efficiency);
}

}  // namespace mobisim::devices
