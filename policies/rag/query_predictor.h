#pragma once
// Query prediction (PerCache section 4.1.2, appendix B.3) and the knowledge
// abstract it works from.
//
// What a prediction *costs* is fixed by the document: an LLM prefill of the
// B.3 prompt (its real token count, counted with the experiment's tokenizer)
// plus a decode of the answer "1. ...?; 2. ...?; ..." (its real token count).
// The engine (cache_engine.h) charges that; the prompts are built here.
//
// What a prediction *returns* is pluggable (`predictor: {impl: NAME, ...}`):
//   generator  deterministic questions following the two kinds of the B.3
//              prompt (general / detailed), from the knowledge abstract (the
//              meeting's topic list, or key phrases extracted from the chunks)
//              and, history-based, the recent real queries' phrasing ("mirror
//              the language style") combined with the topics they touched.
//   file       questions produced offline by a real LLM with the B.3 prompts,
//              read from a YAML file (format in query_predictor.cpp).
//   oracle     UPPER BOUND ONLY: returns the user's next real queries. The only
//              predictor that sees the future; results must be labelled so.
// No other predictor may read queries that have not arrived yet: the context
// holds only the served history.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/tokenizer.h"
#include "sim/params.h"
#include "traces/rag_trace.h"
#include "traces/text.h"

namespace mobisim::policies {

// ---- Appendix B.3 prompts (verbatim, with their slots filled) ----
std::string abstract_prompt(const std::vector<std::string>& chunk_texts);
std::string knowledge_prediction_prompt(const std::string& knowledge_type, const std::string& abstract, int n);
std::string history_prediction_prompt(const std::string& knowledge_type, const std::vector<std::string>& history, int n);
// The expected LLM output format "1. q1?; 2. q2?; ..." (what is decoded).
std::string prediction_output(const std::vector<std::string>& questions);

// The knowledge abstract: short items (topics / key phrases), built in batches of chunks.
struct AbstractBatch {
  std::vector<std::int32_t> chunks;
  std::vector<std::string> items;  // what the LLM summarised this batch into
};
struct KnowledgeAbstract {
  std::vector<AbstractBatch> batches;
  std::vector<std::string> items() const;  // all items, batch order
  std::string text() const;                // items joined with "; "
};
// Key phrases of a set of chunks: the top-`n` words by (1 + ln tf) (in the set) x smoothed idf (over
// all the user's chunks), letters only, at least 4 characters, common function words excluded;
// ties by first occurrence. The index (words per chunk, document frequencies) is built once per user.
class PhraseIndex {
 public:
  explicit PhraseIndex(const traces::UserTrace& user);
  // The same from the chunks' words (traces::TextWords::of over the chunk texts).
  PhraseIndex(const traces::UserTrace& user, const traces::TextWords& chunk_words);
  std::vector<std::string> key_phrases(const std::vector<std::int32_t>& chunks, std::size_t n) const;

 private:
  // Candidate words by id (ids in order of first appearance); each chunk's candidate words as ids,
  // in text order; each word's smoothed IDF over the chunks.
  std::vector<std::string> vocab_;
  std::vector<std::vector<std::uint32_t>> chunk_words_;
  std::vector<double> idf_;
};
// source: "topics" (the trace's topic list; falls back to key phrases when it has none),
// "key_phrases" (always extracted from the chunks). `batch_chunks` chunks per abstract prompt.
KnowledgeAbstract build_abstract(const traces::UserTrace& user, const PhraseIndex& phrases, const std::string& source,
                                 std::size_t batch_chunks);
// The same over a subset of the chunks (`chunk_ids`, in order): the chunks present at some time
// (traces with late chunks); with "topics" the topic list is spread over these batches.
KnowledgeAbstract build_abstract(const traces::UserTrace& user, const PhraseIndex& phrases, const std::string& source,
                                 std::size_t batch_chunks, const std::vector<std::int32_t>& chunk_ids);

struct PredictionContext {
  const traces::UserTrace* user = nullptr;
  const PhraseIndex* phrases = nullptr;
  std::string knowledge_type = "meeting record";
  std::vector<std::string> abstract;                    // abstract items built so far
  std::vector<std::string> history;                     // recent real queries, oldest first
  std::vector<std::vector<std::int32_t>> history_chunks;  // the chunks each of them retrieved
  std::vector<std::int32_t> raw_chunks;                 // sleep-time: the raw context window
  std::int64_t queries_served = 0;                      // real queries answered so far
  // Cosine similarity of two texts under the workload's embedder.
  std::function<double(const std::string&, const std::string&)> similarity;
  // similarity(a, b[i]) for every i, the same values computed together (optional: when empty,
  // predictors call `similarity` once per pair).
  std::function<std::vector<double>(const std::string&, const std::vector<std::string>&)> similarities;
};

class QueryPredictor {
 public:
  static constexpr const char* kRegistryKind = "query_predictor";
  virtual ~QueryPredictor() = default;
  virtual std::vector<std::string> knowledge_based(const PredictionContext& ctx, int n) = 0;
  virtual std::vector<std::string> history_based(const PredictionContext& ctx, int n) = 0;
  // Sleep-time Compute: questions about a window of raw chunks (same prompt as knowledge-based).
  virtual std::vector<std::string> raw_context(const PredictionContext& ctx, int n) = 0;
  virtual bool is_oracle() const { return false; }
};

std::unique_ptr<QueryPredictor> make_predictor(const YAML::Node& node, const ConfigSource& source);

}  // namespace mobisim::policies
