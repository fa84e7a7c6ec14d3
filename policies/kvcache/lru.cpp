#include "policies/kvcache/lru.h"

#include "sim/registry.h"

namespace mobisim::policies::kvcache {

Lru::Lru(const Params&) {}
ParamSchema Lru::schema() { return {}; }
double Lru::score(const EntryStats& e, double) const { return e.last_access_s; }

MOBISIM_REGISTER(EvictionPolicy, Lru, "lru", "Least recently used first.")

}  // namespace mobisim::policies::kvcache
