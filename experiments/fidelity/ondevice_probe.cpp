#include "experiments/fidelity/ondevice_probe.h"

#include <algorithm>

#include <fmt/format.h>

#include "models/cost_model.h"
#include "policies/specdec/specdec_policy.h"
#include "sim/builtin_configs.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "sim/strings.h"

namespace mobisim::fidelity {

namespace {

YAML::Node profile_yaml(const std::string& folder, const std::string& name, std::string& origin) {
  std::string text;
  if (!find_config(folder, name, text, origin))
    throw ConfigError(fmt::format("ondevice probe: unknown {} profile '{}' (built-in: {})", folder, name,
                                  fmt::join(builtin_names(folder), ", ")));
  return load_yaml_string(text, origin);
}

// Sets `value` at `path` (keys below the profile's root), creating mappings on the way.
void set_path(YAML::Node root, const std::vector<std::string>& path, const YAML::Node& value, const std::string& text) {
  YAML::Node cur = root;
  for (std::size_t i = 0; i + 1 < path.size(); ++i) {
    if (!cur.IsMap()) throw ConfigError(fmt::format("override '{}': '{}' is not a mapping", text, path[i]));
    YAML::Node next = cur[path[i]];
    if (!next.IsDefined() || next.IsNull()) {
      cur[path[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[path[i]];
    }
    cur.reset(next);
  }
  if (!cur.IsMap()) throw ConfigError(fmt::format("override '{}': cannot set a key below a value", text));
  cur[path.back()] = value;
}

// The measured build saw only `detected` of the chip's CPU features (probe cpu_isa_detected): the CPU's isa
// becomes those, in the device's order. A feature the chip does not have is an error, not a new feature.
void restrict_cpu_isa(devices::DeviceProfile& d, const std::vector<std::string>& detected) {
  const auto it = d.compute.find("cpu");
  if (it == d.compute.end())
    throw ConfigError(fmt::format("ondevice probe: cpu_isa_detected on device '{}', which has no cpu unit", d.name));
  devices::ComputeUnitSpec& cpu = it->second;
  for (const auto& f : detected)
    if (!cpu.has_isa(f))
      throw ConfigError(fmt::format("ondevice probe: cpu_isa_detected names '{}', which device '{}' ({}) does not "
                                    "list in compute.cpu.isa [{}]: a build cannot detect a feature the chip lacks",
                                    f, d.name, d.origin, fmt::join(cpu.isa, ", ")));
  std::erase_if(cpu.isa, [&](const std::string& f) {
    return std::find(detected.begin(), detected.end(), f) == detected.end();
  });
}

}  // namespace

double storage_prediction(const OnDeviceQuery& q, const devices::DeviceProfile& device) {
  const devices::StorageSpec& s = device.require_storage(fmt::format("ondevice probe ({} storage read)", q.device));
  const int qd = q.queue_depth > 0 ? static_cast<int>(q.queue_depth) : s.queue_depth;
  const double bytes = q.request_kb * 1024.0;
  const double bps = s.read_bps(bytes, qd);
  if (q.metric == "ms") return 1e3 * qd * bytes / bps;
  return bps / 1e6;
}

double ondevice_prediction(const OnDeviceQuery& q, const devices::DeviceProfile& device, const models::ModelSpec& model) {
  if (q.unit == "storage") return storage_prediction(q, device);
  const std::string who = fmt::format("ondevice probe ({} {} {})", q.device, q.unit, q.phase);
  const std::int64_t context = q.context >= 0 ? q.context : q.phase == "verify" ? 0 : q.tokens;
  double seconds = 0;
  if (q.unit == "npu") {
    devices::NpuSpec npu = device.require_npu(who);
    // The measured export's static graphs (npu.h): its KV length and LM-head rows replace the engine's.
    if (q.phase == "prefill" && q.context >= 0) npu.graph_context = q.context;
    if (!q.graph_logits.empty()) npu.graph_logits_all_rows = q.graph_logits == "all";
    // The weights as the runtime's NPU graphs hold them (engine npu.graph_weight_dtype; unset: the model's).
    const models::ModelSpec on_npu = npu.graph_model(model);
    const models::CostModel cost(on_npu);
    const std::int64_t chunk = q.chunk > 0 ? q.chunk : npu.graph_chunk;
    if (q.phase == "prefill" && npu.cpu_overlap && npu.prefill_backend == devices::NpuBackend::kHtp) {
      // The runtime's CPU runs each chunk's attention in float beside the NPU's next chunk (npu.h).
      const devices::ComputeUnitSpec& cpu = device.unit("cpu", who);
      // The CPU stage is float attention: a rate the unit must state (no fallback to its quantised-matmul rate).
      if (!(cpu.attention_compute_efficiency > 0))
        throw ConfigError(fmt::format(
            "{}: engine '{}' overlaps NPU prefill chunks with CPU attention (npu.cpu_overlap), but device '{}' gives no "
            "compute.cpu.attention_compute_efficiency (the CPU's float attention share of its peak)",
            who, npu.engine_name, q.device));
      seconds = npu.overlapped_prefill_seconds(cost, q.tokens, 0, chunk, [&](const models::Work& w) {
        return cpu.seconds(w, models::DType::kF32);
      });
    } else if (q.phase == "prefill") {
      seconds = npu.chunked_prefill_seconds(cost, q.tokens, 0, chunk);
    } else if (q.phase == "verify") {
      const policies::specdec::SpecDecEnv env{npu, device.unit("cpu", who), 0.0, cost, cost};
      // The graphs with the head of every row in them (lm_head_unit: npu): the placement the calibration
      // of device.npu.half_utilization_chunk on this phase assumed (ondevice_probe.h).
      seconds = policies::specdec::npu_verify_split(env, q.tokens, context, static_cast<int>(chunk),
                                                    policies::specdec::LmHeadUnit::kNpu)
                    .first;
    } else {
      seconds = npu.decode_seconds(cost.decode(context), on_npu.weight_dtype, on_npu.activation_dtype);
    }
    // Graphs built at run time are built before the first chunk runs, inside the timed prefill.
    if (q.phase == "prefill") seconds += npu.graph_build_seconds(on_npu);
  } else {
    if (q.phase == "verify") throw ConfigError(fmt::format("{}: phase verify is an NPU graph pass (unit: npu)", who));
    const devices::ComputeUnitSpec& u = device.unit(q.unit, who);
    const models::CostModel cost(model);
    seconds = u.seconds(q.phase == "prefill" ? cost.prefill(models::PrefillShape{q.tokens, 0, 0, 1}) : cost.decode(context),
                        model.weight_dtype);
  }
  if (q.metric == "ms") return seconds * 1e3;
  return (q.phase == "decode" ? 1.0 : static_cast<double>(q.tokens)) / seconds;
}

double ondevice_prediction(const OnDeviceQuery& q, const std::vector<std::string>& overrides) {
  std::string dev_origin, eng_origin, mod_origin;
  const bool storage = q.unit == "storage";
  YAML::Node dev = profile_yaml("devices", q.device, dev_origin);
  YAML::Node eng = profile_yaml("engines", q.engine, eng_origin);
  YAML::Node mod = storage ? YAML::Node(YAML::NodeType::Map) : profile_yaml("models", q.model, mod_origin);
  if (!q.dtype.empty()) mod["weight_dtype"] = q.dtype;
  if (!q.activation_dtype.empty()) mod["activation_dtype"] = q.activation_dtype;
  if (!q.kv_dtype.empty()) mod["kv_dtype"] = q.kv_dtype;
  if (!q.classifier_dtype.empty()) mod["classifier_dtype"] = q.classifier_dtype;
  if (q.group_size > 0) mod["weight_group_size"] = q.group_size;
  if (!q.scale_dtype.empty()) mod["weight_scale_dtype"] = q.scale_dtype;
  if (q.lora_rank > 0) mod["lora_rank"] = q.lora_rank;
  if (!q.lora_dtype.empty()) mod["lora_dtype"] = q.lora_dtype;
  if (q.linear_dtypes.IsDefined() && !q.linear_dtypes.IsNull()) mod["linear_dtypes"] = yaml_clone(q.linear_dtypes);
  // How the measured build ran on the CPU: the engine then resolves (or refuses) that class and thread count.
  if (!q.cpu_kernels.empty()) set_path(eng, {"cpu", "kernels"}, YAML::Node(q.cpu_kernels), std::string("cpu_kernels=") + q.cpu_kernels);
  // Which of the engine's GPU kernel classes the measured build ran (a build or weight layout whose GEMMs differ).
  if (!q.gpu_kernels.empty()) set_path(eng, {"gpu", "kernels"}, YAML::Node(q.gpu_kernels), std::string("gpu_kernels=") + q.gpu_kernels);
  if (q.threads > 0) set_path(eng, {"cpu", "threads"}, YAML::Node(std::to_string(q.threads)), "threads");
  // When the measured run's NPU graphs were built: the engine then requires (or refuses) its build cost.
  if (!q.graphs.empty()) set_path(eng, {"npu", "graph_build"}, YAML::Node(q.graphs), std::string("graphs=") + q.graphs);
  // The HMX clock corner the measured build voted for (npu.h): the engine then requires its measured ratio.
  if (!q.hmx_clock.empty())
    set_path(eng, {"npu", "hmx_clock"}, YAML::Node(q.hmx_clock), std::string("hmx_clock=") + q.hmx_clock);
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(fmt::format("ondevice probe: override '{}' is not PATH=VALUE", o));
    const std::vector<std::string> path = split(o.substr(0, eq), '.');
    if (path.size() < 2) throw ConfigError(fmt::format("ondevice probe: override '{}' names no key", o));
    YAML::Node value;
    try {
      value = YAML::Load(o.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw ConfigError(fmt::format("ondevice probe: override '{}': bad value ({})", o, e.what()));
    }
    const std::vector<std::string> rest(path.begin() + 1, path.end());
    if (path[0] == "device")
      set_path(dev, rest, value, o);
    else if (path[0] == "engine")
      set_path(eng, rest, value, o);
    else if (path[0] == "model")
      set_path(mod, rest, value, o);
    else
      throw ConfigError(fmt::format("ondevice probe: override '{}' must start with device., engine. or model.", o));
  }
  // The runtime path the measured run used (e.g. mllm's QNN-AOT runtime), laid over the engine after the
  // overrides so that a fit of a runtime value (engine.runtimes.NAME....) reaches it.
  if (!q.runtime.empty()) eng = devices::with_engine_runtime(eng, q.runtime);
  auto src = [](const std::string& origin) { return ConfigSource{std::make_shared<std::string>(origin), ""}; };
  devices::DeviceProfile d = devices::DeviceProfile::from_yaml(dev, src(dev_origin));
  if (!q.cpu_isa_detected.empty()) restrict_cpu_isa(d, q.cpu_isa_detected);
  const devices::EngineProfile e = devices::EngineProfile::from_yaml(eng, src(eng_origin));
  if (storage) return storage_prediction(q, e.apply(d));
  const models::ModelSpec m = models::load_model_spec(mod, src(mod_origin));
  return ondevice_prediction(q, e.apply(d), m);
}

ParamSchema OnDeviceProbe::schema() {
  ParamSchema s;
  s.text("device", std::nullopt, "built-in device profile (or YAML path)");
  s.text("engine", std::string(devices::kDefaultEngine), "engine profile: mllm, llama.cpp, mnn, mlc, qnn, executorch");
  s.text("model", std::string(""), "built-in model profile (or YAML path); required except for unit storage");
  s.text("unit", std::nullopt,
         "compute unit: cpu, gpu or npu (any compute unit name of the device), or storage (phase read)");
  s.text("phase", std::nullopt, "prefill, decode or verify (npu: a draft verification); read (unit storage)")
      .in({"prefill", "decode", "verify", "read"});
  s.integer("tokens", 0, "prompt tokens (prefill), context length (decode) or draft tokens (verify); required except "
                         "for unit storage")
      .range(0, 1 << 20);
  s.real("request_kb", 0.0, "storage read: size of each request (unit storage)").range(0.0, 1 << 20).with_unit("KB");
  s.integer("queue_depth", 0, "storage read: requests kept outstanding (0: the storage's own queue_depth)")
      .range(0, 1 << 16);
  s.integer("context", -1,
            "decode: context before the token (-1: tokens); verify: before the draft (-1: 0); npu prefill: the "
            "static graphs' KV length every pass reads (-1: the engine's npu.graph_context)")
      .range(-1, 1 << 20);
  s.integer("chunk", 0, "npu prefill / verify graph chunk (0: the engine's graph_chunk)").range(0, 1 << 16);
  s.text("dtype", std::string(""), "weight dtype of the published run (\"\": the model profile's)");
  s.text("activation_dtype", std::string(""), "activation dtype of the published run (\"\": the model profile's)");
  s.text("kv_dtype", std::string(""), "KV-cache dtype of the published run (\"\": the model profile's)");
  s.text("classifier_dtype", std::string(""), "LM head dtype of the published run (\"\": the model profile's)");
  s.integer("group_size", 0, "weights per quantisation scale in the published run (0: the model profile's)")
      .range(0, 1 << 20);
  s.text("scale_dtype", std::string(""),
         "storage dtype of each group's scale in the published run (needs group_size; \"\": the model profile's, "
         "fp32 by default); e.g. int8 for QNN's blockwise-expansion encoding (4-bit block scales in 8-bit storage)");
  s.integer("lora_rank", 0, "rank of the published run's adapters on every projection (0: the model profile's)")
      .range(0, 1 << 16);
  s.text("lora_dtype", std::string(""), "dtype of those adapters (\"\": the model profile's)");
  s.node("linear_dtypes", "projections the published run's recipe stores at another dtype, {projection: dtype} "
                          "(absent: the model profile's)");
  s.text("cpu_kernels", std::string(""),
         "the engine's cpu kernel class the measured build ran (engine cpu.kernel_classes; \"\": its `kernels`)");
  s.text("gpu_kernels", std::string(""),
         "the engine's gpu kernel class the measured build ran (engine gpu.families.F.kernel_classes; \"\": its `kernels`)");
  s.integer("threads", 0, "CPU threads of the measured run (0: the engine's cpu.threads)").range(0, 1024);
  s.text_list("cpu_isa_detected", std::vector<std::string>{},
              "CPU features the measured build used (its run-time detection reported them, or it was compiled for "
              "them), where its source shows it missed one the chip has (a subset of the device's compute.cpu.isa; "
              "empty: the device's isa)");
  s.text("runtime", std::string(""),
         "the engine's runtime path the measured run used (a key of the engine's `runtimes`, e.g. mllm's aot); \"\": "
         "the engine profile as it is");
  s.text("graphs", std::string(""),
         "npu prefill: when the measured run's QNN graphs were built: online (inside the timed prefill) or offline "
         "(beforehand); \"\": the engine's npu.graph_build")
      .in({"", "online", "offline"});
  s.text("hmx_clock", std::string(""),
         "npu prefill: the HMX clock corner the measured build voted for: max or lowest (builds that power HMX on "
         "without a clock request), or none (a build without HMX: every matmul on HVX); \"\": the engine's "
         "npu.hmx_clock")
      .in({"", "max", "lowest", "none"});
  s.text("graph_logits", std::string(""),
         "npu prefill: rows of the LM head each pass of the measured export computes: last or all (\"\": the "
         "engine's npu.graph_logits)")
      .in({"", "last", "all"});
  s.text("metric", std::string("tokens_per_s"), "tokens_per_s or ms; mb_per_s (unit storage)")
      .in({"tokens_per_s", "ms", "mb_per_s"});
  return s;
}

OnDeviceProbe::OnDeviceProbe(const Params& p) {
  q_.device = p.text("device");
  q_.engine = p.text("engine");
  q_.model = p.text("model");
  q_.unit = p.text("unit");
  q_.phase = p.text("phase");
  q_.tokens = p.integer("tokens");
  q_.context = p.integer("context");
  q_.chunk = p.integer("chunk");
  q_.dtype = p.text("dtype");
  q_.activation_dtype = p.text("activation_dtype");
  q_.kv_dtype = p.text("kv_dtype");
  q_.classifier_dtype = p.text("classifier_dtype");
  q_.group_size = p.integer("group_size");
  q_.scale_dtype = p.text("scale_dtype");
  q_.lora_rank = p.integer("lora_rank");
  q_.lora_dtype = p.text("lora_dtype");
  q_.linear_dtypes = yaml_clone(p.node("linear_dtypes"));
  q_.metric = p.text("metric");
  q_.cpu_kernels = p.text("cpu_kernels");
  q_.gpu_kernels = p.text("gpu_kernels");
  if (!q_.gpu_kernels.empty() && q_.unit != "gpu") p.fail("gpu_kernels", "says which gpu kernels a build ran: only with unit gpu");
  q_.threads = p.integer("threads");
  q_.cpu_isa_detected = p.text_list("cpu_isa_detected");
  if (!q_.cpu_isa_detected.empty() && q_.unit != "cpu")
    p.fail("cpu_isa_detected", "says which CPU features a build detected: only with unit cpu");
  q_.graphs = p.text("graphs");
  q_.runtime = p.text("runtime");
  if (!q_.graphs.empty() && (q_.unit != "npu" || q_.phase != "prefill"))
    p.fail("graphs", "says when an NPU prefill's graphs were built: only with unit npu and phase prefill");
  q_.graph_logits = p.text("graph_logits");
  if (!q_.graph_logits.empty() && (q_.unit != "npu" || q_.phase != "prefill"))
    p.fail("graph_logits", "says which LM-head rows an NPU prefill's graphs compute: only with unit npu and phase prefill");
  q_.hmx_clock = p.text("hmx_clock");
  if (!q_.hmx_clock.empty() && (q_.unit != "npu" || q_.phase != "prefill"))
    p.fail("hmx_clock", "says at which clock an NPU prefill's HMX matmuls ran: only with unit npu and phase prefill");
  if ((!q_.cpu_kernels.empty() || q_.threads > 0) && q_.unit != "cpu")
    p.fail(q_.cpu_kernels.empty() ? "threads" : "cpu_kernels", "says how a run used the CPU: only with unit cpu");
  q_.request_kb = p.real("request_kb");
  q_.queue_depth = p.integer("queue_depth");
  if (q_.unit == "storage") {
    if (q_.phase != "read") p.fail("phase", "unit storage has one phase: read");
    if (!(q_.request_kb > 0)) p.fail("request_kb", "unit storage needs the request size (request_kb > 0)");
    if (q_.metric == "tokens_per_s") p.fail("metric", "unit storage: mb_per_s or ms");
  } else {
    if (q_.model.empty()) p.fail("model", "missing required key 'model'");
    if (q_.tokens < 1) p.fail("tokens", "missing required key 'tokens' (>= 1)");
    if (q_.phase == "read") p.fail("phase", "phase read is a storage read (unit: storage)");
    if (q_.metric == "mb_per_s") p.fail("metric", "mb_per_s is a storage metric (unit: storage)");
  }
  if (const YAML::Node& n = q_.linear_dtypes; n.IsDefined() && !n.IsNull()) {
    if (!n.IsMap()) p.fail("linear_dtypes", "expected a mapping projection -> dtype, e.g. {v_proj: int6}");
    const std::vector<std::string> known = models::projection_names();
    for (const auto& kv : n) {
      const std::string name = kv.first.as<std::string>();
      if (std::find(known.begin(), known.end(), name) == known.end())
        p.fail("linear_dtypes", fmt::format("unknown projection '{}' (known: {})", name, fmt::join(known, ", ")));
      try {
        (void)models::parse_dtype(kv.second.IsScalar() ? kv.second.Scalar() : std::string("?"));
      } catch (const ConfigError& e) {
        p.fail("linear_dtypes", fmt::format("{}: {}", name, e.what()));
      }
    }
  }
  if (!q_.scale_dtype.empty() && q_.group_size <= 0)
    p.fail("scale_dtype", "says how the published run stored its group scales: only with group_size");
  for (const auto* key : {"dtype", "activation_dtype", "kv_dtype", "classifier_dtype", "lora_dtype", "scale_dtype"}) {
    const std::string v = p.text(key);
    if (v.empty()) continue;
    try {
      (void)models::parse_dtype(v);
    } catch (const ConfigError& e) {
      p.fail(key, e.what());
    }
  }
}

double OnDeviceProbe::evaluate(const ProbeContext& context) const { return ondevice_prediction(q_, context.overrides); }

MOBISIM_REGISTER(Probe, OnDeviceProbe, "ondevice",
                 "Throughput (or latency) of one phase of a model on one unit of a phone under one runtime.");

}  // namespace mobisim::fidelity
