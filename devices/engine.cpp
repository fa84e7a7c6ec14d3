#include "devices/engine.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/builtin_configs.h"
#include "sim/error.h"

namespace mobisim::devices {

namespace {

ParamSchema engine_top_schema() {
  ParamSchema s;
  s.text("base", std::string(""), "inherit every field of this engine profile (built-in name or YAML path), then override");
  s.text("name", std::nullopt, "engine name");
  s.text("description", std::string(""), "what this runtime is and which version/backends the numbers describe");
  s.text("source", std::string(""), "where these numbers come from (fitted points, papers)");
  s.node("cpu", "the runtime on the device's `cpu` unit");
  s.node("gpu", "the runtime on the device's `gpu` unit");
  s.node("npu", "the runtime on the device's npu");
  s.node("storage", "the runtime's reads from the device's storage");
  s.node("inherit_device",
         "what this runtime takes from the device profile (mllm-fitted values) instead of values of its own, "
         "{selector: reason}: selector `all`, `UNIT` (cpu, gpu, npu, ...), `UNIT.PHASE` (prefill, decode) or "
         "`UNIT.PHASE.DTYPE` (e.g. cpu.prefill.int6); a value neither set nor inherited is an error when a run needs it");
  s.node("runtimes",
         "runtime paths of this engine with values of their own, {NAME: {cpu/gpu/npu: {...}}}: a run (an on-device "
         "probe's `runtime: NAME`) lays that block over the profile; runs naming none use the profile as it is");
  return s;
}

ParamSchema engine_storage_schema() {
  ParamSchema s;
  s.real("read_command_overhead_us", std::nullopt,
         "host time per read command of the runtime's loader, serial with the storage controller")
      .non_negative()
      .with_unit("us")
      .optional();
  s.real("load_ns_per_byte", std::nullopt,
         "host time per byte the runtime loads: turning read bytes into its tensors (conversion, copies)")
      .non_negative()
      .with_unit("ns")
      .optional();
  s.text("source", std::string(""), "where these numbers come from");
  return s;
}

// The keys of a runtime's kernel values on a unit (or on one GPU family of it).
ParamSchema engine_kernel_values_schema() {
  ParamSchema s;
  s.node("prefill_efficiency", "fraction of peak on batched (GEMM) work: a number, or {dtype: number, ...} per weight dtype");
  s.node("decode_efficiency", "fraction of peak on single-token (GEMV) work: a number or a mapping per weight dtype");
  s.node("bandwidth_efficiency", "achieved fraction of DRAM bandwidth: a number or a mapping per weight dtype");
  s.real("call_overhead_us", std::nullopt, "fixed cost per operator per layer").non_negative().with_unit("us").optional();
  s.node("kernel_cost",
         "{dtype: factor}: how many times longer this runtime's kernels for that weight dtype take than for the unit's "
         "own rate on the same arithmetic (e.g. {int6: 1.875}); divides that dtype's efficiency");
  s.node("lm_head_bandwidth_efficiency",
         "{dtype: fraction}: achieved fraction of DRAM bandwidth of the LM head's GEMV when its weights are stored at "
         "that dtype (a classifier the runtime runs on another kernel); absent: bandwidth_efficiency");
  s.integer("matmul_chunks_per_thread", std::nullopt,
            "cpu with isa_kernels: each matmul is cut into threads x this many equal chunks that the threads claim one "
            "at a time (the runtime's work split); absent: the work follows the cores' peaks")
      .range(1, 1 << 16)
      .optional();
  s.text("source", std::string(""), "where these numbers come from");
  return s;
}

ParamSchema engine_unit_schema() {
  ParamSchema s = engine_kernel_values_schema();
  s.node("families",
         "gpu: the runtime's kernel values per GPU family, {adreno: {prefill_efficiency: ..., ...}, mali: {...}}: a "
         "device runs its GPU family's values (compute.gpu.family) over the ones above; any other GPU has none; a family "
         "may give kernel_classes {CLASS: {prefill_efficiency: ...}}, of which `kernels` names the one a run uses");
  s.text_list("isa_kernels", std::nullopt,
              "cpu: ISA paths of the runtime's integer-weight kernels, best first (i8mm, dotprod, neon); with it, "
              "the int4/int6/int8 efficiencies are fractions of the SoC's ISA peak on `threads` cores (needs the "
              "device's compute.cpu.clusters and isa)")
      .optional();
  s.text("threads", std::nullopt, "cpu: the runtime's thread count with isa_kernels: a number or `all`").optional();
  s.node("kernel_classes",
         "cpu: the runtime's integer-matmul kernel paths, {CLASS: {prefill_efficiency: ..., decode_efficiency: ...}} or "
         "{CLASS: {relative_to: BASE, speedup: {dtype: ratio}}}; with them the efficiencies are per class (a gpu gives "
         "them per family: families.F.kernel_classes)");
  s.text("kernels", std::nullopt,
         "the kernel class a run uses: cpu, one of kernel_classes; gpu, one of the kernel_classes of every family "
         "that gives some")
      .optional();
  return s;
}

// One GPU family's block: the runtime's kernel values there, its kernel classes on that family (builds or
// weight layouts whose GEMMs differ; the gpu unit's `kernels` names the class a run uses), and values per
// generation of the family laid over them.
ParamSchema engine_family_schema() {
  ParamSchema s = engine_kernel_values_schema();
  s.node("kernel_classes",
         "the runtime's kernel classes on this GPU family, {CLASS: {prefill_efficiency: ...}}: the gpu unit's `kernels` "
         "names the one a run uses (the ondevice probe: `gpu_kernels`); with them the efficiencies are per class");
  s.node("generations", "{GENERATION: {kernel values}}: laid over the family's on a GPU of that compute.gpu.generation");
  return s;
}

// A kernel class: its own values, or another class's efficiencies times a measured speedup.
ParamSchema engine_kernel_class_schema() {
  ParamSchema s = engine_kernel_values_schema();
  s.text("relative_to", std::nullopt, "the class whose prefill/decode efficiencies this one multiplies").optional();
  s.node("speedup", "{dtype: ratio}: this class's GEMM rate over relative_to's, for those weight dtypes (a measured ratio)");
  return s;
}

std::vector<std::string> graph_weight_dtype_names() {
  std::vector<std::string> names = models::dtype_names();
  names.push_back(kGraphWeightsAsStored);
  return names;
}

ParamSchema engine_npu_schema() {
  ParamSchema s;
  s.real("max_utilization", std::nullopt, "fraction of peak reached by long chunks").range(1e-6, 1.0).optional();
  s.real("half_utilization_chunk", std::nullopt, "chunk at which half of max_utilization is reached")
      .positive()
      .with_unit("tokens")
      .optional();
  s.real("exec_overhead_ms", std::nullopt, "fixed cost per graph execution").non_negative().with_unit("ms").optional();
  s.real("graph_chunk", std::nullopt, "tokens per compiled prefill graph").range(1, 1 << 16).with_unit("tokens").optional();
  s.real("decode_bandwidth_efficiency", std::nullopt, "achieved fraction of DRAM bandwidth while streaming weights in decode")
      .range(1e-6, 1.0)
      .optional();
  s.real("mixed_precision_fraction", std::nullopt,
         "fraction of the INT8 peak reached with integer weights and 16-bit activations (W4A16/W8A16)")
      .range(1e-6, 1.0)
      .optional();
  s.text("prefill_backend", std::nullopt, "NPU engine running prefill: htp (the HTP/HMX matrix engine, graph curve) or "
                                          "hvx (the HVX vector units, op by op; needs the device's npu.hvx_peak_tops_int8)")
      .in({"htp", "hvx"})
      .optional();
  s.text("decode_backend", std::nullopt, "NPU engine running decode: htp or hvx").in({"htp", "hvx"}).optional();
  s.real("hvx_gemm_efficiency", std::nullopt, "fraction of the HVX peak the runtime's matmul kernels reach")
      .range(1e-6, 1.0)
      .optional();
  s.real("hvx_bandwidth_efficiency", std::nullopt, "fraction of DRAM bandwidth the runtime's HVX kernels stream at")
      .range(1e-6, 1.0)
      .optional();
  s.real("hvx_op_overhead_us", std::nullopt, "cost per operator call on hvx (dispatch, DSP round trip)")
      .non_negative()
      .with_unit("us")
      .optional();
  s.integer("hmx_min_rows", std::nullopt,
            "hvx prefill: matmuls of at least this many activation rows (tokens of a ubatch) run on the HMX matrix "
            "unit, whose clock hmx_clock names; fewer rows stay on HVX (llama.cpp: 32)")
      .range(1, 1 << 16)
      .optional();
  s.text("hmx_clock", std::nullopt,
         "clock corner the runtime's build votes for the HMX unit: max (the build the hvx_gemm_efficiency was fitted "
         "on), lowest (builds that power HMX on without a clock request; needs hmx_max_corner_speedup) or none (a "
         "build without HMX: every matmul on HVX at hvx_matmul_efficiency)")
      .in({"max", "lowest", "none"})
      .optional();
  s.real("hvx_matmul_efficiency", std::nullopt,
         "fraction of the HVX peak reached by the matmuls HMX does not take (ubatches under hmx_min_rows rows, "
         "decode, builds without HMX); required with hmx_min_rows")
      .range(1e-6, 1.0)
      .optional();
  s.real("hmx_dequant_hvx_cycles_per_tile", std::nullopt,
         "HVX context-cycles to dequantise one 32 x 32 weight tile to fp16 before HMX multiplies it, once per weight "
         "per HMX ubatch (prefill) or token (decode), on the device's HVX contexts (npu.h); absent: folded into "
         "hvx_gemm_efficiency")
      .non_negative()
      .optional();
  s.real("hmx_max_corner_speedup", std::nullopt,
         "prefill throughput of HMX ubatches at the max clock corner over the lowest (a measured ratio)")
      .range(1.0, 100.0)
      .optional();
  s.integer("graph_context", std::nullopt,
            "static-context prefill graphs: the KV-cache length every pass reads and attends (the graph's "
            "past-KV input plus its chunk; AI Hub's Genie exports: 4096), whatever part holds tokens (npu.h)")
      .range(1, 1 << 24)
      .optional();
  s.text("graph_logits", std::nullopt,
         "rows of the LM head a prefill pass computes: last (the final pass's last row) or all (every row of every "
         "pass: graphs that return the logits of every input position)")
      .in({"last", "all"})
      .optional();
  s.boolean("cpu_overlap", std::nullopt,
            "prefill chunk i's NPU work overlaps chunk i-1's CPU float work (attention) (llm.npu / mllm pipeline)")
      .optional();
  s.text("graph_weight_dtype", std::nullopt,
         "dtype the runtime's NPU graphs hold every linear weight in, whatever the model file stores (e.g. fp16: "
         "the runtime dequantises the file's weights when it builds the graph; unset or stored: the model's dtypes, "
         "e.g. a runtime path that keeps the file's quantised weights)")
      .in(graph_weight_dtype_names())
      .optional();
  s.text("graph_build", std::nullopt,
         "when the runtime's QNN graphs are built: offline (compiled beforehand, or in a warm-up before the timed "
         "request; the default) or online (composed and finalised on the phone's CPU inside the first request of a "
         "shape; needs graph_finalize_ms_per_linear)")
      .in({"offline", "online"})
      .optional();
  s.real("graph_finalize_ms_per_linear", std::nullopt,
         "online graph build: time to finalise the graph of one linear layer (x 7 per block with a gated FFN, 6 "
         "with a plain one, x layers), as measured on the phone whose prime-core clock graph_finalize_host_ghz gives")
      .non_negative()
      .with_unit("ms")
      .optional();
  s.real("graph_finalize_npu_ms_per_linear", std::nullopt,
         "online graph build: the accelerator's (RPC) share of graph_finalize_ms_per_linear, which does not scale "
         "with the host CPU; the rest is host CPU work")
      .non_negative()
      .with_unit("ms")
      .optional();
  s.real("graph_finalize_host_ghz", std::nullopt,
         "online graph build: prime-core clock of the phone graph_finalize_ms_per_linear was measured on; the host "
         "share scales by this clock over the simulated device's fastest core clock (compute.cpu.clusters)")
      .positive()
      .with_unit("GHz")
      .optional();
  s.text("source", std::string(""), "where these numbers come from");
  return s;
}

PerDtype parse_per_dtype(const Params& p, const std::string& key) {
  PerDtype out;
  const YAML::Node n = p.node(key);
  if (!n.IsDefined() || n.IsNull()) return out;
  auto number = [&](const YAML::Node& v, const std::string& what) {
    double x = 0;
    try {
      x = v.as<double>();
    } catch (const YAML::Exception&) {
      p.fail(key, fmt::format("{} must be a number in (0, 1]", what));
    }
    if (!(x > 0 && x <= 1.0)) p.fail(key, fmt::format("{} must be in (0, 1], got {}", what, x));
    return x;
  };
  if (n.IsScalar()) {
    out.fallback = number(n, key);
    return out;
  }
  if (!n.IsMap()) p.fail(key, "expected a number or a mapping weight dtype -> number, e.g. {int4: 0.2, fp16: 0.1}");
  for (const auto& kv : n) {
    const std::string dt = kv.first.as<std::string>();
    if (dt == "default") {
      out.fallback = number(kv.second, key + ".default");
      continue;
    }
    models::DType t;
    try {
      t = models::parse_dtype(dt);
    } catch (const ConfigError& e) {
      p.fail(key, fmt::format("{} (or 'default')", e.what()));
    }
    out.by_dtype[t] = number(kv.second, key + "." + dt);
  }
  return out;
}

std::optional<double> opt_real(const Params& p, const std::string& key) {
  if (!p.has(key)) return std::nullopt;
  return p.real(key);
}

EngineKernelValues parse_kernel_values(const Params& p) {
  EngineKernelValues v;
  v.prefill_efficiency = parse_per_dtype(p, "prefill_efficiency");
  v.decode_efficiency = parse_per_dtype(p, "decode_efficiency");
  v.bandwidth_efficiency = parse_per_dtype(p, "bandwidth_efficiency");
  v.call_overhead_us = opt_real(p, "call_overhead_us");
  v.kernel_cost = parse_positive_per_dtype(p, "kernel_cost", "factor, e.g. {int6: 1.875}");
  const PerDtype lm_head = parse_per_dtype(p, "lm_head_bandwidth_efficiency");
  if (lm_head.fallback)
    p.fail("lm_head_bandwidth_efficiency", "give it per stored dtype of the LM head's weights, e.g. {int6: 0.06}: it "
                                           "names the classifiers the runtime runs on another kernel");
  v.lm_head_bandwidth_efficiency = lm_head.by_dtype;
  if (p.has("matmul_chunks_per_thread")) v.matmul_chunks_per_thread = static_cast<int>(p.integer("matmul_chunks_per_thread"));
  return v;
}

// `base`'s value for `t` times `ratio`; the class it names must have one.
double scaled_class_value(const PerDtype& base, models::DType t, double ratio, const Params& cp, const std::string& base_name,
                          const char* key) {
  if (base.by_dtype.count(t)) return base.by_dtype.at(t) * ratio;
  if (base.fallback) return *base.fallback * ratio;
  cp.fail("speedup", fmt::format("class '{}' gives no {} for {} weights to multiply", base_name, key, models::to_string(t)));
}

// `kernel_classes: {CLASS: {kernel values} | {relative_to: BASE, speedup: {dtype: ratio}}}` of a cpu block or a GPU family
// (empty when absent). A relative class gets BASE's prefill and decode efficiencies times the ratio, for the
// dtypes the ratio names; BASE must have its own values.
// `up` is the block holding them: a cpu unit's, or one GPU family's.
std::map<std::string, EngineKernelValues> parse_kernel_classes(const Params& up, const ConfigSource& unit_source) {
  std::map<std::string, EngineKernelValues> out;
  const YAML::Node n = up.node("kernel_classes");
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsMap() || n.size() == 0)
    up.fail("kernel_classes", "expected a mapping class -> kernel values, e.g. {vec_dot: {prefill_efficiency: {int4: 0.02}}}");
  ParamSchema cs = engine_kernel_class_schema();
  std::vector<std::pair<std::string, Params>> relative;
  for (const auto& kv : n) {
    const std::string name = kv.first.as<std::string>();
    Params cp(kv.second, cs, unit_source.child("kernel_classes").child(name), {});
    const EngineKernelValues v = parse_kernel_values(cp);
    if (cp.has("relative_to")) {
      if (!v.prefill_efficiency.empty() || !v.decode_efficiency.empty())
        cp.fail("relative_to", "a class relative to another takes its efficiencies from it times `speedup`: give no "
                               "prefill_efficiency or decode_efficiency");
      relative.emplace_back(name, cp);
    } else if (cp.has("speedup")) {
      cp.fail("speedup", "speedup needs relative_to: the class whose efficiencies it multiplies");
    }
    out.emplace(name, v);
  }
  for (const auto& [name, cp] : relative) {
    const std::string base_name = cp.text("relative_to");
    const bool base_is_relative = std::any_of(relative.begin(), relative.end(), [&](const auto& r) { return r.first == base_name; });
    const auto base = out.find(base_name);
    if (base == out.end() || base_is_relative)
      cp.fail("relative_to", fmt::format("'{}' is not a class with its own efficiencies", base_name));
    const std::map<models::DType, double> speedup = parse_positive_per_dtype(cp, "speedup", "ratio, e.g. {int4: 1.7}");
    if (speedup.empty()) cp.fail("speedup", "relative_to needs speedup: {dtype: this class's GEMM rate over the base's}");
    EngineKernelValues& v = out.at(name);
    for (const auto& [t, ratio] : speedup) {
      v.prefill_efficiency.by_dtype[t] =
          scaled_class_value(base->second.prefill_efficiency, t, ratio, cp, base_name, "prefill_efficiency");
      v.decode_efficiency.by_dtype[t] =
          scaled_class_value(base->second.decode_efficiency, t, ratio, cp, base_name, "decode_efficiency");
    }
  }
  return out;
}

// Resolves the kernel class a unit runs (`kernels`) into the unit's values. With classes the efficiencies
// are per class only: a dtype the class does not give must stay a gap, not become a unit-level value.
void select_kernel_class(const Params& up, const std::string& engine, EngineUnitSpec& u) {
  if (u.kernel_classes.empty()) up.fail("kernels", "kernels names one of the unit's kernel_classes, and it gives none");
  std::vector<std::string> names;
  for (const auto& [name, v] : u.kernel_classes) names.push_back(name);
  if (!up.has("kernels"))
    up.fail("kernels", fmt::format("engine '{}' gives cpu kernel classes ({}): name the one it runs (kernels: CLASS)",
                                   engine, fmt::join(names, ", ")));
  if (!u.prefill_efficiency.empty() || !u.decode_efficiency.empty())
    up.fail("kernel_classes", "with kernel classes the efficiencies are per class: give no unit-level "
                              "prefill_efficiency or decode_efficiency");
  u.kernels = up.text("kernels");
  const auto it = u.kernel_classes.find(u.kernels);
  if (it == u.kernel_classes.end())
    up.fail("kernels", fmt::format("engine '{}' has no cpu kernel class '{}' (its kernel_classes: {})", engine, u.kernels,
                                   fmt::join(names, ", ")));
  static_cast<EngineKernelValues&>(u) = u.overlaid_by(it->second);
}

// The values of the class the gpu unit's `kernels` names on one family: the family's own values under it.
EngineKernelValues family_kernel_class_values(const Params& up, const Params& fp, const std::string& engine, const std::string& family,
                                       const EngineKernelValues& family_values,
                                       const std::map<std::string, EngineKernelValues>& classes) {
  std::vector<std::string> names;
  for (const auto& [name, v] : classes) names.push_back(name);
  if (!family_values.prefill_efficiency.empty() || !family_values.decode_efficiency.empty())
    fp.fail("kernel_classes", "with kernel classes the efficiencies are per class: give the family no "
                              "prefill_efficiency or decode_efficiency of its own");
  if (!up.has("kernels"))
    up.fail("kernels", fmt::format("engine '{}' gives gpu kernel classes on family {} ({}): name the one it runs "
                                   "(gpu.kernels: CLASS; an ondevice probe: gpu_kernels)",
                                   engine, family, fmt::join(names, ", ")));
  const std::string chosen = up.text("kernels");
  const auto it = classes.find(chosen);
  if (it == classes.end())
    up.fail("kernels", fmt::format("engine '{}' has no gpu kernel class '{}' on family {} (its kernel_classes: {})", engine,
                                   chosen, family, fmt::join(names, ", ")));
  return family_values.overlaid_by(it->second);
}

// `generations: {GEN: {kernel values}}` of one GPU family's block, keyed {family, GEN} into `generations`.
void parse_generations(const Params& fp, const std::string& family, const ConfigSource& family_source,
                       std::map<std::pair<std::string, std::string>, EngineKernelValues>& generations) {
  const YAML::Node g = fp.node("generations");
  if (!g.IsDefined() || g.IsNull()) return;
  if (!g.IsMap() || g.size() == 0)
    fp.fail("generations", "expected a mapping GPU generation -> kernel values, e.g. {a7x: {lm_head_bandwidth_efficiency: {int6: 0.06}}}");
  const ParamSchema gs = engine_kernel_values_schema();
  for (const auto& gv : g) {
    const std::string generation = gv.first.as<std::string>();
    const Params gp(gv.second, gs, family_source.child("generations").child(generation), {});
    generations.emplace(std::make_pair(family, generation), parse_kernel_values(gp));
  }
}

// `families: {FAMILY: {kernel values, kernel_classes, generations}}` of a gpu block (empty when absent). A family that gives
// kernel classes runs the one the unit's `kernels` names (its values over the family's); the family then gives
// no efficiency of its own, so a dtype the class does not give stays a gap (or a named inheritance).
std::map<std::string, EngineKernelValues> parse_families(const Params& up, const std::string& unit, const std::string& engine,
                                                         const ConfigSource& unit_source,
                                                         std::map<std::string, std::string>& family_kernel_class,
                                                         std::map<std::pair<std::string, std::string>, EngineKernelValues>& generations) {
  std::map<std::string, EngineKernelValues> out;
  const YAML::Node n = up.node("families");
  if (!n.IsDefined() || n.IsNull()) return out;
  if (unit != "gpu") up.fail("families", "only a gpu has kernel values per GPU family");
  if (!n.IsMap() || n.size() == 0)
    up.fail("families", "expected a mapping GPU family -> kernel values, e.g. {adreno: {prefill_efficiency: {int4: 0.04}}}");
  ParamSchema fs = engine_family_schema();
  bool any_classes = false;
  for (const auto& kv : n) {
    const std::string family = kv.first.as<std::string>();
    const ConfigSource family_source = unit_source.child("families").child(family);
    const Params fp(kv.second, fs, family_source, {});
    EngineKernelValues v = parse_kernel_values(fp);
    const std::map<std::string, EngineKernelValues> classes = parse_kernel_classes(fp, family_source);
    if (!classes.empty()) {
      any_classes = true;
      v = family_kernel_class_values(up, fp, engine, family, v, classes);
      family_kernel_class[family] = up.text("kernels");
    }
    out.emplace(family, v);
    parse_generations(fp, family, family_source, generations);
  }
  if (up.has("kernels") && !any_classes)
    up.fail("kernels", fmt::format("engine '{}' names a gpu kernel class, but no GPU family of it gives kernel_classes", engine));
  return out;
}

// The per-dtype value applied to a unit: the fallback replaces the scalar, the mapping adds per-dtype values.
void apply_per_dtype(const PerDtype& v, double& scalar, std::map<models::DType, double>& by_dtype) {
  if (v.fallback) scalar = *v.fallback;
  for (const auto& [t, x] : v.by_dtype) by_dtype[t] = x;
}

bool is_integer_dtype(models::DType t) {
  return t == models::DType::kInt8 || t == models::DType::kInt4 || t == models::DType::kInt6 || t == models::DType::kF8;
}

const models::DType kAllDtypes[] = {models::DType::kF32, models::DType::kF16, models::DType::kBF16, models::DType::kF8,
                                    models::DType::kInt8, models::DType::kInt4, models::DType::kInt6};

std::map<std::string, std::string> parse_inherit_device(const Params& p) {
  std::map<std::string, std::string> out;
  const YAML::Node n = p.node("inherit_device");
  if (!n.IsDefined() || n.IsNull()) return out;
  const std::string form = "a mapping {selector: reason}, e.g. {cpu.prefill: \"no published llama.cpp CPU point\"}";
  if (!n.IsMap()) p.fail("inherit_device", "expected " + form);
  for (const auto& kv : n) {
    const std::string sel = kv.first.as<std::string>();
    std::string reason;
    if (kv.second.IsScalar()) reason = kv.second.Scalar();
    if (reason.empty())
      p.fail("inherit_device", fmt::format("'{}' needs a reason (why the device profile's value stands for this runtime)", sel));
    const auto parts = [&] {
      std::vector<std::string> v;
      std::size_t start = 0;
      for (std::size_t i = 0; i <= sel.size(); ++i)
        if (i == sel.size() || sel[i] == '.') {
          v.push_back(sel.substr(start, i - start));
          start = i + 1;
        }
      return v;
    }();
    const bool ok_shape = !parts.empty() && parts.size() <= 3 && !parts[0].empty() &&
                          !(parts[0] == "all" && parts.size() > 1);
    if (!ok_shape)
      p.fail("inherit_device", fmt::format("bad selector '{}': expected all, UNIT, UNIT.PHASE or UNIT.PHASE.DTYPE", sel));
    if (parts.size() >= 2 && parts[1] != "prefill" && parts[1] != "decode")
      p.fail("inherit_device", fmt::format("bad selector '{}': phase '{}' is not prefill or decode", sel, parts[1]));
    if (parts.size() == 3) {
      try {
        (void)models::parse_dtype(parts[2]);
      } catch (const ConfigError& e) {
        p.fail("inherit_device", fmt::format("bad selector '{}': {}", sel, e.what()));
      }
    }
    out[sel] = reason;
  }
  return out;
}

bool per_dtype_sets(const PerDtype& v, models::DType t) { return v.fallback || v.by_dtype.count(t); }

std::string fmt_value(double x) { return fmt::format("{}", x); }

// One unit's inherited values, grouped by phase and by the set of keys taken (dtypes collapse).
struct InheritedLines {
  // (phase, "key=value, ..." + reason) -> dtypes
  std::map<std::pair<Phase, std::string>, std::vector<models::DType>> groups;
  void add(Phase phase, models::DType t, const std::string& what) { groups[{phase, what}].push_back(t); }
  void emit(const std::string& unit, std::vector<std::string>& out) const {
    for (const auto& [key, dtypes] : groups) {
      std::vector<std::string> names;
      if (dtypes.size() < std::size(kAllDtypes))
        for (models::DType t : dtypes) names.push_back(models::to_string(t));
      out.push_back(names.empty() ? fmt::format("{}.{}: {}", unit, to_string(key.first), key.second)
                                  : fmt::format("{}.{}[{}]: {}", unit, to_string(key.first), fmt::join(names, ","),
                                                key.second));
    }
  }
};

}  // namespace

