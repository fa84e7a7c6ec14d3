#pragma once
// Synthetic CAG requests (CoordGen, issue 10): outputs built as a mixture process over the
// request's context, with prefill top-n predictions that carry the "model-preferred variants"
// of section 3.3, so that retrieval drafting, in-context calibration and draft reuse all have a
// mechanism to act on. Used where the document's outputs (produced by the LLM itself, which we
// cannot run) copy far more of the context than human-written references do (QMSum).
// Layout of what it produces: traces/cag_requests.h (traces/SCHEMA.md, "Synthetic CAG requests").
//
// Output process, token by token (one user's requests in order, the history store growing):
//   - outside a span: with probability `copy_start_prob` a copied span starts, else one novel
//     token (Zipf over the vocabulary) is emitted;
//   - a span's length is geometric with mean `mean_span_tokens` (P(L = k) = (1-1/m)^(k-1) / m),
//     cut where its source ends; its source is, with probability `history_fraction` (when the user
//     has earlier outputs), a uniformly chosen position in the user's earlier outputs (copied
//     verbatim: they are already the model's words), else a uniformly chosen context position;
//   - a token copied from the context is replaced, with probability `variant_prob` (q), by the
//     model-preferred variant of that context position (lexical divergence, section 3.3); the
//     variant of position j is a fixed function of (seed, context[j-1], context[j]).
// Prefill top-n for prompt position p (the next token after p): the context's own next token,
// and, with probability `variant_in_top_n_prob` (a fixed function of the same bigram), the variant
// of position p+1 ranked first before it; the remaining ranks are Zipf filler tokens. Ranks get
// probabilities 1/2, 1/4, ... (only the order is used by calibration).
// Contexts (when not given): `context_tokens` Zipf(`zipf_exponent`) tokens per user, shared by
// the user's requests (a `summary` transcript), plus `instruction_tokens` fresh ones per request.
//
// Deterministic: one sim::Rng stream per user from (seed, user index); bad parameters throw
// ConfigError naming the key.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/params.h"
#include "sim/rng.h"
#include "traces/cag_requests.h"

namespace mobisim::traces {

struct CagSynthParams {
  std::uint64_t seed = 1;
  double copy_start_prob = 0.5;
  double mean_span_tokens = 8;
  double history_fraction = 0;
  double variant_prob = 0.1;
  double variant_in_top_n_prob = 0.5;
  int top_n = 3;
  std::int64_t vocab = 32000;  // the Llama 2 tokenizer's
  double zipf_exponent = 1.0;  // token frequencies of text (Zipf's law)
  // Generated contexts only:
  int users = 8;
  int requests_per_user = 4;
  int context_tokens = 2048;
  int instruction_tokens = 16;
  int output_tokens = 136;
  std::string task = "summary";
  // Throws ConfigError "<where>: <key> ..." for a value outside its domain.
  void validate(const std::string& where) const;
};

// What one output is made of (for tests and the file's provenance).
struct CagSynthStats {
  std::int64_t novel_tokens = 0, copied_tokens = 0, history_tokens = 0, variant_tokens = 0;
  std::int64_t spans = 0, context_spans = 0, history_spans = 0;
  std::int64_t spans_cut = 0;  // spans cut short by the end of their source
  void add(const CagSynthStats& o);
};

// Fills r.output (`output_tokens` long) and, for every prompt position, r.top_ids / r.top_probs,
// over the prompt r.context + r.instruction and the user's earlier outputs `history`.
// Draws from the user's stream `rng`; `zipf` samples token ranks (vocab - 3 of them; ids 0-2 are
// the tokenizer's specials).
CagSynthStats synthesize_output(CagRequestRecord& r, const std::vector<std::vector<int>>& history,
                                std::size_t output_tokens, const CagSynthParams& p, sim::Rng& rng,
                                const sim::ZipfSampler& zipf);
// The variant of a context token `cur` after `prev` (-1 at the start) and whether the prefill
// top-n after `prev` carries it: fixed functions of (seed, prev, cur).
int synth_variant(const CagSynthParams& p, int prev, int cur);
bool synth_variant_in_top_n(const CagSynthParams& p, int prev, int cur);

// One user's requests over the given prompts (context, instruction), in order; each output as
// long as `output_lengths[i]`; `prior` = earlier outputs already in the user's history (they stay
// as given). Deterministic in (p.seed, user_index).
CagSynthStats synthesize_user(std::vector<CagRequestRecord>& requests, const std::vector<std::size_t>& output_lengths,
                              const std::vector<std::vector<int>>& prior, const CagSynthParams& p,
                              std::uint64_t user_index);

// YAML form (a coordgen workload's `synthetic:` mapping): one key per field above, range-checked.
ParamSchema cag_synth_schema();
CagSynthParams cag_synth_params(const Params& p);

// Users with generated contexts (p.users x p.requests_per_user requests).
CagRequestFile synthesize_cag_requests(const CagSynthParams& p, CagSynthStats* stats = nullptr);

}  // namespace mobisim::traces
