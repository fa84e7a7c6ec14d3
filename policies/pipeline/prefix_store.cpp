#include "policies/pipeline/prefix_store.h"

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema PrefixStore::schema() {
  ParamSchema s;
  s.int_list("granularities", std::vector<std::int64_t>{32, 64, 128, 180},
             "prefix lengths stored (tokens); seed 001's defaults");
  s.integer("verify_tokens", 16, "leading token ids compared on a hit (seed 001: 16)").non_negative();
  s.real("cap_mb", 512.0, "flash the store may hold").positive().with_unit("MB");
  s.node("eviction", "{impl: weighted_lru|lru|lfu, ...} (default: weighted_lru)");
  s.text("store", std::string("prompt"), "what of a served prompt is stored: prompt (all of it) or system (its "
                                         "leading system segment only)")
      .in({"prompt", "system"});
  return s;
}

PrefixStore::PrefixStore(const Params& p)
    : eviction_(p.has("eviction") ? yaml_clone(p.node("eviction")) : YAML::Load("{impl: weighted_lru}")),
      eviction_source_(p.source_of("eviction")),
      system_only_(p.text("store") == "system") {
  config_.granularities = p.int_list("granularities");
  config_.verify_tokens = p.integer("verify_tokens");
  config_.cap_bytes = p.real("cap_mb") * 1e6;
  Registry<kvcache::EvictionPolicy>::instance().validate(eviction_, eviction_source_);
}

PrefixStore::PrefixStore(kvcache::PrefixCacheConfig config, std::unique_ptr<kvcache::EvictionPolicy> eviction,
                         bool system_only)
    : config_(std::move(config)), system_only_(system_only), eviction_policy_(std::move(eviction)) {}

void PrefixStore::begin(double kv_bytes_per_token) {
  kvcache::PrefixCacheConfig cfg = config_;
  cfg.bytes_per_token = kv_bytes_per_token;
  auto policy = eviction_policy_ ? std::move(eviction_policy_)
                                 : Registry<kvcache::EvictionPolicy>::instance().create(eviction_, eviction_source_);
  cache_ = std::make_unique<kvcache::PrefixCache>(cfg, std::move(policy));
}

KvMatch PrefixStore::match(const Request& r, double now_s) {
  const std::vector<std::int32_t> ids = r.token_ids();
  const kvcache::LookupResult hit = cache_->lookup(ids, now_s);
  if (hit.status != kvcache::LookupStatus::kHit)
    return KvMatch{0, 0, hit.status == kvcache::LookupStatus::kVerifyMismatch};
  return KvMatch{hit.matched_tokens, hit.bytes, false};
}

KvStored PrefixStore::store(const Request& r, double now_s) {
  const std::vector<std::int32_t> ids = r.token_ids();
  std::size_t n = ids.size();
  if (system_only_)
    n = !r.prompt.empty() && r.prompt.front().kind == "system" ? static_cast<std::size_t>(r.prompt.front().tokens) : 0;
  const kvcache::InsertReport report = cache_->insert(std::span<const std::int32_t>(ids).subspan(0, n), now_s);
  return KvStored{report.bytes_written, report.inserted, report.evicted};
}

MOBISIM_REGISTER(KvReuse, PrefixStore, "prefix_store",
                 "Seed 001's persistent prefix KV store: multi-granularity prefixes, rolling hash, weighted LRU on flash.")

}  // namespace mobisim::policies::pipeline