EngineKernelValues EngineKernelValues::overlaid_by(const EngineKernelValues& over) const {
  EngineKernelValues v = *this;
  auto overlay = [](PerDtype& base, const PerDtype& top) {
    if (top.fallback) base.fallback = top.fallback;
    for (const auto& [t, x] : top.by_dtype) base.by_dtype[t] = x;
  };
  overlay(v.prefill_efficiency, over.prefill_efficiency);
  overlay(v.decode_efficiency, over.decode_efficiency);
  overlay(v.bandwidth_efficiency, over.bandwidth_efficiency);
  if (over.call_overhead_us) v.call_overhead_us = over.call_overhead_us;
  for (const auto& [t, x] : over.kernel_cost) v.kernel_cost[t] = x;
  for (const auto& [t, x] : over.lm_head_bandwidth_efficiency) v.lm_head_bandwidth_efficiency[t] = x;
  if (over.matmul_chunks_per_thread) v.matmul_chunks_per_thread = over.matmul_chunks_per_thread;
  return v;
}

const std::string* EngineProfile::inherit_reason(const std::string& unit, Phase phase, models::DType dtype) const {
  const std::string up = unit + "." + to_string(phase);
  for (const std::string& sel : {up + "." + models::to_string(dtype), up, unit, std::string("all")})
    if (auto it = inherit_device.find(sel); it != inherit_device.end()) return &it->second;
  return nullptr;
}

