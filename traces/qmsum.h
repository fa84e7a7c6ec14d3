#pragma once
// QMSum importer: one meeting = one user's personal knowledge base (as PerCache
// treats a MISeD meeting user).
//
// * Chunks: every transcript turn becomes "<speaker>: <content>"; the turns'
//   whitespace-separated words are cut into chunks of `chunk_words` words
//   (default 100, PerCache's setting), running across turn boundaries.
// * Queries: `order` "general-first" (default) keeps file order: all of
//   general_query_list, then all of specific_query_list; "interleaved"
//   alternates general, specific, general, ... and appends the rest. kind is
//   "general" or "specific"; the reference answer is kept as answer_text.
// * relevant: for specific queries, the chunks overlapping the query's
//   relevant_text_span turn ranges (inclusive); empty for general queries.
// * topics: topic_list[].topic.
// * Arrival times: the sparse arrival model (traces/workload.h), one stream per
//   meeting: Rng(seed, 0, "traces/arrival/<meeting>", "gaps").
// Meetings are imported in sorted file-name order per split (train, then val,
// then test for "all"); user_id is "<split>/<file stem>".
#include <string>

#include "traces/json.h"
#include "traces/rag_trace.h"
#include "traces/workload.h"

namespace mobisim::traces {

struct QmsumOptions {
  std::string dir;                    // holds train/, val/ (and optionally test/)
  std::string split = "val";          // train | val | test | all
  std::string tokenizer_path;         // SentencePiece model; empty: documented estimate
  std::size_t chunk_words = 100;
  std::string order = "general-first";  // or "interleaved"
  ArrivalConfig arrival;
  std::uint64_t seed = 1;
  bool embed = true;
  EmbedderConfig embedder;
  RetrieverConfig retrieval;
  std::size_t retrieve_k = 3;
  std::size_t max_meetings = 0;       // 0: all
};

RagTrace import_qmsum(const QmsumOptions& opt);

// One meeting from its parsed JSON (`name` names the file in errors). Does not
// count tokens, embed or retrieve (see enrich_user).
UserTrace qmsum_meeting(const json::Value& doc, const std::string& name, const std::string& user_id,
                        const QmsumOptions& opt);

}  // namespace mobisim::traces
