// Prefix cache: FNV-1a fingerprints, multi-granularity longest-prefix lookup, verification
// with evict + fallback, eviction order of weighted-LRU / LRU / LFU, caps, bad input.
#include <gtest/gtest.h>

#include <numeric>

#include "policies/kvcache/chat_workload.h"
#include "policies/kvcache/eviction.h"
#include "policies/kvcache/fingerprint.h"
#include "policies/kvcache/prefix_cache.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "sim/rng.h"

namespace mobisim::policies::kvcache {
namespace {

std::unique_ptr<EvictionPolicy> policy(const std::string& yaml) {
  return Registry<EvictionPolicy>::instance().create(load_yaml_string(yaml, "test"), ConfigSource{});
}

std::vector<std::int32_t> seq(int n, int start = 1000) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(KvCacheFingerprint, Fnv1aOfKnownBytes) {
  // The offset basis for no tokens; FNV-1a-64("abcd") = 0xfc179f83ee0724dd (token 0x64636261 is
  // the bytes 'a','b','c','d' little-endian); bytes 01 00 00 00 02 00 00 00 -> 0xc9c28939c99668c6.
  EXPECT_EQ(fingerprint({}), 0xcbf29ce484222325ULL);
  const std::int32_t abcd[] = {0x64636261};
  EXPECT_EQ(fingerprint(abcd), 0xfc179f83ee0724ddULL);
  EXPECT_EQ(fingerprint(abcd), sim::fnv1a64("abcd"));
  const std::int32_t one_two[] = {1, 2};
  EXPECT_EQ(fingerprint(one_two), 0xc9c28939c99668c6ULL);
  // Rolling: each prefix's hash equals the hash of that prefix alone.
  const auto t = seq(200);
  const std::int64_t lens[] = {32, 64, 128, 180};
  const auto h = prefix_fingerprints(t, lens);
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_EQ(h[i], fingerprint(std::span<const std::int32_t>(t).subspan(0, static_cast<std::size_t>(lens[i]))));
  const std::int64_t bad[] = {64, 32};
  EXPECT_THROW(prefix_fingerprints(t, bad), Error);
}

TEST(KvCacheEviction, OrderOfWeightedLruLruLfu) {
  // now = 2 h. score(weighted) = 0.6 count - 0.4 age_h; literal: + 0.4 age_h.
  std::vector<EntryStats> e(4);
  e[0] = {1, 180, 1, 5, 0, 0};        // A: 5 hits, idle 2 h    -> 3.0 - 0.8   = 2.2
  e[1] = {2, 180, 1, 1, 0, 7000};     // B: 1 hit, idle 200 s   -> 0.6 - 0.022 = 0.578
  e[2] = {3, 180, 1, 3, 0, 3600};     // C: 3 hits, idle 1 h    -> 1.8 - 0.4   = 1.4
  e[3] = {4, 180, 1, 2, 0, 0};        // D: 2 hits, idle 2 h    -> 1.2 - 0.8   = 0.4
  const double now = 7200;
  auto order = [&](const EvictionPolicy& p) {
    std::vector<EntryStats> v = e;
    std::sort(v.begin(), v.end(), [&](const EntryStats& a, const EntryStats& b) { return evict_before(p, a, b, now); });
    std::vector<std::uint64_t> keys;
    for (auto& x : v) keys.push_back(x.key);
    return keys;
  };
  EXPECT_NEAR(policy("weighted_lru")->score(e[1], now), 0.6 - 0.4 * 200 / 3600.0, 1e-12);
  EXPECT_EQ(order(*policy("weighted_lru")), (std::vector<std::uint64_t>{4, 2, 3, 1}));
  // Literally, age adds points: B 0.622, D 2.0, C 2.2, A 3.8 (D now outlives B).
  EXPECT_EQ(order(*policy("{impl: weighted_lru, recency: literal}")), (std::vector<std::uint64_t>{2, 4, 3, 1}));
  EXPECT_EQ(order(*policy("lru")), (std::vector<std::uint64_t>{1, 4, 3, 2}));  // A and D tie at 0: lower key first
  EXPECT_EQ(order(*policy("lfu")), (std::vector<std::uint64_t>{2, 4, 3, 1}));
  EXPECT_THROW(policy("{impl: weighted_lru, recency: backwards}"), ConfigError);
}

PrefixCacheConfig cfg(double cap_tokens) {
  PrefixCacheConfig c;
  c.bytes_per_token = 1000;
  c.cap_bytes = cap_tokens * 1000;
  return c;
}

TEST(KvCachePrefix, LongestPrefixAndPartialMatch) {
  PrefixCache cache(cfg(10000), policy("weighted_lru"));
  const auto sys = seq(180);
  const auto rep = cache.insert(sys, 0);
  EXPECT_EQ(rep.inserted, 4);
  EXPECT_EQ(cache.used_bytes(), (32 + 64 + 128 + 180) * 1000.0);
  auto prompt = sys;
  prompt.insert(prompt.end(), {1, 2, 3});
  auto r = cache.lookup(prompt, 10);
  EXPECT_EQ(r.status, LookupStatus::kHit);
  EXPECT_EQ(r.matched_tokens, 180);
  EXPECT_EQ(r.bytes, 180000.0);
  // Diverges at token 130: the 128-token prefix is the longest match.
  prompt[130] = -5;
  r = cache.lookup(prompt, 20);
  EXPECT_EQ(r.matched_tokens, 128);
  // Diverges at token 10: nothing.
  prompt[10] = -5;
  EXPECT_EQ(cache.lookup(prompt, 30).status, LookupStatus::kMiss);
  // Shorter than the smallest granularity, and empty: clean misses.
  EXPECT_EQ(cache.lookup(std::span<const std::int32_t>(sys).subspan(0, 31), 40).status, LookupStatus::kMiss);
  EXPECT_EQ(cache.lookup({}, 40).status, LookupStatus::kMiss);
  EXPECT_EQ(cache.insert({}, 50).inserted, 0);
  // Hits counted on the entries that served them.
  EXPECT_EQ(cache.entries().at(fingerprint(sys)).stats.access_count, 1);
}

TEST(KvCachePrefix, VerificationMismatchEvictsAndFallsBackToFullPrefill) {
  PrefixCache cache(cfg(10000), policy("lru"));
  const auto prompt = seq(100);
  // A colliding entry: stored under the prompt's 64-token fingerprint, other tokens.
  const std::uint64_t key = fingerprint(std::span<const std::int32_t>(prompt).subspan(0, 64));
  InsertReport rep;
  const auto other = seq(64, 5);
  cache.insert_entry(key, other, 0, {}, rep);
  // And a genuine 32-token entry, which the note's rule does not fall back to.
  cache.insert(std::span<const std::int32_t>(prompt).subspan(0, 40), 0);
  ASSERT_EQ(cache.size(), 2u);
  const auto r = cache.lookup(prompt, 1);
  EXPECT_EQ(r.status, LookupStatus::kVerifyMismatch);
  EXPECT_EQ(r.matched_tokens, 0);
  EXPECT_EQ(cache.entries().count(key), 0u);  // evicted
  EXPECT_EQ(cache.size(), 1u);
  // Next time the genuine 32-token prefix serves.
  EXPECT_EQ(cache.lookup(prompt, 2).matched_tokens, 32);
}

TEST(KvCachePrefix, CapEvictsInPolicyOrder) {
  PrefixCacheConfig c = cfg(400);  // 400 tokens' worth
  c.granularities = {100};
  PrefixCache cache(c, policy("lfu"));
  const auto a = seq(100, 0), b = seq(100, 1000), d = seq(100, 2000), e = seq(100, 3000), f = seq(100, 4000);
  cache.insert(a, 0);
  cache.insert(b, 1);
  cache.insert(d, 2);
  cache.insert(e, 3);
  cache.lookup(a, 4);
  cache.lookup(a, 5);
  cache.lookup(d, 6);
  cache.lookup(e, 7);
  // Full: inserting f evicts the entry with the fewest hits (b: 0 hits).
  const auto rep = cache.insert(f, 8);
  EXPECT_EQ(rep.evicted, 1);
  EXPECT_EQ(cache.lookup(b, 9).status, LookupStatus::kMiss);
  EXPECT_EQ(cache.lookup(a, 9).status, LookupStatus::kHit);
  EXPECT_LE(cache.used_bytes(), c.cap_bytes);
  // An entry larger than the whole cap is skipped, not stored over it.
  PrefixCacheConfig small = cfg(150);
  small.granularities = {100, 200};
  PrefixCache s(small, policy("lru"));
  const auto r = s.insert(seq(200), 0);
  EXPECT_EQ(r.inserted, 1);
  EXPECT_EQ(r.too_large, 1);
}

TEST(KvCachePrefix, CapSmallerThanOneEntryIsAClearError) {
  PrefixCacheConfig c = cfg(31);  // smallest granularity: 32 tokens
  try {
    PrefixCache cache(c, policy("weighted_lru"));
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("smaller than one entry"), std::string::npos) << e.what();
  }
  c.cap_bytes = 0;
  EXPECT_THROW(PrefixCache(c, policy("lru")), ConfigError);
}

TEST(KvCacheChatWorkload, PromptsOverlapAndShareAsConfigured) {
  ChatWorkloadConfig w;
  w.sessions = 2000;
  const auto s = generate_chat_sessions(w, 1, 0);
  ASSERT_EQ(s.size(), 2000u);
  int top = 0;
  std::vector<std::vector<std::int32_t>> sys(5);
  for (const auto& x : s) {
    EXPECT_EQ(x.system_tokens, 180);
    EXPECT_GE(x.arrival_s, 0);
    EXPECT_LT(x.arrival_s, w.day_s);
    if (x.variant == 0) ++top;
    if (x.variant >= 0) sys[static_cast<std::size_t>(x.variant)].assign(x.tokens.begin(), x.tokens.begin() + 180);
  }
  EXPECT_NEAR(top / 2000.0, 0.4, 0.04);
  for (std::size_t v = 1; v < 5; ++v) {
    int same = 0;
    for (int i = 0; i < 180; ++i) same += sys[0][static_cast<std::size_t>(i)] == sys[v][static_cast<std::size_t>(i)];
    EXPECT_EQ(same, 162) << "variant " << v;  // 90% overlap
    EXPECT_NE(sys[0][static_cast<std::size_t>(w.variant_diverge_at[v - 1])], sys[v][static_cast<std::size_t>(w.variant_diverge_at[v - 1])]);
  }
  // Deterministic.
  EXPECT_EQ(generate_chat_sessions(w, 1, 0)[17].tokens, s[17].tokens);
}

}  // namespace
}  // namespace mobisim::policies::kvcache
