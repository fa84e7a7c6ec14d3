#include "policies/apps/rag_policy_stages.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <map>
#include <set>

#include "policies/pipeline/idle_stage.h"
#include "policies/pipeline/kv_reuse.h"
#include "policies/pipeline/answer_cache.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "traces/metrics.h"

namespace mobisim::policies {

namespace {

// What a rag policy is made of: a QA bank (the `semantic` answer cache), a knowledge tree
// (`chunk_tree`), idle work (an idle stage).
struct PolicyShape {
  bool answer_cache = false;
  bool tree = false;
  std::string idle;  // the idle stage's impl; empty: none
  // The idle stage runs background prefills and decodes (on the app's unit); reactive_store only
  // writes to flash.
  bool idle_computes = false;
};

// The policies the translation knows (the registered ones as of issue 34); any other is a ConfigError.
const std::map<std::string, PolicyShape>& known_shapes() {
  static const std::map<std::string, PolicyShape> shapes = {
      {"naive", {false, false, "", false}},
      // The reactive baselines store what they served as the loop's engine does: in idle time.
      {"meancache", {true, false, "reactive_store", false}},
      {"ragcache", {false, true, "reactive_store", false}},
      {"ragcache_meancache", {true, true, "reactive_store", false}},
      {"sleeptime", {true, false, "sleeptime", true}},
      {"ragcache_sleeptime", {true, true, "sleeptime", true}},
      {"percache", {true, true, "percache_scheduler", true}},
  };
  return shapes;
}

// The QA bank's keys (add_qa_params) and the answer cache's names for them.
const std::map<std::string, std::string>& answer_cache_keys() {
  static const std::map<std::string, std::string> keys = {
      {"tau_query", "tau_query"}, {"qa_capacity_mb", "capacity_mb"}, {"qa_entry_kb", "entry_kb"}};
  return keys;
}

// The tree's keys (add_kv_params, reuse_mode apart), the chunk_tree's names for them.
const std::set<std::string>& tree_keys() {
  static const std::set<std::string> keys = {"storage_limit_gb", "eviction", "boundary_rules", "boundary_tokens"};
  return keys;
}

// The keys that choose the policy's shape: read here, carried by no stage.
const std::set<std::string>& shape_keys() {
  static const std::set<std::string> keys = {"impl", "qa_bank", "qkv_cache"};
  return keys;
}

template <class Interface>
ParamSchema schema_of(const std::string& impl) {
  for (auto& e : Registry<Interface>::instance().describe())
    if (e.name == impl) return e.schema;
  throw Error(fmt::format("internal: no registered {} '{}'", Interface::kRegistryKind, impl));
}

bool as_number(const YAML::Node& n, double& out) {
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

// The same value as YAML scalars (numbers compared as numbers: "0.9" and "0.90" are the same).
bool same_value(const YAML::Node& a, const YAML::Node& b) {
  double x = 0, y = 0;
  if (as_number(a, x) && as_number(b, y)) return x == y;
  return a.IsScalar() && b.IsScalar() && a.Scalar() == b.Scalar();
}

// Builds the stage YAML of one policy entry.
class Translation {
 public:
  Translation(const YAML::Node& entry, const ConfigSource& source, const PipelineConfig& pipeline)
      : source_(source), pipeline_(pipeline), entry_(entry) {
    YAML::Node node = yaml_clone(entry);
    if (node.IsMap() && node["label"]) {
      if (!node["label"].IsScalar())
        throw ConfigError(fmt::format("{}: 'label' must be a text", source.child("label").where(entry["label"])));
      label_ = node["label"].Scalar();
      node.remove("label");
    }
    Registry<RagPolicy>::instance().validate(node, source);  // unknown keys, bad values: the policy's own errors
    impl_ = node.IsMap() ? node["impl"].Scalar() : node.Scalar();
    if (label_.empty()) label_ = impl_;
    given_ = node.IsMap() ? node : YAML::Node(YAML::NodeType::Map);
    resolved_ = Registry<RagPolicy>::instance().resolve(node, source);
    const auto it = known_shapes().find(impl_);
    if (it == known_shapes().end()) {
      std::vector<std::string> known;
      for (const auto& shape : known_shapes()) known.push_back(shape.first);
      fail("impl", fmt::format("rag policy '{}' has no pipeline stages yet (known: {})", impl_, fmt::join(known, ", ")));
    }
    shape_ = it->second;
    if (impl_ == "percache") percache_layers();
  }

  YAML::Node app() {
    YAML::Node app(YAML::NodeType::Map);
    app["unit"] = pipeline_.compute_unit;
    app["system_prompt_tokens"] = pipeline_.system_prompt_tokens;
    app["top_k"] = pipeline_.top_k;
    if (pipeline_.answer_tokens_override > 0) app["answer_tokens"] = pipeline_.answer_tokens_override;
    // With no answer cache the loop's query embedding is the busy right before retrieval.
    app["retrieval_ms"] = pipeline_.retrieval_ms + (shape_.answer_cache ? 0.0 : pipeline_.embed_query_ms);
    if (shape_.tree) app["kv_match_ms"] = pipeline_.kv_match_ms;
    if (shape_.answer_cache) app["answer_cache"] = answer_cache();
    app["kv_reuse"] = kv_reuse();
    app["prefill"] = prefill();
    YAML::Node decode(YAML::NodeType::Map);
    decode["impl"] = "vanilla";
    decode["unit"] = pipeline_.decode_unit;
    app["decode"] = decode;
    if (!shape_.idle.empty()) app["idle"] = idle();
    check_every_key_carried();
    return app;
  }

  const std::string& label() const { return label_; }

 private:
  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    // The entry as written (a clone has no line marks).
    const YAML::Node at = entry_.IsMap() && entry_[key] ? entry_[key] : entry_;
    throw ConfigError(fmt::format("{}: rag policy '{}' ({}): {}", source_.child(key).where(at), label_, key, why));
  }

  bool given(const std::string& key) const { return given_.IsMap() && given_[key].IsDefined(); }

  // PerCache's two ablation switches choose its stages: without its QA bank no answer cache (the
  // idle stage then runs on the tree only, told so by its own qa_bank: false).
  void percache_layers() {
    if (!resolved_["qa_bank"].as<bool>()) shape_.answer_cache = false;
    if (!resolved_["qkv_cache"].as<bool>()) shape_.tree = false;
  }

  // Copies `key` of the policy into `stage` as `stage_key` when the policy's YAML gives it or its
  // value differs from the stage's default (`stage_schema`); marks it carried.
  void carry(const std::string& key, YAML::Node& stage, const std::string& stage_key, const ParamSchema& stage_schema) {
    carried_.insert(key);
    const ParamDef* def = stage_schema.find(stage_key);
    if (!def) throw Error(fmt::format("internal: the stage has no key '{}' for rag policy key '{}'", stage_key, key));
    if (!resolved_[key].IsDefined()) return;  // optional, not given
    if (given(key) || !def->default_value || !same_value(resolved_[key], *def->default_value))
      stage[stage_key] = yaml_clone(resolved_[key]);
  }

  YAML::Node answer_cache() {
    const ParamSchema schema = schema_of<pipeline::AnswerCache>("semantic");
    YAML::Node n(YAML::NodeType::Map);
    n["impl"] = "semantic";
    for (const auto& [key, stage_key] : answer_cache_keys())
      if (resolved_[key].IsDefined()) carry(key, n, stage_key, schema);
    n["embed_ms"] = pipeline_.embed_query_ms;
    n["match_ms"] = pipeline_.qa_match_ms;
    return n;
  }

  std::string reuse_mode() const {
    return resolved_["reuse_mode"].IsDefined() ? resolved_["reuse_mode"].Scalar() : std::string();
  }

  YAML::Node kv_reuse() {
    YAML::Node n(YAML::NodeType::Map);
    if (!shape_.tree) {
      n["impl"] = "none";
      return n;
    }
    const ParamSchema schema = schema_of<pipeline::KvReuse>("chunk_tree");
    n["impl"] = "chunk_tree";
    n["payload"] = reuse_mode() == "qkv_projection" ? "qkv" : "kv";
    for (const auto& key : tree_keys()) carry(key, n, key, schema);
    carried_.insert("reuse_mode");
    return n;
  }

  YAML::Node prefill() const {
    YAML::Node n(YAML::NodeType::Map);
    const std::string mode = reuse_mode();
    if (shape_.tree && (mode == "qkv_projection" || mode == "kv_projection")) {
      n["impl"] = "qkv_reuse";
      n["unit"] = pipeline_.prefill_unit;
      n["mode"] = mode;
    } else {
      n["impl"] = "unit";  // no tree, or prefix_skip: the reused positions are skipped outright
      n["unit"] = pipeline_.prefill_unit;
    }
    return n;
  }

  // Every other key of the policy is its idle work's: the idle stage must have it.
  YAML::Node idle() {
    if (shape_.idle_computes && (pipeline_.prefill_unit != pipeline_.compute_unit || pipeline_.decode_unit != pipeline_.compute_unit))
      throw ConfigError(fmt::format(
          "{}: rag policy '{}': pipeline prefill_unit '{}' / decode_unit '{}' differ from compute_unit '{}', but the "
          "{} idle stage runs its background prefills and decodes on the app's unit (where the loop runs them on "
          "prefill_unit / decode_unit): no pipeline counterpart",
          source_.where(entry_), label_, pipeline_.prefill_unit, pipeline_.decode_unit, pipeline_.compute_unit,
          shape_.idle));
    const ParamSchema schema = schema_of<pipeline::IdleStage>(shape_.idle);
    YAML::Node n(YAML::NodeType::Map);
    n["impl"] = shape_.idle;
    if (impl_ == "percache" && !shape_.answer_cache) {
      // No answer cache embeds the query: the app's retrieval_ms counts it, the stage says how much.
      n["qa_bank"] = false;
      n["embed_ms"] = pipeline_.embed_query_ms;
    }
    for (auto it = resolved_.begin(); it != resolved_.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (shape_keys().count(key) || answer_cache_keys().count(key) || tree_keys().count(key)) continue;
      if (key == "reuse_mode") {
        // The idle stage's background prefills save what the tree stores (the loop's reuse_mode).
        carry(key, n, key, schema);
        continue;
      }
      if (schema.find(key)) carry(key, n, key, schema);
    }
    return n;
  }

  // A key the policy's YAML gives that no stage carries is an error (never dropped).
  void check_every_key_carried() const {
    for (auto it = given_.begin(); it != given_.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (shape_keys().count(key) || carried_.count(key)) continue;
      if (tree_keys().count(key) || key == "reuse_mode")
        fail(key, "the policy has no knowledge tree here (qkv_cache: false), so no chunk_tree stage carries it");
      if (answer_cache_keys().count(key))
        fail(key, "the policy has no QA bank here (qa_bank: false), so no answer cache carries it");
      if (key == "schedule")
        fail(key, "a mid-run schedule is the percache_scheduler idle stage's, which this policy has none of");
      fail(key, shape_.idle.empty() ? std::string("no stage of this policy's pipeline owns it")
                                    : fmt::format("the {} idle stage has no such parameter", shape_.idle));
    }
  }

  ConfigSource source_;
  PipelineConfig pipeline_;
  std::string label_, impl_;
  YAML::Node entry_, given_, resolved_;
  PolicyShape shape_;
  std::set<std::string> carried_;
};

}  // namespace

PolicyStages pipeline_stages_for(const YAML::Node& rag_policy, const ConfigSource& source,
                                 const PipelineConfig& pipeline) {
  Translation t(rag_policy, source, pipeline);
  PolicyStages out;
  out.app = t.app();
  out.label = t.label();
  return out;
}

RagQaPolicies rag_qa_policies(const YAML::Node& file, const ConfigSource& source) {
  const YAML::Node experiment = file["experiment"];
  const ConfigSource at = source.child("experiment");
  if (!experiment.IsMap() || !experiment["impl"] || experiment["impl"].Scalar() != "rag_qa")
    throw ConfigError(fmt::format("{}: expected a rag_qa experiment (experiment.impl: rag_qa) to translate its "
                                  "policies into pipeline stages",
                                  at.where(experiment.IsDefined() ? experiment : file)));
  RagQaPolicies out;
  ParamSchema ps = PipelineConfig::schema();
  out.pipeline = PipelineConfig::from_params(Params(experiment["pipeline"], ps, at.child("pipeline"), {}));
  const YAML::Node list = experiment["policies"];
  if (!list.IsSequence())
    throw ConfigError(fmt::format("{}: expected a list of rag policies",
                                  at.child("policies").where(list.IsDefined() ? list : experiment)));
  for (std::size_t i = 0; i < list.size(); ++i) out.entries.emplace_back(list[i], at.child("policies").element(i));
  return out;
}

std::vector<PolicyStages> pipeline_stages_of_experiment(const YAML::Node& file, const ConfigSource& source) {
  const RagQaPolicies policies = rag_qa_policies(file, source);
  std::vector<PolicyStages> out;
  for (const auto& [entry, where] : policies.entries) out.push_back(pipeline_stages_for(entry, where, policies.pipeline));
  return out;
}

double embed_in_retrieval_ms(const PolicyStages& stages, const PipelineConfig& pipeline) {
  return stages.app["answer_cache"] ? 0.0 : pipeline.embed_query_ms;
}

QueryRecord record_of_served(const pipeline::Served& s, const traces::UserTrace& user, double embed_in_retrieval_ms) {
  QueryRecord r;
  r.user = user.user_id;
  r.query_index = s.times.request;
  r.arrival_s = s.times.arrival_s;
  r.start_s = s.times.start_s;
  r.end_s = s.times.end_s;
  r.embed_s = s.embed_s;
  r.qa_match_s = s.qa_match_s;
  r.retrieval_s = s.retrieval_s;
  // One busy of embed + retrieval on the unit, recorded as the two back-to-back phases it stands for.
  if (embed_in_retrieval_ms > 0 && s.retrieval_s > 0) {
    const sim::Time embed = sim::from_ms(embed_in_retrieval_ms);
    r.embed_s = sim::to_seconds(embed);
    r.retrieval_s = sim::to_seconds(sim::from_seconds(s.retrieval_s) - embed);
  }
  r.kv_match_s = s.kv_match_s;
  r.load_s = s.split_s;  // bringing the stored K/V back (the slice loads); stores are written after
  r.prefill_s = s.prefill_s;
  // On the clock's integer ns, as every phase is timed (Served::decode_s is a difference of seconds).
  r.decode_s = sim::to_seconds(sim::from_seconds(s.times.end_s) - s.first_token);
  r.qa_hit = s.answer_hit;
  // An answer-cache hit built no prompt and generated nothing: its record has no tokens.
  if (!s.answer_hit) {
    r.prompt_tokens = s.prompt_tokens;
    r.reused_tokens = s.reused_tokens;
    // The prompt's tokens the unit computed: those not reused, and reused ones the split rebuilt.
    r.computed_tokens = s.prompt_tokens - s.reused_tokens + s.recomputed_tokens;
    r.answer_tokens = s.times.output_tokens;
  }
  r.flops = s.device_flops;
  r.bytes_loaded = s.loaded_bytes;
  r.energy_j = s.device_energy_j;
  r.active_energy_j = s.times.active_energy_j;
  r.qa_stale = s.answer_stale;
  r.kv_hit_chunks = s.matched_chunks;
  r.retrieved_chunks = s.retrieved_chunks;
  r.cache_bytes = s.cache_bytes;
  r.qa_similarity = s.answer_similarity;
  r.served_answer = s.served_answer;
  const auto& q = user.queries.at(static_cast<std::size_t>(s.times.request));
  const traces::AnswerScore score = traces::score_served_answer(s.served_answer, q.answer_text);
  r.rouge_l = score.rouge_l;
  r.bleu = score.bleu;
  // The idle stage's work since the previous request (the background jobs before the query).
  r.bg_s = s.idle_work.busy_s;
  r.bg_flops = s.idle_work.flops;
  r.bg_energy_j = s.idle_work.energy_j;
  r.bg_jobs = s.idle_work.jobs;
  return r;
}

}  // namespace mobisim::policies