std::vector<std::string> engine_npu_keys(Phase phase, models::DType dtype) {
  std::vector<std::string> keys = phase == Phase::kPrefill
                                      ? std::vector<std::string>{"max_utilization", "half_utilization_chunk",
                                                                 "exec_overhead_ms", "graph_chunk"}
                                      : std::vector<std::string>{"max_utilization", "exec_overhead_ms",
                                                                 "decode_bandwidth_efficiency"};
  // Integer weights run on the INT8 peak, scaled by mixed_precision_fraction when the activations are not
  // integer (W4A16, or fp32 activations on an NPU): the runtime must say how fast that is.
  if (is_integer_dtype(dtype)) keys.push_back("mixed_precision_fraction");
  return keys;
}

void record_inherited(const DeviceProfile& device, const ConfigSource& source) {
  if (source.inherited)
    for (const auto& line : device.inherited_from_device) source.inherited->add(line);
  if (source.derived_from_soc)
    for (const auto& line : device.derived_from_soc) source.derived_from_soc->add(line);
}

namespace {

// Every key of `top` replaces (maps: recursively) the same key of `base`.
void overlay_yaml(YAML::Node base, const YAML::Node& top) {
  for (const auto& kv : top) {
    const std::string key = kv.first.as<std::string>();
    YAML::Node b = base[key];
    if (kv.second.IsMap() && b.IsDefined() && b.IsMap())
      overlay_yaml(b, kv.second);
    else
      base[key] = yaml_clone(kv.second);
  }
}

// Each runtime block must be a mapping of unit blocks that makes a valid profile when laid over the engine.
void validate_runtimes(const YAML::Node& root, const ConfigSource& source) {
  const YAML::Node r = root["runtimes"];
  if (!r.IsDefined() || r.IsNull()) return;
  if (!r.IsMap()) throw ConfigError(fmt::format("{}: runtimes: expected {{NAME: {{cpu/gpu/npu: ...}}}}", source.where(r)));
  for (const auto& kv : r) {
    const std::string name = kv.first.as<std::string>();
    if (!kv.second.IsMap())
      throw ConfigError(fmt::format("{}: runtimes.{}: expected a mapping of unit blocks (cpu, gpu, npu)", source.where(r), name));
    for (const auto& unit : kv.second) {
      const std::string u = unit.first.as<std::string>();
      if (u != "cpu" && u != "gpu" && u != "npu")
        throw ConfigError(fmt::format("{}: runtimes.{}.{}: a runtime sets cpu, gpu or npu values only", source.where(r), name, u));
    }
    (void)EngineProfile::from_yaml(with_engine_runtime(root, name), source.child("runtimes").child(name));
  }
}

}  // namespace

