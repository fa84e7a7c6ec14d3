#pragma once
// Generic JSONL importer, so that EnronQA, MISeD or one's own logs can be
// brought in. One JSON object per line (blank lines are skipped); "type" says
// what the line is:
//
//   {"type": "user", "user_id": "alice", "topics": ["budget", "hiring"]}      (optional)
//   {"type": "document", "user_id": "alice", "text": "long text ..."}
//       -> cut into chunks of chunk_words words (a document never shares a chunk)
//   {"type": "chunk", "user_id": "alice", "text": "one pre-cut chunk"}
//   {"type": "query", "user_id": "alice", "text": "When is the rehearsal?",
//    "answer": "Friday 3pm",            (optional, default "")
//    "arrival_s": 3600.5,               (optional; all or none of a user's queries)
//    "kind": "email",                   (optional, default "query")
//    "relevant_chunks": [0, 4]}         (optional, chunk ids in this user's order)
//
// Users appear in order of first mention; chunks and queries keep file order.
// Queries with arrival_s must be in non-decreasing arrival order; users whose
// queries have none get the sparse arrival model. Unknown keys are errors (a
// typo is not silently ignored). Errors name file:line:column.
#include <string>

#include "traces/rag_trace.h"
#include "traces/workload.h"

namespace mobisim::traces {

struct JsonlOptions {
  std::string tokenizer_path;
  std::size_t chunk_words = 100;
  ArrivalConfig arrival;
  std::uint64_t seed = 1;
  bool embed = true;
  EmbedderConfig embedder;
  RetrieverConfig retrieval;
  std::size_t retrieve_k = 3;
};

RagTrace import_jsonl(const std::string& path, const JsonlOptions& opt);
// The same from text already in memory (`name` is used in errors).
RagTrace import_jsonl_text(const std::string& text, const std::string& name, const JsonlOptions& opt);

}  // namespace mobisim::traces
