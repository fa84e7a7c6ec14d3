#include "models/model_spec.h"

#include <fmt/format.h>

#include "sim/builtin_configs.h"
#include "sim/error.h"

namespace mobisim::models {

namespace {
struct DTypeInfo {
  DType type;
  const char* name;
  double bytes;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "fp32", 4.0}, {DType::kF16, "fp16", 2.0}, {DType::kBF16, "bf16", 2.0},
    {DType::kF8, "fp8", 1.0},   {DType::kInt8, "int8", 1.0}, {DType::kInt4, "int4", 0.5},
    {DType::kInt6, "int6", 0.75},
};
constexpr const char* kProjectionNames[kProjections] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                        "ffn_gate", "ffn_up", "ffn_down"};
constexpr const char* kFfnKindNames[] = {"gated", "plain"};  // in FfnKind's order

FfnKind parse_ffn_kind(const Params& p) {
  const std::string name = p.text("ffn");  // the schema has already refused other values
  return name == kFfnKindNames[static_cast<int>(FfnKind::kPlain)] ? FfnKind::kPlain : FfnKind::kGated;
}

// Weights of one projection of a block (its bias, when the model has one, included; 0 for a gate the
// block does not have).
double projection_params(const ModelSpec& m, Projection p) {
  if (!m.has_projection(p)) return 0.0;
  const double d = m.hidden, q = m.q_dim(), kv = m.kv_dim(), f = m.ffn_hidden, bias = m.qkv_bias ? 1.0 : 0.0;
  switch (p) {
    case Projection::kQ: return d * q + bias * q;
    case Projection::kK:
    case Projection::kV: return d * kv + bias * kv;
    case Projection::kO: return q * d;
    case Projection::kGate:
    case Projection::kUp:
    case Projection::kDown: return d * f;
  }
  return 0.0;
}

// {projection: dtype, ...} of `linear_dtypes`, refused by name when a key or a dtype is unknown.
std::array<std::optional<DType>, kProjections> parse_projection_dtypes(const Params& p) {
  std::array<std::optional<DType>, kProjections> out{};
  const YAML::Node n = p.node("linear_dtypes");
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsMap())
    p.fail("linear_dtypes", fmt::format("expected a mapping projection -> dtype, e.g. {{v_proj: int6, ffn_down: int6}} "
                                        "(projections: {})", fmt::join(projection_names(), ", ")));
  for (const auto& kv : n) {
    const std::string name = kv.first.as<std::string>();
    int index = -1;
    for (int i = 0; i < kProjections; ++i)
      if (name == kProjectionNames[i]) index = i;
    if (index < 0)
      p.fail("linear_dtypes", fmt::format("unknown projection '{}' (known: {})", name, fmt::join(projection_names(), ", ")));
    if (!kv.second.IsScalar()) p.fail("linear_dtypes", fmt::format("{}: expected a dtype name", name));
    try {
      out[index] = parse_dtype(kv.second.Scalar());
    } catch (const ConfigError& e) {
      p.fail("linear_dtypes", fmt::format("{}: {}", name, e.what()));
    }
  }
  return out;
}
}  // namespace

const char* to_string(Projection p) { return kProjectionNames[static_cast<int>(p)]; }

std::vector<std::string> projection_names() { return {std::begin(kProjectionNames), std::end(kProjectionNames)}; }

const char* to_string(FfnKind k) { return kFfnKindNames[static_cast<int>(k)]; }

std::vector<std::string> ffn_kind_names() { return {std::begin(kFfnKindNames), std::end(kFfnKindNames)}; }

double dtype_bytes(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.bytes;
  return 0.0;
}

const char* to_string(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.name;
  return "?";
}

DType parse_dtype(const std::string& name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.type;
  throw ConfigError(fmt::format("unknown dtype '{}' (known: {})", name, fmt::join(dtype_names(), ", ")));
}

std::vector<std::string> dtype_names() {
  std::vector<std::string> out;
  for (const auto& d : kDTypes) out.push_back(d.name);
  return out;
}

std::int64_t ModelSpec::params_per_layer() const {
  const std::int64_t d = hidden, q = q_dim(), kv = kv_dim(), f = ffn_hidden;
  std::int64_t p = d * q + 2 * d * kv + q * d;  // Wq, Wk, Wv, Wo
  p += ffn_matrices() * d * f;                   // (gate,) up, down
  p += 2 * d;                                    // attention and FFN RMSNorm weights
  if (qkv_bias) p += q + 2 * kv;
  return p;
}

std::int64_t ModelSpec::params_outside_layers() const {
  const std::int64_t embed = static_cast<std::int64_t>(vocab) * hidden;
  return embed + (tied_embeddings ? 0 : embed) + hidden;
}