YAML::Node with_engine_runtime(const YAML::Node& engine_yaml, const std::string& runtime) {
  YAML::Node out = yaml_clone(engine_yaml);
  const YAML::Node r = engine_yaml["runtimes"];
  const std::string name = engine_yaml["name"] ? engine_yaml["name"].as<std::string>() : std::string("?");
  if (!r.IsDefined() || !r.IsMap() || !r[runtime].IsDefined())
    throw ConfigError(fmt::format("engine '{}' has no runtime '{}' (engine key runtimes.{}: the values of that runtime path)",
                                  name, runtime, runtime));
  overlay_yaml(out, r[runtime]);
  out.remove("runtimes");
  return out;
}

EngineProfile EngineProfile::from_yaml(const YAML::Node& given, const ConfigSource& source) {
  const YAML::Node root = expand_profile_bases(given, source, "engines");
  ParamSchema ts = engine_top_schema();
  const Params p(root, ts, source, {});
  EngineProfile e;
  e.name = p.text("name");
  e.description = p.text("description");
  e.origin = source.file ? *source.file : "<inline>";
  if (given.IsMap() && given["base"]) e.origin += " (base: " + given["base"].as<std::string>() + ")";
  e.resolved = yaml_clone(root);
  e.resolved.remove("base");
  e.inherit_device = parse_inherit_device(p);
  validate_runtimes(root, source);
  for (const std::string unit : {"cpu", "gpu"}) {
    const YAML::Node n = p.node(unit);
    if (!n.IsDefined() || n.IsNull()) continue;
    ParamSchema us = engine_unit_schema();
    const Params up(n, us, source.child(unit), {});
    EngineUnitSpec u;
    static_cast<EngineKernelValues&>(u) = parse_kernel_values(up);
    u.families = parse_families(up, unit, e.name, source.child(unit), u.family_kernel_class, u.generations);
    if (unit == "gpu") {
      bool chunked = u.matmul_chunks_per_thread.has_value();
      for (const auto& [f, v] : u.families) chunked = chunked || v.matmul_chunks_per_thread.has_value();
      if (chunked) up.fail("matmul_chunks_per_thread", "matmul_chunks_per_thread splits CPU matmuls across threads: a gpu has none");
      if (up.has("kernel_classes"))
        up.fail("kernel_classes", "a gpu's kernel classes are per GPU family: families.FAMILY.kernel_classes");
      if (up.has("kernels")) {
        if (u.families.empty()) up.fail("kernels", "a gpu's kernel classes are per GPU family: give families first");
        u.kernels = up.text("kernels");
      }
    } else {
      u.kernel_classes = parse_kernel_classes(up, source.child(unit));
      if (up.has("kernels") || !u.kernel_classes.empty()) select_kernel_class(up, e.name, u);
    }
    if (up.has("isa_kernels")) {
      if (unit != "cpu") up.fail("isa_kernels", "only a cpu runs ISA-path kernels");
      u.isa_kernels = up.text_list("isa_kernels");
      if (u.isa_kernels.empty()) up.fail("isa_kernels", "give at least one ISA path (i8mm, dotprod, neon)");
      for (const auto& k : u.isa_kernels) try {
          int8_ops_per_pipe_cycle(k);
        } catch (const ConfigError& err) {
          up.fail("isa_kernels", err.what());
        }
      if (!up.has("threads")) up.fail("threads", "isa_kernels needs the runtime's thread count: a number or `all`");
    }
    if (u.matmul_chunks_per_thread && u.isa_kernels.empty())
      up.fail("matmul_chunks_per_thread", "matmul_chunks_per_thread splits ISA-path matmuls: it needs isa_kernels");
    if (up.has("threads")) {
      if (u.isa_kernels.empty()) up.fail("threads", "threads is used only with isa_kernels");
      const std::string t = up.text("threads");
      if (t != "all") {
        try {
          std::size_t used = 0;
          u.threads = std::stoi(t, &used);
          if (used != t.size() || u.threads < 1) throw std::invalid_argument(t);
        } catch (const std::exception&) {
          up.fail("threads", fmt::format("expected a number >= 1 or `all`, got '{}'", t));
        }
      }
    }
    e.units.emplace(unit, u);
  }
  if (const YAML::Node n = p.node("npu"); n.IsDefined() && !n.IsNull()) {
    ParamSchema ns = engine_npu_schema();
    const Params np(n, ns, source.child("npu"), {});
    e.npu.max_utilization = opt_real(np, "max_utilization");
    e.npu.half_utilization_chunk = opt_real(np, "half_utilization_chunk");
    e.npu.exec_overhead_ms = opt_real(np, "exec_overhead_ms");
    e.npu.graph_chunk = opt_real(np, "graph_chunk");
    e.npu.decode_bandwidth_efficiency = opt_real(np, "decode_bandwidth_efficiency");
    e.npu.mixed_precision_fraction = opt_real(np, "mixed_precision_fraction");
    if (np.has("prefill_backend")) e.npu.prefill_backend = np.text("prefill_backend");
    if (np.has("decode_backend")) e.npu.decode_backend = np.text("decode_backend");
    e.npu.hvx_gemm_efficiency = opt_real(np, "hvx_gemm_efficiency");
    e.npu.hvx_bandwidth_efficiency = opt_real(np, "hvx_bandwidth_efficiency");
    e.npu.hvx_op_overhead_us = opt_real(np, "hvx_op_overhead_us");
    if (np.has("hmx_min_rows")) e.npu.hmx_min_rows = np.integer("hmx_min_rows");
    if (np.has("hmx_clock")) e.npu.hmx_clock = np.text("hmx_clock");
    e.npu.hmx_max_corner_speedup = opt_real(np, "hmx_max_corner_speedup");
    e.npu.hvx_matmul_efficiency = opt_real(np, "hvx_matmul_efficiency");
    e.npu.hmx_dequant_hvx_cycles_per_tile = opt_real(np, "hmx_dequant_hvx_cycles_per_tile");
    // A build at the lowest HMX corner is slower by a measured ratio, which the engine states (no default).
    if (e.npu.hmx_clock.value_or("max") == "lowest") {
      if (!e.npu.hmx_min_rows)
        np.fail("hmx_clock", fmt::format("engine '{}' names an HMX clock corner but no npu.hmx_min_rows (which "
                                         "matmuls run on HMX)",
                                         e.name));
      if (!e.npu.hmx_max_corner_speedup)
        np.fail("hmx_max_corner_speedup",
                fmt::format("engine '{}' runs HMX at the lowest clock corner (npu.hmx_clock: lowest): give "
                            "npu.hmx_max_corner_speedup (measured max-corner / lowest-corner prefill throughput)",
                            e.name));
    }
    // Matmuls that HMX does not take run other kernels (flat HVX vrmpy): their rate is the engine's to state,
    // never the HMX ubatches' hvx_gemm_efficiency reused.
    // hmx_min_rows 1 sends every matmul to HMX (MNN's Hexagon backend): none stays on HVX.
    if ((e.npu.hmx_min_rows.value_or(1) > 1 || e.npu.hmx_clock.value_or("") == "none") && !e.npu.hvx_matmul_efficiency)
      np.fail("hvx_matmul_efficiency",
              fmt::format("engine '{}' runs some matmuls on HMX and the rest on HVX (npu.hmx_min_rows or hmx_clock: "
                          "none): give npu.hvx_matmul_efficiency (the share of the HVX peak of the HVX matmuls)",
                          e.name));
    if (np.has("graph_context")) e.npu.graph_context = np.integer("graph_context");
    if (np.has("graph_logits")) e.npu.graph_logits = np.text("graph_logits");
    if (np.has("cpu_overlap")) e.npu.cpu_overlap = np.boolean("cpu_overlap");
    if (np.has("graph_weight_dtype")) e.npu.graph_weight_dtype = np.text("graph_weight_dtype");
    if (np.has("graph_build")) e.npu.graph_build = np.text("graph_build");
    e.npu.graph_finalize_ms_per_linear = opt_real(np, "graph_finalize_ms_per_linear");
    e.npu.graph_finalize_npu_ms_per_linear = opt_real(np, "graph_finalize_npu_ms_per_linear");
    e.npu.graph_finalize_host_ghz = opt_real(np, "graph_finalize_host_ghz");
    // Graphs built on the phone cost time the device profile knows nothing of: the runtime states it, and
    // which part of it is host CPU work measured at which clock (NpuSpec::graph_build_seconds).
    if (e.npu.graph_build.value_or("offline") == "online") {
      if (!e.npu.graph_finalize_ms_per_linear)
        np.fail("graph_finalize_ms_per_linear",
                fmt::format("engine '{}' builds its NPU graphs at run time (npu.graph_build: online): give "
                            "npu.graph_finalize_ms_per_linear (the finalise time of one linear layer's graph, ms)",
                            e.name));
      for (const char* key : {"graph_finalize_npu_ms_per_linear", "graph_finalize_host_ghz"})
        if (!np.has(key))
          np.fail(key, fmt::format("engine '{}' builds its NPU graphs at run time (npu.graph_build: online): give "
                                   "npu.{} (the finalise time's accelerator share and the measuring phone's prime-core "
                                   "clock, so that its host share scales with each device's CPU)",
                                   e.name, key));
    }
    if (e.npu.graph_finalize_npu_ms_per_linear && e.npu.graph_finalize_ms_per_linear &&
        *e.npu.graph_finalize_npu_ms_per_linear > *e.npu.graph_finalize_ms_per_linear)
      np.fail("graph_finalize_npu_ms_per_linear",
              fmt::format("engine '{}': the accelerator's share ({} ms) exceeds the whole finalise time "
                          "npu.graph_finalize_ms_per_linear ({} ms)",
                          e.name, *e.npu.graph_finalize_npu_ms_per_linear, *e.npu.graph_finalize_ms_per_linear));
    // A runtime on the HVX units has no device value to fall back to: its kernels' efficiencies and
    // per-call cost are its own, stated or an error (no silent default).
    if (e.npu.prefill_backend.value_or("") == "hvx" || e.npu.decode_backend.value_or("") == "hvx")
      for (const char* key : {"hvx_gemm_efficiency", "hvx_bandwidth_efficiency", "hvx_op_overhead_us"})
        if (!np.has(key))
          np.fail(key, fmt::format("engine '{}' runs NPU work on hvx: give npu.{} (its kernels' own value; hvx has no "
                                   "device value to inherit)",
                                   e.name, key));
  }
  if (const YAML::Node n = p.node("storage"); n.IsDefined() && !n.IsNull()) {
    ParamSchema ss = engine_storage_schema();
    const Params sp(n, ss, source.child("storage"), {});
    e.storage.read_command_overhead_us = opt_real(sp, "read_command_overhead_us");
    e.storage.load_ns_per_byte = opt_real(sp, "load_ns_per_byte");
  }
  return e;
}

