#pragma once
// The synthetic RAG workload generator (`mobisim trace generate CONFIG`).
//
// Each user owns a knowledge base of `chunks_per_user` chunks of pseudo-text
// (`chunk_words` words). Chunks form `topics` contiguous sections (as meeting
// or mailbox sections do); a chunk's words mix its own key terms, its topic's
// vocabulary and common English words. Queries pick a primary target chunk by
// Zipf popularity over a per-user random permutation of the chunks (repeated
// chunk retrieval, PerCache figure 3), sometimes a second chunk, and are
// phrased with a question template around a few of the targets' key terms;
// with `paraphrase_prob` a query re-asks an earlier one in other words (the
// few highly similar pairs of PerCache figures 2 and 6). With
// `knowledge.late_fraction` > 0 that share of chunks arrives during the trace
// (Chunk::added_s) as updates of hot chunks, which exercises dynamic cache
// refresh; the default 0 keeps every chunk present from the start. Arrivals follow the
// sparse arrival model (traces/workload.h). Token counts, built-in embeddings
// and top-k retrieval are then computed exactly as for imported data, so the
// output has the same schema and the same retrieval semantics as QMSum traces.
//
// All randomness comes from sim::Rng streams "traces/generator/user<i>/..."
// keyed by (seed, 0): the same config and seed give byte-identical files, and
// adding users never changes earlier users.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "sim/params.h"
#include "traces/rag_trace.h"

namespace mobisim::traces {

// Top-level schema of a generator config (nested sections are validated by
// their own schemas inside generate_rag_trace; see configs/workloads/rag_default.yaml).
const ParamSchema& generator_schema();
// Validates every section of `root` (unknown keys are ConfigErrors) and generates.
RagTrace generate_rag_trace(const Params& params, std::uint64_t seed);
// Convenience: parse YAML text (`name` for errors), apply "-p" overrides, generate.
// When `seed` is empty the config's `seed` is used.
RagTrace generate_rag_trace_from_yaml(const YAML::Node& root, const std::string& name,
                                      std::optional<std::uint64_t> seed = std::nullopt);

// The same users, handed to `sink` one at a time in order (a million-query trace never sits in
// memory): `begin` first gets the metadata, the user count and whether chunks arrive late.
using GeneratorBegin = std::function<void(const RagTraceMeta& meta, std::size_t users, bool late_chunks)>;
using GeneratorSink = std::function<void(UserTrace&& user)>;
void generate_rag_trace_streaming(const Params& params, std::uint64_t seed, const GeneratorBegin& begin,
                                  const GeneratorSink& sink);
void generate_rag_trace_streaming_from_yaml(const YAML::Node& root, const std::string& name,
                                            std::optional<std::uint64_t> seed, const GeneratorBegin& begin,
                                            const GeneratorSink& sink);

}  // namespace mobisim::traces
