#pragma once
// Plain LRU: the entry used least recently goes first.
#include "policies/kvcache/eviction.h"
#include "sim/params.h"

namespace mobisim::policies::kvcache {

class Lru : public EvictionPolicy {
 public:
  explicit Lru(const Params& p);
  static ParamSchema schema();
  double score(const EntryStats& e, double now_s) const override;
};

}  // namespace mobisim::policies::kvcache