namespace {
// The runtime's integer-weight efficiencies are fractions of the SoC's ISA peak (engine cpu.isa_kernels):
// each becomes the equivalent fraction of the unit's own peak for that dtype, so the roofline is unchanged.
// What the device lacks (clusters, isa, a path the runtime has kernels for) is a gap of those dtypes.
// Returns what was derived (path, threads, peak) for the result file, or "" when it is a gap.
std::string apply_isa_kernels(const EngineUnitSpec& spec, const std::string& unit, const std::string& where,
                              const DeviceProfile& device, ComputeUnitSpec& u, EngineGaps& gaps) {
  std::string problem, path;
  if (u.clusters.empty())
    problem = fmt::format("compute.{}.clusters (cores, clocks and 128-bit pipes per cluster)", unit);
  else if (u.isa.empty())
    problem = fmt::format("compute.{}.isa (the CPU's ISA features, e.g. [dotprod, i8mm])", unit);
  else {
    for (const auto& k : spec.isa_kernels)
      if (u.has_isa(k)) {
        path = k;
        break;
      }
    if (path.empty())
      problem = fmt::format("an ISA path in compute.{}.isa that the runtime has kernels for ({})", unit,
                            fmt::join(spec.isa_kernels, ", "));
  }
  double peak = 0;
  if (problem.empty()) {
    try {
      peak = u.isa_chunked_peak_ops(path, spec.threads, spec.matmul_chunks_per_thread.value_or(0));
    } catch (const ConfigError& e) {
      problem = e.what();
    }
  }
  for (Phase phase : kPhases) {
    const bool prefill = phase == Phase::kPrefill;
    const PerDtype& given = prefill ? spec.prefill_efficiency : spec.decode_efficiency;
    auto& by_dtype = prefill ? u.efficiency_by_dtype : u.gemv_efficiency_by_dtype;
    for (models::DType t : {models::DType::kInt4, models::DType::kInt6, models::DType::kInt8}) {
      if (!per_dtype_sets(given, t)) continue;
      if (!problem.empty()) {
        gaps.missing[{phase, t}] = fmt::format(
            "{} runs {} {} on {} weights with its ISA-path kernels ({}), which need the device's per-SoC CPU "
            "description: device '{}' ({}) gives no {}",
            where, unit, to_string(phase), models::to_string(t), fmt::join(spec.isa_kernels, ", "), device.name,
            device.origin, problem);
        continue;
      }
      const double e = given.by_dtype.count(t) ? given.by_dtype.at(t) : *given.fallback;
      by_dtype[t] = e * peak / u.peak_flops(t);
    }
  }
  if (!problem.empty()) return "";
  // Which kernels the run's integer layers use, so a result says why it is as fast as it is.
  const std::string chunking = spec.matmul_chunks_per_thread
                                   ? fmt::format(", {} matmul chunks per thread", *spec.matmul_chunks_per_thread)
                                   : std::string();
  return fmt::format("{} integer kernels: {}{} path, {} threads{}, int8 peak {:.3g} op/s ({}: isa_kernels [{}]; "
                     "device '{}': {}.isa [{}])",
                     unit, spec.kernels.empty() ? std::string() : fmt::format("class {}, ", spec.kernels), path, spec.threads > 0 ? fmt::to_string(spec.threads) : std::string("all"), chunking, peak,
                     where, fmt::join(spec.isa_kernels, ", "), device.name, unit, fmt::join(u.isa, ", "));
}
// The kernel values a unit of `device` runs: the unit's, overlaid by those of its GPU family when the
// runtime gives values per family. `family_problem` says why a family-specific runtime has none for this
// GPU: none of the engine's values apply there and every phase and dtype is a gap, whatever inherit_device
// says (to take a device's values on a family, list the family, even empty, and name the inheritance);
// `derived` says what ran, for the result file.
EngineKernelValues values_for_family(const EngineUnitSpec& spec, const std::string& unit, const std::string& where,
                                     const DeviceProfile& device, const ComputeUnitSpec& u, std::string& family_problem,
                                     std::string& derived) {
  const EngineKernelValues& base = spec;
  if (spec.families.empty()) return base;
  std::vector<std::string> given;
  for (const auto& [f, v] : spec.families) given.push_back(f);
  const std::string lead = fmt::format("{} runs {} kernels written per GPU family ({}), but device '{}' ({})", where,
                                       unit, fmt::join(given, ", "), device.name, device.origin);
  if (u.family.empty()) {
    family_problem = fmt::format("{} gives no compute.{}.family (the GPU's family: {})", lead, unit, fmt::join(given, ", "));
    return {};
  }
  const auto it = spec.families.find(u.family);
  if (it == spec.families.end()) {
    family_problem = fmt::format("{} has a GPU of family '{}' (compute.{}.family), for which the engine gives no {}.families.{} values",
                                 lead, u.family, unit, unit, u.family);
    return {};
  }
  std::vector<std::string> peaks;
  for (const auto& [t, tf] : u.peak_tflops) peaks.push_back(fmt::format("{} {:g}", models::to_string(t), tf));
  const auto gen = spec.generations.find({u.family, u.generation});
  const bool by_generation = !u.generation.empty() && gen != spec.generations.end();
  const auto cls = spec.family_kernel_class.find(u.family);
  const std::string class_note =
      cls == spec.family_kernel_class.end() ? std::string() : fmt::format(", kernel class '{}'", cls->second);
  derived = fmt::format("{} kernels: the {} values of {} ({}.families.{}{}{}) on device '{}' {} {} GPU, peak TFLOP/s {}",
                        unit, u.family, where, unit, u.family, class_note,
                        by_generation ? fmt::format(", then its generations.{} values", u.generation) : std::string(),
                        device.name, u.family, u.generation.empty() ? std::string("(generation not given)") : u.generation,
                        fmt::join(peaks, ", "));
  const EngineKernelValues family = base.overlaid_by(it->second);
  return by_generation ? family.overlaid_by(gen->second) : family;
}

// The clock of the device's fastest CPU core (compute.cpu.clusters), where a single host thread such as QNN's
// graph finalise runs; 0 when the device does not describe its clusters.
double fastest_cpu_core_ghz(const DeviceProfile& d) {
  const auto cpu = d.compute.find("cpu");
  if (cpu == d.compute.end()) return 0.0;
  double ghz = 0.0;
  for (const CpuCluster& c : cpu->second.clusters) ghz = std::max(ghz, c.ghz);
  return ghz;
}
}  // namespace

