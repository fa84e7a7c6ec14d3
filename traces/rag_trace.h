#pragma once
// In-memory form of a RAG workload trace (the HDF5 layout is documented in
// traces/SCHEMA.md). One user = one personal knowledge base (chunks) plus that
// user's queries in arrival order. Policies and experiment drivers only see
// these structs; readers/writers/importers/generators produce them.
#include <cstdint>
#include <string>
#include <vector>

namespace mobisim::traces {

inline constexpr std::int64_t kRagSchemaVersion = 1;

struct Chunk {
  std::string text;               // may be empty for traces without text
  std::int32_t tokens = 0;
  std::vector<float> embedding;   // L2-normalised, meta.embedding_dim values (may be empty when no embedder)
};

struct Query {
  std::string text;
  double arrival_s = 0.0;          // seconds since the start of the trace
  std::int32_t tokens = 0;
  std::vector<float> embedding;
  std::string answer_text;         // reference answer (may be empty)
  std::int32_t answer_tokens = 0;  // decode length to simulate
  std::vector<std::int32_t> retrieved;  // optional precomputed top-k chunk ids, best first
  std::string kind;                // "general", "specific", "generated", "paraphrase", ...
  std::int32_t topic = -1;         // generator topic id or -1
  // Added by the workloads issue: ground-truth relevant chunk ids when the source
  // has them (QMSum relevant_text_span mapped to chunks; generator target chunks),
  // ascending; empty when unknown. For retrieval-quality checks (recall@k).
  std::vector<std::int32_t> relevant;
};

// A window in which the phone is idle (e.g. overnight, charging) and background work may run.
struct IdleWindow {
  double start_s = 0.0;
  double end_s = 0.0;
  bool charging = false;
};

struct UserTrace {
  std::string user_id;
  std::vector<Chunk> chunks;
  std::vector<Query> queries;
  std::vector<std::string> topics;        // e.g. QMSum topic_list (for knowledge abstracts)
  std::vector<IdleWindow> idle_windows;
};

struct RagTraceMeta {
  std::int64_t schema_version = kRagSchemaVersion;
  std::string source;              // "qmsum:val", "generator", "jsonl:<file>"
  std::string tokenizer;           // tokenizer name; see tokens_exact
  bool tokens_exact = false;       // false when token counts are estimates
  std::string embedder;            // e.g. "hashed-tfidf-ngram-v1" or an imported model name
  std::int32_t embedding_dim = 0;
  std::string chunker;             // e.g. "words"
  std::int32_t chunk_words = 0;
  std::string arrival_model;       // description of how arrival times were produced
  std::string params_yaml;         // the generator/importer parameters, as YAML text
  // Added by the workloads issue: how Query::retrieved was computed (retriever
  // description, e.g. "hybrid; bm25okapi(k1=1.5, ...); fusion=rrf(k=60)") and its k.
  std::string retrieval;
  std::int32_t retrieved_k = 0;    // 0 when no query carries precomputed retrieval
};

struct RagTrace {
  RagTraceMeta meta;
  std::vector<UserTrace> users;
};

}  // namespace mobisim::traces
