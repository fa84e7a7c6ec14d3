#pragma once
// Pieces shared by the importers and the generator: the sparse arrival model,
// idle windows, chunking by words, and "enrichment" (token counts, built-in
// embeddings, precomputed top-k retrieval) of a user's chunks and queries.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/tokenizer.h"
#include "sim/params.h"
#include "sim/rng.h"
#include "traces/embedder.h"
#include "traces/rag_trace.h"
#include "traces/retrieval.h"

namespace mobisim::traces {

// Sparse single-user arrivals (PerCache section 2.3: a user's queries are hours
// or days apart). Gaps are exponential in *active* time: the phone is in use
// between active_start_h and active_end_h every day, so consecutive gaps skip
// the night. Every night from charge_start_h to charge_end_h (next day) the
// phone is idle and charging. Idle windows partition the time between queries:
//   [previous arrival + idle_grace_s, next arrival), split at the charging
// windows; the charging parts are charging windows, the rest are non-charging
// idle windows, kept when at least min_idle_s long. The trace starts at 00:00
// of day 0 and ends at the end of the charging window after the last query.
struct ArrivalConfig {
  double mean_gap_s = 4 * 3600.0;
  double active_start_h = 8, active_end_h = 22;
  double charge_start_h = 23, charge_end_h = 7;
  double idle_grace_s = 300;
  double min_idle_s = 1800;
  std::string describe() const;
  void validate() const;  // ConfigError when inconsistent
};

// The YAML schema of an `arrival:` mapping and its reader.
ParamSchema arrival_schema();
ArrivalConfig arrival_from_params(const Params& p);

std::vector<double> sample_arrivals(std::size_t n, const ArrivalConfig& cfg, sim::Rng& rng);
std::vector<IdleWindow> idle_windows(const std::vector<double>& arrivals, const ArrivalConfig& cfg);

// Empty path: the documented estimate (models::EstimateTokenizer).
std::unique_ptr<models::Tokenizer> make_tokenizer(const std::string& sentencepiece_path);

struct WordChunk {
  std::string text;
  std::size_t first_unit = 0, last_unit = 0;  // source units (e.g. transcript turns) it spans, inclusive
};
// Splits a sequence of text units (e.g. "Speaker: content" turns) into chunks of
// `chunk_words` whitespace-separated words; chunks run across unit boundaries,
// the last chunk may be shorter.
std::vector<WordChunk> chunk_by_words(const std::vector<std::string>& units, std::size_t chunk_words);

struct EnrichOptions {
  const models::Tokenizer* tokenizer = nullptr;  // required
  bool embed = true;                             // built-in embedder fitted on the user's chunks
  EmbedderConfig embedder;
  RetrieverConfig retrieval;
  std::size_t retrieve_k = 3;                    // 0: store no precomputed retrieval
};
// Fills tokens (chunks, queries, answers), embeddings and `retrieved` of one user.
void enrich_user(UserTrace& user, const EnrichOptions& opt);
// Fills the meta fields that describe the enrichment.
void describe_enrichment(RagTraceMeta& meta, const EnrichOptions& opt);

}  // namespace mobisim::traces