DeviceProfile EngineProfile::apply(const DeviceProfile& device) const {
  DeviceProfile d = device;
  d.engine = name;
  const std::string where = fmt::format("engine '{}' ({})", name, origin);
  auto gap_message = [&](const std::string& unit, const std::string& kernels, Phase phase, models::DType t,
                         const std::vector<std::string>& keys) {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(unit + "." + k);
    return fmt::format(
        "{}{} has no {} {} value for {} weights: it sets none of {} and does not inherit them from device '{}' ({}); "
        "set them in the engine profile, or name what it takes from the device profile with a reason: "
        "inherit_device: {{{}.{}.{}: WHY}} (or {}.{}, or {})",
        where, kernels.empty() ? std::string() : fmt::format(" with its {} kernel class '{}'", unit, kernels), unit, to_string(phase), models::to_string(t), fmt::join(full, ", "), device.name, device.origin, unit,
        to_string(phase), models::to_string(t), unit, to_string(phase), unit);
  };
  auto inherited_text = [&](const std::vector<std::string>& kv, const std::string& reason) {
    return fmt::format("{} of device {} ({})", fmt::join(kv, ", "), device.name, reason);
  };
  for (auto& [unit, u] : d.compute) {
    static const EngineUnitSpec kNone{};
    const auto it = units.find(unit);
    const EngineUnitSpec& unit_spec = it == units.end() ? kNone : it->second;
    // What the device profile gave, before the engine's values replace it (what an inheritance takes).
    const ComputeUnitSpec dev = u;
    std::string family_problem, family_derived;
    const EngineKernelValues spec =
        values_for_family(unit_spec, unit, where, device, dev, family_problem, family_derived);
    if (!family_derived.empty()) d.derived_from_soc.push_back(family_derived);
    apply_per_dtype(spec.prefill_efficiency, u.compute_efficiency, u.efficiency_by_dtype);
    apply_per_dtype(spec.decode_efficiency, u.gemv_compute_efficiency, u.gemv_efficiency_by_dtype);
    apply_per_dtype(spec.bandwidth_efficiency, u.bandwidth_efficiency, u.bandwidth_efficiency_by_dtype);
    if (spec.call_overhead_us) u.call_overhead_us = *spec.call_overhead_us;
    for (const auto& [t, x] : spec.kernel_cost) u.kernel_cost_by_dtype[t] = x;
    for (const auto& [t, x] : spec.lm_head_bandwidth_efficiency) u.lm_head_bandwidth_efficiency_by_dtype[t] = x;
    auto gaps = std::make_shared<EngineGaps>();
    if (!unit_spec.isa_kernels.empty()) {
      std::string derived = apply_isa_kernels(unit_spec, unit, where, device, u, *gaps);
      if (!derived.empty()) d.derived_from_soc.push_back(std::move(derived));
    }
    InheritedLines lines;
    for (Phase phase : kPhases)
      for (models::DType t : kAllDtypes) {
        const bool prefill = phase == Phase::kPrefill;
        std::vector<std::string> missing, taken;
        if (!per_dtype_sets(prefill ? spec.prefill_efficiency : spec.decode_efficiency, t)) {
          missing.push_back(prefill ? "prefill_efficiency" : "decode_efficiency");
          taken.push_back(prefill ? "compute_efficiency=" + fmt_value(dev.compute_efficiency)
                                  : "gemv_compute_efficiency=" + fmt_value(dev.gemv_compute_efficiency));
        }
        if (!per_dtype_sets(spec.bandwidth_efficiency, t)) {
          missing.push_back("bandwidth_efficiency");
          taken.push_back("bandwidth_efficiency=" + fmt_value(dev.bandwidth_efficiency));
        }
        if (!spec.call_overhead_us) {
          missing.push_back("call_overhead_us");
          taken.push_back("call_overhead_us=" + fmt_value(dev.call_overhead_us));
        }
        if (missing.empty()) continue;
        // A GPU outside the runtime's families has none of its values: no inheritance applies.
        if (!family_problem.empty())
          gaps->missing[{phase, t}] = fmt::format(
              "{}: it has no {} {} value for {} weights there; give the device's GPU family, or the engine's "
              "values for that family ({}.families.FAMILY; an empty block plus inherit_device takes the device's "
              "values by name)",
              family_problem, unit, to_string(phase), models::to_string(t), unit);
        else if (const std::string* reason = inherit_reason(unit, phase, t))
          lines.add(phase, t, inherited_text(taken, *reason));
        else
          gaps->missing[{phase, t}] = gap_message(unit, unit_spec.kernels, phase, t, missing);
      }
    if (!gaps->missing.empty()) u.gaps = gaps;
    lines.emit(unit, d.inherited_from_device);
  }
  if (d.npu) {
    NpuSpec& n = *d.npu;
    const NpuSpec dev = n;
    if (npu.max_utilization) n.max_utilization = *npu.max_utilization;
    if (npu.half_utilization_chunk) n.half_utilization_chunk = *npu.half_utilization_chunk;
    if (npu.exec_overhead_ms) n.exec_overhead_ms = *npu.exec_overhead_ms;
    if (npu.graph_chunk) n.graph_chunk = static_cast<std::int64_t>(*npu.graph_chunk);
    if (npu.decode_bandwidth_efficiency) n.decode_bandwidth_efficiency = *npu.decode_bandwidth_efficiency;
    if (npu.mixed_precision_fraction) n.mixed_precision_fraction = *npu.mixed_precision_fraction;
    const std::map<std::string, std::pair<const std::optional<double>*, double>> fields{
        {"max_utilization", {&npu.max_utilization, dev.max_utilization}},
        {"half_utilization_chunk", {&npu.half_utilization_chunk, dev.half_utilization_chunk}},
        {"exec_overhead_ms", {&npu.exec_overhead_ms, dev.exec_overhead_ms}},
        {"graph_chunk", {&npu.graph_chunk, static_cast<double>(dev.graph_chunk)}},
        {"decode_bandwidth_efficiency", {&npu.decode_bandwidth_efficiency, dev.decode_bandwidth_efficiency}},
        {"mixed_precision_fraction", {&npu.mixed_precision_fraction, dev.mixed_precision_fraction}}};
    auto gaps = std::make_shared<EngineGaps>();
    InheritedLines lines;
    for (Phase phase : kPhases)
      for (models::DType t : kAllDtypes) {
        std::vector<std::string> missing, taken;
        for (const std::string& k : engine_npu_keys(phase, t)) {
          const auto& [given, device_value] = fields.at(k);
          if (*given) continue;
          missing.push_back(k);
          taken.push_back(k + "=" + fmt_value(device_value));
        }
        if (missing.empty()) continue;
        if (const std::string* reason = inherit_reason("npu", phase, t))
          lines.add(phase, t, inherited_text(taken, *reason));
        else
          gaps->missing[{phase, t}] = gap_message("npu", "", phase, t, missing);
      }
    if (!gaps->missing.empty()) n.gaps = gaps;
    lines.emit("npu", d.inherited_from_device);
    n.engine_name = name;
    if (npu.prefill_backend) n.prefill_backend = parse_npu_backend(*npu.prefill_backend);
    if (npu.decode_backend) n.decode_backend = parse_npu_backend(*npu.decode_backend);
    if (npu.hvx_gemm_efficiency) n.hvx_gemm_efficiency = *npu.hvx_gemm_efficiency;
    if (npu.hvx_bandwidth_efficiency) n.hvx_bandwidth_efficiency = *npu.hvx_bandwidth_efficiency;
    if (npu.hvx_op_overhead_us) n.hvx_op_overhead_us = *npu.hvx_op_overhead_us;
    if (npu.graph_weight_dtype && *npu.graph_weight_dtype != kGraphWeightsAsStored)
      n.graph_weight_dtype = models::parse_dtype(*npu.graph_weight_dtype);
    if (npu.hmx_min_rows) n.hmx_min_rows = *npu.hmx_min_rows;
    if (npu.hmx_clock.value_or("max") == "lowest") n.hmx_clock_slowdown = *npu.hmx_max_corner_speedup;
    n.hmx_in_build = npu.hmx_clock.value_or("max") != "none";
    if (npu.hvx_matmul_efficiency) n.hvx_matmul_efficiency = *npu.hvx_matmul_efficiency;
    if (npu.hmx_dequant_hvx_cycles_per_tile) n.hmx_dequant_hvx_cycles_per_tile = *npu.hmx_dequant_hvx_cycles_per_tile;
    if (npu.graph_context) n.graph_context = *npu.graph_context;
    if (npu.graph_logits) n.graph_logits_all_rows = *npu.graph_logits == "all";
    if (npu.cpu_overlap) n.cpu_overlap = *npu.cpu_overlap;
    if (npu.graph_build) n.online_graph_build = *npu.graph_build == "online";
    if (npu.graph_finalize_ms_per_linear) n.graph_finalize_ms_per_linear = *npu.graph_finalize_ms_per_linear;
    if (npu.graph_finalize_npu_ms_per_linear) n.graph_finalize_npu_ms_per_linear = *npu.graph_finalize_npu_ms_per_linear;
    if (npu.graph_finalize_host_ghz) n.graph_finalize_host_ghz = *npu.graph_finalize_host_ghz;
    n.host_fastest_core_ghz = fastest_cpu_core_ghz(d);
  }
  if (d.storage && storage.read_command_overhead_us) d.storage->read_command_overhead_us = *storage.read_command_overhead_us;
  if (d.storage && storage.load_ns_per_byte) d.storage->load_ns_per_byte = *storage.load_ns_per_byte;
  return d;
}