std::int64_t ModelSpec::lora_params_per_layer() const {
  const std::int64_t d = hidden, q = q_dim(), kv = kv_dim(), f = ffn_hidden;
  // Wq, Wk, Wv, Wo; then the FFN's input matrices (gate and up, or up) and down.
  const std::int64_t in_plus_out = (d + q) + 2 * (d + kv) + (q + d) + (ffn_matrices() - 1) * (d + f) + (f + d);
  return static_cast<std::int64_t>(lora_rank) * in_plus_out;
}

std::int64_t ModelSpec::total_params() const {
  return static_cast<std::int64_t>(n_layers) * (params_per_layer() + lora_params_per_layer()) +
         params_outside_layers();
}

double ModelSpec::linear_weight_bytes() const {
  const double scales = weight_group_size > 0 ? dtype_bytes(weight_scale_dtype) / weight_group_size : 0.0;
  return dtype_bytes(weight_dtype) + scales;
}

double ModelSpec::projection_weight_bytes(Projection p) const {
  const std::optional<DType> t = projection_dtype(p);
  if (!t) return linear_weight_bytes();
  const double scales = weight_group_size > 0 ? dtype_bytes(weight_scale_dtype) / weight_group_size : 0.0;
  return dtype_bytes(*t) + scales;
}

double ModelSpec::classifier_weight_bytes() const {
  // A separately quantised classifier is per-channel: one scale per row of `hidden` weights (negligible).
  return classifier_dtype ? dtype_bytes(*classifier_dtype) : linear_weight_bytes();
}

double ModelSpec::weight_bytes() const {
  const double embed = static_cast<double>(vocab) * hidden;
  const double blocks = static_cast<double>(n_layers) * static_cast<double>(params_per_layer());
  const double table = embed * (tied_embeddings ? classifier_weight_bytes() : linear_weight_bytes());
  const double head = tied_embeddings ? 0.0 : embed * classifier_weight_bytes();
  const double adapters = static_cast<double>(n_layers) * lora_bytes_per_layer();
  // Projections a recipe keeps at another dtype: their bytes beyond the blocks' common rate.
  double recipe = 0;
  for (int i = 0; i < kProjections; ++i) {
    const auto p = static_cast<Projection>(i);
    if (projection_dtype(p)) recipe += projection_params(*this, p) * (projection_weight_bytes(p) - linear_weight_bytes());
  }
  return blocks * linear_weight_bytes() + adapters + table + head + hidden * linear_weight_bytes() + n_layers * recipe;
}

ParamSchema ModelSpec::schema() {
  ParamSchema s;
  s.text("name", std::nullopt, "model name");
  s.text("family", std::string("llama"), "architecture family (llama, qwen2, mistral, ...)");
  s.text("source", std::string(""), "where the dimensions come from (model card / config.json)");
  s.integer("n_layers", std::nullopt, "transformer blocks").range(1, 4096);
  s.integer("hidden", std::nullopt, "model width").range(1, 1048576);
  s.integer("n_heads", std::nullopt, "attention (query) heads").range(1, 65536);
  s.integer("n_kv_heads", std::nullopt, "key/value heads (grouped-query attention)").range(1, 65536);
  s.integer("head_dim", std::nullopt, "dimension of one head").range(1, 65536);
  s.integer("ffn_hidden", std::nullopt, "FFN intermediate size: outputs of ffn_up (and ffn_gate), input of ffn_down")
      .range(1, 4194304);
  s.text("ffn", std::string("gated"),
         "FFN kind: gated (SwiGLU/GeGLU: ffn_gate, ffn_up, ffn_down, three matrices hidden x ffn_hidden) or plain "
         "(ffn_up, an activation such as GELU, ffn_down: two matrices, no gate; ChatGLM-6B v1, Phi-2, GPT-2, OPT)")
      .in(ffn_kind_names());
  s.integer("vocab", std::nullopt, "vocabulary size").range(1, 16777216);
  s.boolean("tied_embeddings", true, "classifier shares the embedding table");
  s.boolean("qkv_bias", false, "Q/K/V projections have biases (Qwen)");
  s.real("rope_theta", 10000.0, "RoPE base").positive();
  s.text("weight_dtype", std::string("fp16"), "dtype of weights").in(dtype_names());
  s.text("activation_dtype", std::string("fp16"), "dtype of activations").in(dtype_names());
  s.text("kv_dtype", std::string("fp16"), "dtype of the K/V cache").in(dtype_names());
  s.integer("weight_group_size", 0, "weights per quantisation scale in the linear layers (0: scales not counted)")
      .range(0, 1 << 20);
  s.text("weight_scale_dtype", std::string("fp32"), "dtype of a group's scale").in(dtype_names());
  s.text("classifier_dtype", std::string(""), "dtype of the LM head (and tied embedding) when it differs (\"\": weight_dtype)");
  s.integer("lora_rank", 0, "rank of low-rank adapters on every projection of every block (0: none)").range(0, 65536);
  s.text("lora_dtype", std::string("fp32"), "dtype of the adapters' weights and arithmetic").in(dtype_names());
  s.node("linear_dtypes",
         "projections stored at another dtype than weight_dtype, {projection: dtype} (q_proj, k_proj, v_proj, o_proj, "
         "ffn_gate, ffn_up, ffn_down), e.g. mllm's Q4_K recipe {v_proj: int6, ffn_down: int6}");
  return s;
}

