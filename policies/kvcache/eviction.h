#pragma once
// Eviction policies of the prefix cache, registered plug-ins of kind
// "kv_eviction_policy": weighted_lru (the note's), lru, lfu.
//
// A policy scores entries; when an insertion would exceed the cap, the entry
// with the lowest score goes first (ties: least recently used, then lowest key,
// so the order is deterministic).
#include <cstdint>
#include <string>

namespace mobisim::policies::kvcache {

struct EntryStats {
  std::uint64_t key = 0;
  std::int64_t tokens = 0;
  double bytes = 0;
  std::int64_t access_count = 0;  // hits served (an insertion is not an access)
  double inserted_s = 0;
  double last_access_s = 0;       // time of the last hit, or of the insertion
};

class EvictionPolicy {
 public:
  static constexpr const char* kRegistryKind = "kv_eviction_policy";
  virtual ~EvictionPolicy() = default;
  // Lower is evicted first.
  virtual double score(const EntryStats& e, double now_s) const = 0;
};

// True when `a` should be evicted before `b`.
bool evict_before(const EvictionPolicy& p, const EntryStats& a, const EntryStats& b, double now_s);

}  // namespace mobisim::policies::kvcache
