#pragma once
// `prefix_store`: the persistent prefix KV store of seed 001 (policies/kvcache/PrefixCache) as a
// KV-reuse stage. Prompts are stored at several granularities under the rolling hash of their
// token ids, up to a byte cap on flash, evicted in the chosen policy's order (weighted LRU by
// default); a request reuses the longest stored prefix.
//
// Parameters:
//   granularities   prefix lengths stored (tokens)
//   verify_tokens   leading token ids compared on a hit (a mismatch is a fingerprint collision)
//   cap_mb          flash the store may hold (MB)
//   eviction        {impl: weighted_lru|lru|lfu, ...} of the kv_eviction_policy registry
//   store           what of a served prompt is stored: prompt (all of it, at every granularity it
//                   covers) or system (only its leading system segment: seed 001's persistent prefix)
#include <memory>
#include <vector>

#include "policies/kvcache/prefix_cache.h"
#include "policies/pipeline/kv_reuse.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class PrefixStore : public KvReuse {
 public:
  explicit PrefixStore(const Params& p);
  // A store configured in code (a document driver's own keys): `system_only` as store: system.
  PrefixStore(kvcache::PrefixCacheConfig config, std::unique_ptr<kvcache::EvictionPolicy> eviction, bool system_only);
  static ParamSchema schema();
  void begin(double kv_bytes_per_token) override;
  KvMatch match(const Request& r, double now_s) override;
  KvStored store(const Request& r, double now_s) override;
  double stored_bytes() const override { return cache_ ? cache_->used_bytes() : 0.0; }
  std::int64_t evictions() const override { return cache_ ? cache_->evictions() : 0; }

 private:
  kvcache::PrefixCacheConfig config_;
  YAML::Node eviction_;
  ConfigSource eviction_source_;
  bool system_only_;
  std::unique_ptr<kvcache::EvictionPolicy> eviction_policy_;  // set in code; else built from eviction_
  std::unique_ptr<kvcache::PrefixCache> cache_;
};

}  // namespace mobisim::policies::pipeline
