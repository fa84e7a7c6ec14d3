#pragma once
// A request as every stage of the pipeline sees it: who sent it, when, its prompt as an ordered
// list of segments (system prompt, retrieved chunks, conversation history, the query), and how
// many tokens its answer has. A segment's key names its content (a chunk id, a system prompt,
// a turn), so two requests that share a segment share its tokens; token_ids() spells the prompt
// as its real token ids when the workload has them, else as ids derived from those keys: what
// token-level stores (the prefix store's rolling hash) read.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/time.h"

namespace mobisim::policies::pipeline {

// A RAG workload's chunk `id` as a segment key (every app and test that lays out RAG prompts).
inline constexpr std::uint64_t kChunkKeyBase = 0xC4000000ULL;
inline std::uint64_t chunk_key(std::size_t id) { return kChunkKeyBase + id; }

// A chunk the retriever ranks for a RAG request: its workload id, its size, and when it joins the
// knowledge bank (traces::Chunk::added_s; 0: there from the start).
struct RankedChunk {
  std::int32_t id = 0;
  std::int64_t tokens = 0;
  double added_s = 0;
};

struct Segment {
  std::string kind;        // "system", "chunk", "query", "history", ...
  std::uint64_t key = 0;   // what the segment holds: equal keys, equal tokens
  std::int64_t tokens = 0;
};

// What is recorded of every served request, whatever served it (apps, document drivers).
struct RequestTimes {
  std::int64_t request = 0, output_tokens = 0;
  double arrival_s = 0, start_s = 0, first_token_s = 0, end_s = 0;
  double active_energy_j = 0;  // the request's own marginal energy (active minus idle power x its work's time)
};

struct Request {
  std::string app;
  std::int64_t id = 0;
  double arrival_s = 0;
  std::vector<Segment> prompt;
  std::int64_t output_tokens = 0;
  // The prompt's real token ids when the workload has them (a chat trace); empty: token_ids()
  // derives them from the segments' keys.
  std::vector<std::int32_t> tokens;
  // The query's embedding (L2-normalised) when the workload has one: what an answer cache matches.
  std::vector<float> embedding;
  // The KV session (a conversation of the app) this request is a turn of, -1: none. A turn's prompt
  // starts with everything its session's earlier turns held (their prompts and answers); what a
  // stage keeps for the session lives until the turn with kv_session_ends.
  std::int64_t kv_session = -1;
  bool kv_session_ends = true;
  // When the app's next request is due (s), -1: unknown or none. A replayed workload knows it; an
  // idle stage that plans its work to end before the next request (PerCache's scheduler starts a
  // job only when its estimate fits) reads it, and runs until claim() when it is unknown.
  double next_arrival_s = -1;
  // A RAG request's retrieval, made when the pipeline retrieves (after an answer-cache miss, as the
  // rag loop does): the first `top_k` chunks of `ranked` (the query's precomputed ranking, best
  // first) already in the knowledge bank then are the prompt's chunk segments, from segment
  // `chunks_at` on (retrieve_at()). Empty `ranked`: the prompt is final as it is.
  std::vector<RankedChunk> ranked;
  std::int64_t top_k = 0;
  std::size_t chunks_at = 0;
  // The reference answer, when the workload has one: what an answer the LLM generates for this
  // request stands for, and what an answer served from a cache is scored against.
  std::string answer_text;

  std::int64_t prompt_tokens() const {
    std::int64_t n = 0;
    for (const Segment& s : prompt) n += s.tokens;
    return n;
  }
  // The prompt as token ids: segment k's i-th token is a hash of (key, i), so equal segments at
  // equal positions give equal ids and different segments almost surely differ.
  std::vector<std::int32_t> token_ids() const {
    if (!tokens.empty()) return tokens;
    std::vector<std::int32_t> ids;
    ids.reserve(static_cast<std::size_t>(prompt_tokens()));
    for (const Segment& s : prompt)
      for (std::int64_t i = 0; i < s.tokens; ++i) {
        std::uint64_t x = s.key * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(i) + 1;
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9ULL;
        x ^= x >> 29;
        ids.push_back(static_cast<std::int32_t>(x & 0x3FFFFFFF));
      }
    return ids;
  }
};

// Lays out `r`'s chunk segments as a retrieval at `now` finds them: the first top_k of r.ranked
// whose added_s has come (sim::from_seconds(added_s) <= now, as the rag loop's retrieval and the
// caching engine test it), replacing the chunk segments from r.chunks_at on. A request without a
// ranking is left as it is.
inline void retrieve_at(Request& r, sim::Time now) {
  if (r.ranked.empty()) return;
  auto first = r.prompt.begin() + static_cast<std::ptrdiff_t>(std::min(r.chunks_at, r.prompt.size()));
  auto last = first;
  while (last != r.prompt.end() && last->kind == "chunk") ++last;
  std::vector<Segment> present;
  for (const RankedChunk& c : r.ranked) {
    if (static_cast<std::int64_t>(present.size()) >= r.top_k) break;
    if (sim::from_seconds(c.added_s) <= now)
      present.push_back({"chunk", chunk_key(static_cast<std::size_t>(c.id)), c.tokens});
  }
  first = r.prompt.erase(first, last);
  r.prompt.insert(first, present.begin(), present.end());
}

// The workload chunk ids of `r`'s chunk segments, in prompt order.
inline std::vector<std::int32_t> chunk_ids(const Request& r) {
  std::vector<std::int32_t> ids;
  for (const Segment& s : r.prompt)
    if (s.kind == "chunk") ids.push_back(static_cast<std::int32_t>(s.key - kChunkKeyBase));
  return ids;
}

// Tokens of the leading segments `a` and `b` share (same kind, key and length).
inline std::int64_t common_prefix_tokens(const std::vector<Segment>& a, const std::vector<Segment>& b) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].key != b[i].key || a[i].tokens != b[i].tokens) break;
    n += a[i].tokens;
  }
  return n;
}

}  // namespace mobisim::policies::pipeline
