#include "policies/pipeline/prefix_store.h"

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema PrefixStore::schema() {
  ParamSchema s;
  s.int_list("granularities", std::vector<std::int64_t>{32, 64, 128, 180},
             "prefix lengths stored (tokens); seed 001's defaults");
  s.real("cap_mb", 512.0, "flash the store may hold").positive().with_unit("MB");
  s.node("eviction", "{impl: weighted_lru|lru|lfu, ...} (default: weighted_lru)");
  return s;
}

PrefixStore::PrefixStore(const Params& p)
    : eviction_(p.has("eviction") ? yaml_clone(p.node("eviction")) : YAML::Load("{impl: weighted_lru}")),
      eviction_source_(p.source_of("eviction")) {
  config_.granularities = p.int_list("granularities");
  config_.cap_bytes = p.real("cap_mb") * 1e6;
  Registry<kvcache::EvictionPolicy>::instance().validate(eviction_, eviction_source_);
}

void PrefixStore::begin(double kv_bytes_per_token) {
  kvcache::PrefixCacheConfig cfg = config_;
  cfg.bytes_per_token = kv_bytes_per_token;
  cache_ = std::make_unique<kvcache::PrefixCache>(
      cfg, Registry<kvcache::EvictionPolicy>::instance().create(eviction_, eviction_source_));
}

KvMatch PrefixStore::match(const Request& r, double now_s) {
  const std::vector<std::int32_t> ids = r.token_ids();
  const kvcache::LookupResult hit = cache_->lookup(ids, now_s);
  if (hit.status != kvcache::LookupStatus::kHit) return {};
  return KvMatch{hit.matched_tokens, hit.bytes};
}

double PrefixStore::store(const Request& r, double now_s) {
  const std::vector<std::int32_t> ids = r.token_ids();
  return cache_->insert(ids, now_s).bytes_written;
}

MOBISIM_REGISTER(KvReuse, PrefixStore, "prefix_store",
                 "Seed 001's persistent prefix KV store: multi-granularity prefixes, rolling hash, weighted LRU on flash.")

}  // namespace mobisim::policies::pipeline