ModelSpec ModelSpec::from_params(const Params& p) {
  ModelSpec m;
  m.name = p.text("name");
  m.family = p.text("family");
  m.n_layers = static_cast<int>(p.integer("n_layers"));
  m.hidden = static_cast<int>(p.integer("hidden"));
  m.n_heads = static_cast<int>(p.integer("n_heads"));
  m.n_kv_heads = static_cast<int>(p.integer("n_kv_heads"));
  m.head_dim = static_cast<int>(p.integer("head_dim"));
  m.ffn_hidden = static_cast<int>(p.integer("ffn_hidden"));
  m.ffn = parse_ffn_kind(p);
  m.vocab = static_cast<int>(p.integer("vocab"));
  m.tied_embeddings = p.boolean("tied_embeddings");
  m.qkv_bias = p.boolean("qkv_bias");
  m.rope_theta = p.real("rope_theta");
  m.weight_dtype = parse_dtype(p.text("weight_dtype"));
  m.activation_dtype = parse_dtype(p.text("activation_dtype"));
  m.kv_dtype = parse_dtype(p.text("kv_dtype"));
  m.weight_group_size = static_cast<int>(p.integer("weight_group_size"));
  m.weight_scale_dtype = parse_dtype(p.text("weight_scale_dtype"));
  if (const std::string c = p.text("classifier_dtype"); !c.empty()) {
    try {
      m.classifier_dtype = parse_dtype(c);
    } catch (const ConfigError& e) {
      p.fail("classifier_dtype", e.what());
    }
  }
  m.lora_rank = static_cast<int>(p.integer("lora_rank"));
  m.lora_dtype = parse_dtype(p.text("lora_dtype"));
  m.projection_dtypes = parse_projection_dtypes(p);
  if (m.projection_dtype(Projection::kGate) && !m.has_projection(Projection::kGate))
    p.fail("linear_dtypes", "ffn_gate: the model's FFN is plain (ffn: plain), it has no gate projection");
  if (m.n_heads % m.n_kv_heads != 0)
    p.fail("n_kv_heads", fmt::format("n_heads ({}) must be a multiple of n_kv_heads ({})", m.n_heads, m.n_kv_heads));
  m.resolved = p.resolved();
  return m;
}

ModelSpec load_model_spec(const YAML::Node& node, const ConfigSource& source) {
  if (node.IsScalar()) return load_model_spec(node.Scalar());
  ParamSchema s = ModelSpec::schema();
  if (node.IsMap() && node["base"]) {  // {base: NAME, field: override, ...}
    const YAML::Node b = node["base"];
    std::string text, origin;
    if (!b.IsScalar() || !find_config("models", b.Scalar(), text, origin))
      throw ConfigError(fmt::format("{}: unknown base model '{}' (built-in: {}; or give a path to a YAML file)",
                                    source.child("base").where(b), b.IsScalar() ? b.Scalar() : std::string("?"),
                                    fmt::join(builtin_model_names(), ", ")));
    YAML::Node merged = load_yaml_string(text, origin);
    for (const auto& kv : node)
      if (kv.first.as<std::string>() != "base") merged[kv.first.as<std::string>()] = yaml_clone(kv.second);
    return ModelSpec::from_params(Params(merged, s, source, {}));
  }
  return ModelSpec::from_params(Params(node, s, source, {}));
}

ModelSpec load_model_spec(const std::string& name_or_path) {
  std::string text, origin;
  if (!find_config("models", name_or_path, text, origin))
    throw ConfigError(fmt::format("unknown model '{}' (built-in: {}; or give a path to a YAML file)", name_or_path,
                                  fmt::join(builtin_model_names(), ", ")));
  YAML::Node root = load_yaml_string(text, origin);
  ParamSchema s = ModelSpec::schema();
  return ModelSpec::from_params(Params(root, s, ConfigSource{std::make_shared<std::string>(origin), ""}, {}));
}

std::vector<std::string> builtin_model_names() { return builtin_names("models"); }

}  // namespace mobisim::models
