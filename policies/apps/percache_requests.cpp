#include "policies/apps/percache_requests.h"

#include <fmt/format.h>

#include <set>
#include <string>

#include "policies/apps/rag_policy_stages.h"
#include "policies/kvsplit/kv_split.h"
#include "policies/pipeline/answer_cache.h"
#include "policies/pipeline/decode_stage.h"
#include "policies/pipeline/kv_residency.h"
#include "policies/pipeline/kv_reuse.h"
#include "policies/pipeline/prefill_stage.h"
#include "sim/error.h"
#include "sim/registry.h"

namespace mobisim::policies {

namespace {

// The keys of the `percache` translation this path builds a stage or an option from, and the prompt
// layout keys it leaves to the driver (which lays out its own prompts). Any other key is a stage the
// path would silently drop: an internal error, so that a change of the translation shows here.
const std::set<std::string>& built_keys() {
  static const std::set<std::string> keys = {"unit",        "retrieval_ms", "kv_match_ms", "answer_cache",
                                             "kv_reuse",    "prefill",      "decode",      "system_prompt_tokens",
                                             "top_k",       "answer_tokens"};
  return keys;
}

double real_or_zero(const YAML::Node& app, const char* key) { return app[key] ? app[key].as<double>() : 0.0; }

}  // namespace

YAML::Node percache_request_stages(const PipelineConfig& config, double qa_entry_kb) {
  // The policy's idle stage runs its background prefills and decodes on the app's one unit, so the
  // translation refuses other prefill / decode units; this path has no idle stage: it translates
  // with one unit and then gives the prefill and decode stages the driver's own.
  PipelineConfig one_unit = config;
  one_unit.prefill_unit = one_unit.decode_unit = config.compute_unit;
  YAML::Node entry(YAML::NodeType::Map);
  entry["impl"] = "percache";
  entry["qa_entry_kb"] = qa_entry_kb;
  const ConfigSource source{nullptr, "percache request path"};
  YAML::Node app = yaml_clone(pipeline_stages_for(entry, source, one_unit).app);
  app.remove("idle");
  app["prefill"]["unit"] = config.prefill_unit;
  app["decode"]["unit"] = config.decode_unit;
  for (auto it = app.begin(); it != app.end(); ++it)
    if (!built_keys().count(it->first.Scalar()))
      throw Error(fmt::format("internal: the percache request path builds no stage from the translation's key '{}'",
                              it->first.Scalar()));
  return app;
}

PerCacheRequestPath percache_request_path(const models::CostModel& cost, const PipelineConfig& config,
                                          double qa_entry_kb) {
  using namespace pipeline;
  PerCacheRequestPath out;
  out.stages = percache_request_stages(config, qa_entry_kb);
  const YAML::Node& app = out.stages;
  const ConfigSource source{nullptr, "percache request path"};
  PipelineOptions options = options_on(app["unit"].Scalar());
  options.retrieval_ms = real_or_zero(app, "retrieval_ms");
  options.kv_match_ms = real_or_zero(app, "kv_match_ms");
  // A store of Q/K/V slices is read back at that weight (as the pipeline app sets it).
  const YAML::Node reuse = Registry<KvReuse>::instance().resolve(app["kv_reuse"], source.child("kv_reuse"));
  if (reuse["payload"] && reuse["payload"].Scalar() == "qkv") options.payload = kvsplit::Payload::kQkv;
  out.pipeline = std::make_unique<Pipeline>(
      cost, options, Registry<KvReuse>::instance().create(app["kv_reuse"], source.child("kv_reuse")),
      Registry<kvsplit::KvSplitStrategy>::instance().create(YAML::Load("{impl: always_load}"),
                                                            source.child("load_or_recompute")),
      Registry<PrefillStage>::instance().create(app["prefill"], source.child("prefill")),
      Registry<AnswerCache>::instance().create(app["answer_cache"], source.child("answer_cache")),
      Registry<DecodeStage>::instance().create(app["decode"], source.child("decode")),
      Registry<KvResidency>::instance().create(YAML::Load("{impl: dram}"), source.child("kv_residency")));
  return out;
}

pipeline::Request percache_query(std::int64_t id, const PerCacheQueryShape& shape, std::size_t first_chunk,
                                 std::vector<float> embedding) {
  const std::int64_t chunk_part = shape.chunks * shape.chunk_tokens;
  if (shape.chunks < 0 || shape.chunk_tokens < 0 || chunk_part > shape.input_tokens)
    throw Error(fmt::format("a PerCache query of {} prompt tokens cannot open with {} chunks of {} tokens",
                            shape.input_tokens, shape.chunks, shape.chunk_tokens));
  pipeline::Request r;
  r.app = "percache";
  r.id = id;
  for (std::int64_t j = 0; j < shape.chunks; ++j)
    r.prompt.push_back({"chunk", pipeline::chunk_key(first_chunk + static_cast<std::size_t>(j)), shape.chunk_tokens});
  // The query's own tokens, keyed by the request: no two queries share them.
  if (shape.input_tokens > chunk_part)
    r.prompt.push_back({"query", 0x9E3700000000ULL + static_cast<std::uint64_t>(id), shape.input_tokens - chunk_part});
  r.output_tokens = shape.output_tokens;
  r.embedding = std::move(embedding);
  return r;
}

}  // namespace mobisim::policies
