#pragma once
// The note's weighted LRU (seed 001): score = 0.6 x access_count + 0.4 x recency term.
//
// The note writes the recency term as recency_seconds / 3600, which grows with
// the entry's age: taken literally, an entry untouched for a day outscores one
// used a minute ago, the opposite of "one-off user queries expire within hours".
// We read "recency" as a bonus that shrinks with age and implement
//     score = 0.6 * access_count - 0.4 * age_since_last_access_s / 3600
// (recency: age_penalty): a one-off entry (count 1) loses its 0.6 after 1.5 h idle
// and falls below any fresh entry; a prompt hit 200 times a day keeps ~120 points.
// `recency: literal` keeps the note's sign for comparison.
#include <string>

#include "policies/kvcache/eviction.h"
#include "sim/params.h"

namespace mobisim::policies::kvcache {

class WeightedLru : public EvictionPolicy {
 public:
  explicit WeightedLru(const Params& p);
  static ParamSchema schema();
  double score(const EntryStats& e, double now_s) const override;

 private:
  double count_weight_, recency_weight_, recency_unit_s_;
  bool literal_;
};

}  // namespace mobisim::policies::kvcache
