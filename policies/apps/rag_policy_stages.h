#pragma once
// One entry of a rag_qa `policies:` list (a `RagPolicy`: naive, meancache, ragcache,
// ragcache_meancache, sleeptime, ragcache_sleeptime, percache, with its parameters as the figures'
// YAMLs write them) and the driver's `pipeline:` settings, translated into the keys of a `pipeline`
// app (policies/apps/pipeline_app.h): the stages the policy is made of, each policy parameter
// carried to the stage that owns it (issue 34: the groundwork for running the PerCache figures on
// `Pipeline::serve`).
//
//   driver / policy key                        pipeline app key
//   pipeline.compute_unit                      unit (the fixed costs, and every stage's default unit)
//   pipeline.prefill_unit / decode_unit        prefill.unit / decode: {impl: vanilla, unit}
//   pipeline.system_prompt_tokens, top_k       the same keys
//   pipeline.answer_tokens                     answer_tokens (when > 0)
//   pipeline.embed_query_ms, qa_match_ms       answer_cache.embed_ms, match_ms (a policy with a QA bank)
//   pipeline.embed_query_ms (no QA bank)       added to retrieval_ms: the loop embeds every query and then
//                                              retrieves, back to back on compute_unit; with no answer
//                                              cache the pipeline's retrieval fixed cost is the one
//                                              busy before the prefill (the same time and energy)
//   pipeline.retrieval_ms                      retrieval_ms
//   pipeline.kv_match_ms                       kv_match_ms (a policy with a tree; the loop charges it
//                                              only then)
//   tau_query, qa_capacity_mb, qa_entry_kb     answer_cache: {impl: semantic, tau_query, capacity_mb, entry_kb}
//   storage_limit_gb, eviction,                kv_reuse: {impl: chunk_tree, ...} (the same keys)
//   boundary_rules, boundary_tokens
//   reuse_mode                                 kv_reuse.payload (qkv_projection: qkv; else kv), prefill
//                                              (qkv_projection / kv_projection: {impl: qkv_reuse, mode};
//                                              prefix_skip: {impl: unit}) and the idle stage's reuse_mode
//   qkv_cache: false (percache)                kv_reuse: {impl: none}, prefill: {impl: unit}
//   qa_bank: false (percache)                  no answer_cache; retrieval_ms = embed_query_ms + retrieval_ms
//                                              (as for every policy without a QA bank) and the idle stage's
//                                              qa_bank: false, embed_ms: embed_query_ms (its background
//                                              embeddings and retrievals cost what the loop's do)
//   every prediction / scheduler / sleep-time  idle: {impl: percache_scheduler | sleeptime, the same keys}
//   key, schedule
//   ragcache, meancache, ragcache_meancache    idle: {impl: reactive_store} (reuse_mode when given): the
//                                              loop's engine writes a served query's QA entry and new
//                                              slices as a deferred job in idle time, and so does the
//                                              stage (not the pipeline right after the answer)
//
// A key is written when the policy's YAML gives it or when the policy's default differs from the
// stage's (e.g. ragcache's eviction: pgdsf), so the translation is the policy as the loop runs it.
// ConfigError (naming the policy, the key and why) for a policy with no mapping, and for a key no
// stage owns: a QA bank key of PerCache without its QA bank (`qa_bank: false`), a tree key of a
// policy without a tree (`qkv_cache: false`), a
// prefill_unit or decode_unit other than compute_unit for a policy whose idle work computes
// (percache, sleeptime, ragcache_sleeptime: the idle stage runs its background prefills and decodes
// on the app's unit; reactive_store only writes to flash).
#include <yaml-cpp/yaml.h>

#include <string>
#include <utility>
#include <vector>

#include "policies/pipeline/pipeline.h"
#include "policies/rag/rag_policy.h"
#include "sim/params.h"

namespace mobisim::policies {

struct PolicyStages {
  std::string label;  // the entry's label (default: its impl), as rag_qa names the variant
  YAML::Node app;     // the pipeline app's keys, without model and workload (the driver's)
};

// `rag_policy`: one entry of a rag_qa `policies:` list (label allowed); `source`: where it is.
PolicyStages pipeline_stages_for(const YAML::Node& rag_policy, const ConfigSource& source,
                                 const PipelineConfig& pipeline);

// A rag_qa experiment file's `pipeline:` settings and `policies:` entries (each with where it is).
// ConfigError when the file is not a rag_qa experiment.
struct RagQaPolicies {
  PipelineConfig pipeline;
  std::vector<std::pair<YAML::Node, ConfigSource>> entries;
};
RagQaPolicies rag_qa_policies(const YAML::Node& experiment_file, const ConfigSource& source);

// Every policy of a rag_qa experiment file (its `experiment.pipeline` and `experiment.policies`),
// translated in order. ConfigError when the file is not a rag_qa experiment.
std::vector<PolicyStages> pipeline_stages_of_experiment(const YAML::Node& experiment_file, const ConfigSource& source);

// The query embedding (ms) the translation of `stages` added to the retrieval's fixed cost: the
// pipeline's embed_query_ms for a policy without an answer cache, else 0.
double embed_in_retrieval_ms(const PolicyStages& stages, const PipelineConfig& pipeline);

// One request the policy's pipeline stages served (query `s.times.request` of `user`) as the
// QueryRecord the policies' removed replay loop wrote: every column of the rag_qa records and
// summary, and of the phone's rag app. `embed_in_retrieval_ms` (see above) is split back out of
// the retrieval into embed_s: the loop's two back-to-back phases.
QueryRecord record_of_served(const pipeline::Served& s, const traces::UserTrace& user, double embed_in_retrieval_ms);

}  // namespace mobisim::policies