EngineProfile load_engine_profile(const std::string& name_or_path) {
  std::string text, origin;
  if (!find_config("engines", name_or_path, text, origin))
    throw ConfigError(fmt::format("unknown engine '{}' (built-in: {}; or give a path to a YAML file)", name_or_path,
                                  fmt::join(builtin_engine_names(), ", ")));
  return EngineProfile::from_yaml(load_yaml_string(text, origin), ConfigSource{std::make_shared<std::string>(origin), ""});
}

EngineProfile load_engine_profile(const YAML::Node& node, const ConfigSource& source) {
  if (node.IsScalar()) return load_engine_profile(node.Scalar());
  if (!node.IsMap())
    throw ConfigError(fmt::format("{}: expected an engine name ({}), a YAML path or a mapping", source.where(node),
                                  fmt::join(builtin_engine_names(), ", ")));
  return EngineProfile::from_yaml(node, source);
}

std::vector<std::string> builtin_engine_names() { return builtin_names("engines"); }

std::vector<ProfileSection> engine_profile_schema() {
  return {{"", "the engine", engine_top_schema(), false},
          {"cpu | gpu", "the runtime on that compute unit of the device (an absent value is an error when a run needs it, "
                       "unless `inherit_device` names it)",
           engine_unit_schema(), false},
          {"npu", "the runtime on the npu (an absent value is an error when a run needs it, unless `inherit_device` names it)",
           engine_npu_schema(), false},
          {"storage", "the runtime's reads from storage (absent keys keep the device's value)", engine_storage_schema(),
           false}};
}

