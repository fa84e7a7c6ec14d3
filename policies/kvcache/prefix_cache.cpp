#include "policies/kvcache/prefix_cache.h"

#include <fmt/format.h>

#include <algorithm>

#include "policies/kvcache/fingerprint.h"
#include "sim/error.h"

namespace mobisim::policies::kvcache {

const char* to_string(LookupStatus s) {
  switch (s) {
    case LookupStatus::kMiss: return "miss";
    case LookupStatus::kHit: return "hit";
    case LookupStatus::kVerifyMismatch: return "verify_mismatch";
  }
  return "?";
}

PrefixCache::PrefixCache(PrefixCacheConfig cfg, std::unique_ptr<EvictionPolicy> policy, KvStore* store)
    : cfg_(std::move(cfg)), policy_(std::move(policy)), store_(store) {
  if (!policy_) throw ConfigError("prefix cache: no eviction policy");
  if (cfg_.granularities.empty()) throw ConfigError("prefix cache: 'granularities' is empty (expected e.g. [32, 64, 128, 180])");
  std::sort(cfg_.granularities.begin(), cfg_.granularities.end());
  cfg_.granularities.erase(std::unique(cfg_.granularities.begin(), cfg_.granularities.end()), cfg_.granularities.end());
  if (cfg_.granularities.front() <= 0)
    throw ConfigError(fmt::format("prefix cache: granularities must be > 0 tokens (got {})", cfg_.granularities.front()));
  if (cfg_.verify_tokens < 0) throw ConfigError("prefix cache: verify_tokens must be >= 0");
  if (!(cfg_.cap_bytes > 0)) throw ConfigError(fmt::format("prefix cache: cap {} bytes must be > 0", cfg_.cap_bytes));
  if (cfg_.bytes_per_token > 0 && entry_bytes(cfg_.granularities.front()) > cfg_.cap_bytes)
    throw ConfigError(fmt::format(
        "prefix cache: cap of {:.0f} bytes is smaller than one entry ({} tokens x {:.0f} bytes = {:.0f} bytes); "
        "raise the cap or lower the smallest granularity",
        cfg_.cap_bytes, cfg_.granularities.front(), cfg_.bytes_per_token, entry_bytes(cfg_.granularities.front())));
  if (store_) {
    for (const auto& info : store_->scan()) {
      Entry e;
      e.stats.key = info.key;
      e.stats.tokens = info.tokens;
      e.stats.bytes = static_cast<double>(info.file_bytes);
      index_.emplace(info.key, std::move(e));
      used_bytes_ += static_cast<double>(info.file_bytes);
    }
  }
}

double PrefixCache::entry_bytes(std::int64_t tokens) const {
  return static_cast<double>(tokens) * cfg_.bytes_per_token;
}

bool PrefixCache::evict(std::uint64_t key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  used_bytes_ -= it->second.stats.bytes;
  index_.erase(it);
  if (store_) store_->remove(key);
  ++evictions_;
  return true;
}

std::vector<std::uint64_t> PrefixCache::eviction_order(double now_s) const {
  std::vector<const EntryStats*> v;
  for (const auto& [k, e] : index_) v.push_back(&e.stats);
  std::sort(v.begin(), v.end(),
            [&](const EntryStats* a, const EntryStats* b) { return evict_before(*policy_, *a, *b, now_s); });
  std::vector<std::uint64_t> out;
  for (auto* s : v) out.push_back(s->key);
  return out;
}

LookupResult PrefixCache::lookup(std::span<const std::int32_t> prompt, double now_s) {
  LookupResult r;
  std::vector<std::int64_t> lengths;
  for (auto g : cfg_.granularities)
    if (g <= static_cast<std::int64_t>(prompt.size())) lengths.push_back(g);
  if (lengths.empty()) return r;  // shorter than any stored prefix (or empty): a clean miss
  const auto hashes = prefix_fingerprints(prompt, lengths);
  for (std::size_t i = lengths.size(); i-- > 0;) {
    const std::int64_t g = lengths[i];
    auto it = index_.find(hashes[i]);
    if (it == index_.end()) continue;
    const std::size_t nverify = static_cast<std::size_t>(std::min(cfg_.verify_tokens, g));
    std::span<const std::int32_t> cached_head;
    std::int64_t cached_len = it->second.stats.tokens;
    LoadResult loaded;
    if (store_) {
      loaded = store_->load(hashes[i]);
      if (!loaded.ok()) {
        // The store already deleted a bad file; drop it from the index and try a shorter prefix.
        used_bytes_ -= it->second.stats.bytes;
        index_.erase(it);
        ++evictions_;
        if (loaded.status != LoadStatus::kMissing) ++r.bad_files_evicted;
        r.reason = fmt::format("{}: {}", to_string(loaded.status), loaded.reason);
        continue;
      }
      cached_head = loaded.entry->tokens;
      cached_len = static_cast<std::int64_t>(loaded.entry->tokens.size());
    } else {
      cached_head = it->second.head;
    }
    const bool same_len = cached_len == g && cached_head.size() >= std::min<std::size_t>(nverify, cached_len);
    const bool same_head =
        same_len && std::equal(cached_head.begin(), cached_head.begin() + static_cast<std::ptrdiff_t>(nverify), prompt.begin());
    if (!same_head) {
      // A fingerprint collision: the note evicts the entry and falls back to full prefill.
      r.status = LookupStatus::kVerifyMismatch;
      r.reason = fmt::format("entry {:016x} ({} tokens): first {} token ids differ from the prompt", hashes[i], cached_len,
                             nverify);
      loaded.entry.reset();
      evict(hashes[i]);
      r.matched_tokens = 0;
      return r;
    }
    it->second.stats.access_count += 1;
    it->second.stats.last_access_s = now_s;
    r.status = LookupStatus::kHit;
    r.matched_tokens = g;
    r.key = hashes[i];
    r.bytes = it->second.stats.bytes;
    r.entry = std::move(loaded.entry);
    return r;
  }
  return r;
}

void PrefixCache::insert_entry(std::uint64_t key, std::span<const std::int32_t> tokens, double now_s,
                               const KvProvider& kv, InsertReport& report) {
  const auto g = static_cast<std::int64_t>(tokens.size());
  if (g == 0) return;
  if (index_.count(key)) {
    ++report.already_present;
    return;
  }
  KvTensorsView view;
  double bytes = entry_bytes(g);
  if (store_) {
    if (!kv) throw Error("prefix cache: inserting into a store needs the K/V (no KvProvider given)");
    view = kv(g);
    bytes = static_cast<double>(KvStore::file_bytes_for(view.tokens, view.layers, view.width, view.dtype));
  }
  if (bytes > cfg_.cap_bytes) {
    ++report.too_large;
    return;
  }
  if (used_bytes_ + bytes > cfg_.cap_bytes) {
    for (auto victim : eviction_order(now_s)) {
      if (used_bytes_ + bytes <= cfg_.cap_bytes) break;
      evict(victim);
      ++report.evicted;
    }
  }
  if (store_) bytes = static_cast<double>(store_->put(key, tokens, view));
  Entry e;
  e.stats.key = key;
  e.stats.tokens = g;
  e.stats.bytes = bytes;
  e.stats.inserted_s = now_s;
  e.stats.last_access_s = now_s;
  e.head.assign(tokens.begin(), tokens.begin() + std::min<std::int64_t>(g, cfg_.verify_tokens));
  index_.emplace(key, std::move(e));
  used_bytes_ += bytes;
  ++report.inserted;
  report.bytes_written += bytes;
  report.inserted_lengths.push_back(g);
}

InsertReport PrefixCache::insert(std::span<const std::int32_t> prefix, double now_s, const KvProvider& kv) {
  InsertReport report;
  std::vector<std::int64_t> lengths;
  for (auto g : cfg_.granularities)
    if (g <= static_cast<std::int64_t>(prefix.size())) lengths.push_back(g);
  if (lengths.empty()) return report;
  const auto hashes = prefix_fingerprints(prefix, lengths);
  for (std::size_t i = 0; i < lengths.size(); ++i)
    insert_entry(hashes[i], prefix.subspan(0, static_cast<std::size_t>(lengths[i])), now_s, kv, report);
  return report;
}

}  // namespace mobisim::policies::kvcache
