#pragma once
// In-memory form of a RAG workload trace (the HDF5 layout is documented in
// traces/SCHEMA.md). One user = one personal knowledge base (chunks) plus that
// user's queries in arrival order. Policies and experiment drivers only see
// these structs; readers/writers/importers/generators produce them.
#include <cstdint>
#include <string>
#include <vector>

namespace mobisim::traces {

// Newest schema this build reads. Version 2 added Chunk::added_s (chunks/added_s); a writer
// stamps the oldest version that can represent the trace: 1 when every chunk is present from
// the start (byte-identical to older files, still readable by older mobisim), 2 otherwise (so
// an older reader refuses it instead of silently treating late chunks as present from t = 0).
inline constexpr std::int64_t kRagSchemaVersion = 2;

struct Chunk {
  std::string text;               // may be empty for traces without text
  std::int32_t tokens = 0;
  std::vector<float> embedding;   // L2-normalised, meta.embedding_dim values (may be empty when no embedder)
  // Seconds since the start of the trace at which the chunk joins the knowledge bank
  // (0: present from the start). Retrieval at time t only sees chunks with added_s <= t.
  double added_s = 0.0;
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

// The schema version a writer stamps on `t` (see kRagSchemaVersion).
inline std::int64_t rag_schema_version_needed(const RagTrace& t) {
  for (const auto& u : t.users)
    for (const auto& c : u.chunks)
      if (c.added_s != 0.0) return 2;
  return 1;
}

// Whether chunk `c` of `u` is in the knowledge bank at `t_s` seconds.
inline bool chunk_present(const UserTrace& u, std::size_t c, double t_s) { return u.chunks[c].added_s <= t_s; }

}  // namespace mobisim::traces
