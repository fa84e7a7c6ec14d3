#include "policies/kvcache/lfu.h"

#include "sim/registry.h"

namespace mobisim::policies::kvcache {

Lfu::Lfu(const Params&) {}
ParamSchema Lfu::schema() { return {}; }
double Lfu::score(const EntryStats& e, double) const { return static_cast<double>(e.access_count); }

MOBISIM_REGISTER(EvictionPolicy, Lfu, "lfu", "Fewest hits first (ties: least recently used).")

}  // namespace mobisim::policies::kvcache
