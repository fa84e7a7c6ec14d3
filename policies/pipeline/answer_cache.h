#pragma once
// The answer-cache stage: a request whose query is close enough to one answered before gets that
// answer without reaching the LLM. The stage charges its own look-up (embedding the query,
// matching it) on the device before the KV-reuse stage runs; on a hit the request ends there.
//
// One implementation = one file pair in this folder, registered with
//   MOBISIM_REGISTER(AnswerCache, MyCache, "my_cache", "doc");
// and chosen in a pipeline app's YAML as `answer_cache: {impl: my_cache, ...}`.
#include <cstdint>
#include <string>

#include "devices/device.h"
#include "policies/pipeline/request.h"

namespace mobisim::policies::pipeline {

struct AnswerLookup {
  bool hit = false;
  double similarity = -1;  // best similarity seen (-1: nothing to compare with)
  // The look-up's time, as its two phases (embedding the query, matching it against the cache).
  double embed_s = 0, match_s = 0;
  // On a hit: the answer served (its text, never empty), and whether the entry was stale (a chunk
  // that joined the knowledge bank after the entry's retrieval now ranks in its query's top
  // chunks: PerCache's dynamic refresh would have re-generated it; false when the cache cannot
  // tell, as the rag loop's QA bank without a retriever).
  std::string answer;
  bool stale = false;
};

class AnswerCache {
 public:
  static constexpr const char* kRegistryKind = "answer_cache";
  virtual ~AnswerCache() = default;
  // Looks the request up, charging the look-up's work to `unit` at `priority`.
  virtual sim::Task<void> lookup(devices::Device& device, const std::string& unit, int priority, const Request& r,
                                 AnswerLookup& out) = 0;
  // After the LLM answered a request that missed: keep its answer for later ones.
  virtual void insert(const Request& r) = 0;
  // Flash its entries take (0: a cache that keeps none there).
  virtual double stored_bytes() const { return 0; }
};

}  // namespace mobisim::policies::pipeline
