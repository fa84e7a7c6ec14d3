#pragma once
// Prefix KV cache for chat sessions (seed 001).
//
// - Prefixes are stored at several granularities (32, 64, 128, 180 tokens by
//   default) under the rolling FNV-1a fingerprint of their token ids.
// - Lookup hashes the prompt once and takes the longest stored prefix. The first
//   `verify_tokens` (16) token ids of the cached sequence are compared with the
//   prompt: a mismatch (a fingerprint collision) evicts the entry and the prompt
//   gets a full prefill, as the note prescribes. A stored file that is missing,
//   truncated, corrupt or foreign is evicted and the next shorter prefix is tried.
// - Inserting over the byte cap evicts entries in the eviction policy's order; an
//   entry larger than the whole cap is not stored (a cap smaller than the smallest
//   granularity is a ConfigError at construction).
// - With a KvStore the entries are real files (loaded with mmap); without one the
//   cache keeps sizes only (what the simulator needs).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "policies/kvcache/eviction.h"
#include "policies/kvcache/kv_store.h"

namespace mobisim::policies::kvcache {

struct PrefixCacheConfig {
  std::vector<std::int64_t> granularities{32, 64, 128, 180};
  std::int64_t verify_tokens = 16;
  double cap_bytes = 512e6;
  double bytes_per_token = 0;  // K/V bytes of one token (size accounting without a store; cap check)
};

enum class LookupStatus { kMiss, kHit, kVerifyMismatch };
const char* to_string(LookupStatus s);

struct LookupResult {
  LookupStatus status = LookupStatus::kMiss;
  std::int64_t matched_tokens = 0;
  std::uint64_t key = 0;
  double bytes = 0;                      // bytes of the matched entry (what a load reads)
  int bad_files_evicted = 0;             // corrupt/truncated/foreign files met (and evicted) on the way
  std::string reason;                    // why the last bad file or mismatch was rejected
  std::unique_ptr<MappedEntry> entry;    // the mapped K/V (with a store)
};

// K/V of the first g tokens of the prefix being inserted (only called with a store).
using KvProvider = std::function<KvTensorsView(std::int64_t g)>;

struct InsertReport {
  int inserted = 0, already_present = 0, too_large = 0, evicted = 0;
  double bytes_written = 0;
  std::vector<std::int64_t> inserted_lengths;
};

class PrefixCache {
 public:
  struct Entry {
    EntryStats stats;
    std::vector<std::int32_t> head;  // first verify_tokens token ids (empty when rebuilt from disk)
  };

  // With a store, the index is rebuilt from the files already there (access counts restart at 0).
  PrefixCache(PrefixCacheConfig cfg, std::unique_ptr<EvictionPolicy> policy, KvStore* store = nullptr);

  LookupResult lookup(std::span<const std::int32_t> prompt, double now_s);
  // Stores `prefix` at every granularity it covers.
  InsertReport insert(std::span<const std::int32_t> prefix, double now_s, const KvProvider& kv = {});
  // Stores one entry under `key` (normally its fingerprint; tests pass another to force a collision).
  void insert_entry(std::uint64_t key, std::span<const std::int32_t> tokens, double now_s, const KvProvider& kv,
                    InsertReport& report);
  bool evict(std::uint64_t key);

  double used_bytes() const { return used_bytes_; }
  std::size_t size() const { return index_.size(); }
  const std::map<std::uint64_t, Entry>& entries() const { return index_; }
  const PrefixCacheConfig& config() const { return cfg_; }
  // Keys in the order the policy would evict them now.
  std::vector<std::uint64_t> eviction_order(double now_s) const;
  std::int64_t evictions() const { return evictions_; }
  double entry_bytes(std::int64_t tokens) const;

 private:
  PrefixCacheConfig cfg_;
  std::unique_ptr<EvictionPolicy> policy_;
  KvStore* store_;
  std::map<std::uint64_t, Entry> index_;  // ordered: eviction ties and iteration are deterministic
  double used_bytes_ = 0;
  std::int64_t evictions_ = 0;
};

}  // namespace mobisim::policies::kvcache
