#pragma once
// Plain LFU: the entry with the fewest hits goes first (ties: least recently used).
#include "policies/kvcache/eviction.h"
#include "sim/params.h"

namespace mobisim::policies::kvcache {

class Lfu : public EvictionPolicy {
 public:
  explicit Lfu(const Params& p);
  static ParamSchema schema();
  double score(const EntryStats& e, double now_s) const override;
};

}  // namespace mobisim::policies::kvcache
