#pragma once
// PerCache's request path as one pipeline::Pipeline, for the drivers that serve single PerCache
// queries one after another and time them (percache_overhead: Table 1 and figure 20). Its stages
// are those the `percache` rag policy is made of (rag_policy_stages.h, the translation rag_qa
// serves PerCache with): the `semantic` answer cache (the QA bank: embedding and matching the
// query), the pipeline's retrieval and tree-matching fixed costs, the `chunk_tree` KV-reuse stage
// storing Q/K/V slices (loaded whole from flash by `always_load`), the `qkv_reuse` prefill and the
// `vanilla` decode; but not the policy's idle stage (`percache_scheduler`): nothing is predicted or
// converted between the requests, and what a request stores is stored by the pipeline right after
// its answer (its new slices written to flash in the background, Served::store_write; its QA entry
// into the bank, which costs no flash time, as the rag loop's caching engine counts it).
//
// The driver's `pipeline:` settings map as rag_qa maps them (compute_unit, prefill_unit,
// decode_unit, embed_query_ms, qa_match_ms, retrieval_ms, kv_match_ms); the policy's other
// settings keep the `percache` policy's defaults, its QA entry size the driver's.
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "models/cost_model.h"
#include "policies/pipeline/pipeline.h"
#include "policies/rag/rag_policy.h"

namespace mobisim::policies {

struct PerCacheRequestPath {
  std::unique_ptr<pipeline::Pipeline> pipeline;
  YAML::Node stages;  // the pipeline app keys it was built from (the `percache` translation, no `idle`)
};

// The pipeline app keys of the path for `config` (the driver's pipeline settings) and `qa_entry_kb`
// (one QA-bank entry's size on flash): the `percache` translation without `idle`, its prefill and
// decode stages on the driver's prefill_unit and decode_unit. ConfigError as the translation's.
YAML::Node percache_request_stages(const PipelineConfig& config, double qa_entry_kb);

// The path itself, built from those keys.
PerCacheRequestPath percache_request_path(const models::CostModel& cost, const PipelineConfig& config,
                                          double qa_entry_kb);

// The shape of one query of a PerCache driver: `input_tokens` of prompt that open with `chunks`
// retrieved chunks of `chunk_tokens` each, then the query's own tokens; `output_tokens` of answer.
struct PerCacheQueryShape {
  std::int64_t input_tokens = 0, output_tokens = 0, chunks = 0, chunk_tokens = 0;
};

// Request `id` of that shape: its chunk segments are chunks first_chunk .. first_chunk + chunks - 1
// (segment keys pipeline::chunk_key(i): a chunk the tree has not stored is a new slice, one it has
// is loaded), its query embedding `embedding` (what the answer cache matches and keeps). Error when
// the chunks do not fit in the prompt (chunks x chunk_tokens > input_tokens).
pipeline::Request percache_query(std::int64_t id, const PerCacheQueryShape& shape, std::size_t first_chunk,
                                 std::vector<float> embedding);

}  // namespace mobisim::policies