void add_engine_param(ParamSchema& schema) {
  schema.node("engine", "inference runtime: mllm (default; the device profiles' own numbers), llama.cpp, mnn, mlc, "
                        "qnn, executorch, a YAML path, or a mapping {base: NAME, ...}");
}

EngineProfile experiment_engine(const Params& p) {
  const YAML::Node e = p.node("engine");
  if (!e.IsDefined() || e.IsNull()) return load_engine_profile(kDefaultEngine);
  return load_engine_profile(e, p.source_of("engine"));
}

DeviceProfile load_device_for_engine(const Params& p, const std::string& device_key) {
  DeviceProfile d = experiment_engine(p).apply(load_device_profile(p.node(device_key), p.source_of(device_key)));
  record_inherited(d, p.source_of(device_key));
  return d;
}

YAML::Node resolved_engine(const Params& p) { return experiment_engine(p).resolved; }

YAML::Node with_engine(const YAML::Node& config, const YAML::Node& engine) {
  YAML::Node out(YAML::NodeType::Map);
  bool placed = false;
  for (const auto& kv : config) {
    const std::string key = kv.first.as<std::string>();
    if (key == "engine") continue;
    out[key] = kv.second;
    if (key == "device") {
      out["engine"] = yaml_clone(engine);
      placed = true;
    }
  }
  if (!placed) out["engine"] = yaml_clone(engine);
  return out;
}

}  // namespace mobisim::devices
