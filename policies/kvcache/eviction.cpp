#include "policies/kvcache/eviction.h"

namespace mobisim::policies::kvcache {

bool evict_before(const EvictionPolicy& p, const EntryStats& a, const EntryStats& b, double now_s) {
  const double sa = p.score(a, now_s), sb = p.score(b, now_s);
  if (sa != sb) return sa < sb;
  if (a.last_access_s != b.last_access_s) return a.last_access_s < b.last_access_s;
  return a.key < b.key;
}

}  // namespace mobisim::policies::kvcache
