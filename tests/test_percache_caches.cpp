// The two cache layers on their own: QA bank thresholds and LFU, the knowledge
// tree's prefix matching, boundary rule 1, LFU and PGDSF eviction (by hand).
#include <gtest/gtest.h>

#include <cmath>

#include "policies/rag/kv_tree.h"
#include "policies/rag/qa_bank.h"
#include "sim/error.h"
#include "sim/rng.h"
#include "traces/embedder.h"

namespace mobisim::policies {
namespace {

std::vector<float> unit(double angle) {  // a 2-D unit vector; cos between two = cos(angle difference)
  return {static_cast<float>(std::cos(angle)), static_cast<float>(std::sin(angle))};
}

QaEntry entry(const std::string& q, std::vector<float> emb, bool answered = true) {
  QaEntry e;
  e.query = q;
  e.embedding = std::move(emb);
  e.answered = answered;
  e.answer = answered ? "answer to " + q : "";
  return e;
}

TEST(PerCacheQaBank, ThresholdDecidesHitAndPendingEntriesNeverMatch) {
  QaBank bank(100e6, 4e3);
  bank.insert(entry("a", unit(0.0)));
  bank.insert(entry("pending", unit(0.3), /*answered=*/false));
  const auto q = unit(std::acos(0.9));  // cos 0.9 to "a", closer still to the pending entry
  const QaMatch m85 = bank.match(q, 0.85);
  ASSERT_TRUE(m85.index.has_value());
  EXPECT_EQ(bank.entries()[*m85.index].query, "a");
  EXPECT_NEAR(m85.similarity, 0.9, 1e-6);
  const QaMatch m95 = bank.match(q, 0.95);
  EXPECT_FALSE(m95.index.has_value());
  EXPECT_NEAR(m95.similarity, 0.9, 1e-6);  // still reported
  EXPECT_EQ(bank.pending(), 1u);
  // Exactly at the threshold is a hit.
  EXPECT_TRUE(bank.match(unit(0.0), 1.0).index.has_value());
}

TEST(PerCacheQaBank, LfuEvictsLeastHitThenOldest) {
  QaBank bank(3 * 4e3, 4e3);  // room for three entries
  bank.insert(entry("a", unit(0.0)));
  bank.insert(entry("b", unit(1.0)));
  bank.insert(entry("c", unit(2.0)));
  bank.touch(0);  // a: 1 hit
  bank.touch(2);  // c: 1 hit
  bank.insert(entry("d", unit(3.0)));  // evicts b (0 hits)
  ASSERT_EQ(bank.size(), 3u);
  EXPECT_EQ(bank.entries()[0].query, "a");
  EXPECT_EQ(bank.entries()[1].query, "c");
  EXPECT_EQ(bank.entries()[2].query, "d");
  bank.insert(entry("e", unit(4.0)));  // d has 0 hits: it goes (a, c have 1)
  EXPECT_EQ(bank.entries()[2].query, "e");
  bank.insert(entry("f", unit(5.0)));  // e (0 hits) goes
  EXPECT_EQ(bank.entries()[2].query, "f");
  EXPECT_EQ(bank.evictions(), 3u);
  EXPECT_THROW(QaBank(1e3, 4e3), ConfigError);  // smaller than one entry
}

KvSlice slice(std::int32_t chunk, std::int64_t tokens = 100, double cost = 1.0) {
  return KvSlice{chunk, tokens, tokens * 1.0e3, cost};
}

TEST(PerCacheKvTree, MatchWalksRetrievedOrderUntilFirstMiss) {
  KvTree t(1e12, KvEviction::kLfu, /*boundary_rule=*/true);
  EXPECT_TRUE(t.match({1, 5, 7}).nodes.empty());  // empty tree: not even the system prompt
  t.insert(slice(-1, 64), {slice(1), slice(5), slice(7)});
  KvMatch m = t.match({1, 5, 9});
  EXPECT_EQ(m.chunks, 2);
  EXPECT_EQ(m.nodes.size(), 3u);  // root + 1 + 5
  EXPECT_EQ(m.tokens, 64 + 200);
  EXPECT_EQ(t.match({5, 1, 7}).chunks, 0);  // order matters: only the system prompt matches
  EXPECT_EQ(t.match({5, 1, 7}).nodes.size(), 1u);
  EXPECT_EQ(t.match({1, 5, 7, 3}).chunks, 3);
  EXPECT_EQ(t.match({1, 7, 5}).chunks, 1);  // stops at the first miss even though 5 and 7 exist deeper
}

TEST(PerCacheKvTree, BoundaryRuleOneKeepsTheLastCommonNodeUnshared) {
  KvTree with(1e12, KvEviction::kLfu, true), without(1e12, KvEviction::kLfu, false);
  for (KvTree* t : {&with, &without}) {
    t->insert(slice(-1, 64), {slice(1), slice(5), slice(7)});
    t->insert(slice(-1, 64), {slice(1), slice(5), slice(9)});
  }
  using P = std::vector<std::vector<std::int32_t>>;
  EXPECT_EQ(with.paths(), (P{{1, 5, 7}, {1, 5, 9}}));
  EXPECT_EQ(without.paths(), (P{{1, 5, 7}, {1, 5, 9}}));
  // With the rule chunk 5 is stored twice (its last tokens met 7 in one path, 9 in the other).
  EXPECT_EQ(with.live_nodes(), 1u + 5u);
  EXPECT_EQ(without.live_nodes(), 1u + 4u);
  EXPECT_DOUBLE_EQ(with.used_bytes() - without.used_bytes(), 100e3);
  EXPECT_EQ(with.match({1, 5, 9}).chunks, 3);
  EXPECT_EQ(with.match({1, 5, 7}).chunks, 3);
  // A path that is a prefix of an existing one adds nothing.
  const double before = with.used_bytes();
  EXPECT_EQ(with.insert(slice(-1, 64), {slice(1), slice(5)}), 0.0);
  EXPECT_EQ(with.used_bytes(), before);
}

TEST(PerCacheKvTree, LfuEvictsLeastFrequentLeafUnderTheLimit) {
  // Root 64 KB + room for exactly three 100 KB slices.
  KvTree t(64e3 + 300e3, KvEviction::kLfu, true);
  t.insert(slice(-1, 64), {slice(1)});
  t.insert(slice(-1, 64), {slice(2)});
  t.insert(slice(-1, 64), {slice(3)});
  t.touch(t.match({1}));
  t.touch(t.match({3}));
  t.insert(slice(-1, 64), {slice(4)});  // chunk 2 (freq 1) is the victim
  EXPECT_EQ(t.match({2}).chunks, 0);
  EXPECT_EQ(t.match({1}).chunks, 1);
  EXPECT_EQ(t.match({3}).chunks, 1);
  EXPECT_EQ(t.match({4}).chunks, 1);
  EXPECT_LE(t.used_bytes(), t.limit_bytes());
  // Inner nodes are never evicted before their children: a two-slice path fits only as a whole.
  t.insert(slice(-1, 64), {slice(6), slice(8)});
  for (const auto& p : t.paths()) EXPECT_FALSE(p.empty());
  EXPECT_LE(t.used_bytes(), t.limit_bytes());
  // Lowering the limit evicts.
  t.set_limit(64e3 + 100e3);
  EXPECT_LE(t.used_bytes(), 64e3 + 100e3);
  EXPECT_GT(t.evictions(), 1u);
}

TEST(PerCacheKvTree, PgdsfPriorityIsClockPlusFrequencyTimesCostOverSize) {
  KvTree t(64e3 + 300e3, KvEviction::kPgdsf, true);
  // Three leaves of 100 KB: costs 3 s, 1 s, 2 s.
  t.insert(KvSlice{-1, 64, 64e3, 0.5}, {KvSlice{1, 100, 100e3, 3.0}});
  t.insert(KvSlice{-1, 64, 64e3, 0.5}, {KvSlice{2, 100, 100e3, 1.0}});
  t.insert(KvSlice{-1, 64, 64e3, 0.5}, {KvSlice{3, 100, 100e3, 2.0}});
  t.touch(t.match({2}));  // chunk 2: freq 2 -> priority 0 + 2 * 1 / 1e5 = 2e-5
  // Priorities by hand: chunk 1: 1*3/1e5 = 3e-5; chunk 2: 2e-5; chunk 3: 2e-5 (freq 1, cost 2).
  // Tie between 2 and 3 at 2e-5: least recently used goes -> chunk 3 (inserted before chunk 2's touch).
  t.insert(KvSlice{-1, 64, 64e3, 0.5}, {KvSlice{4, 100, 100e3, 1.0}});
  EXPECT_EQ(t.match({3}).chunks, 0);
  EXPECT_DOUBLE_EQ(t.clock(), 2e-5);  // the clock is the victim's priority
  // Chunk 4 entered with priority clock + 1*1/1e5 = 3e-5; chunk 2 has 2e-5 -> it goes next.
  t.insert(KvSlice{-1, 64, 64e3, 0.5}, {KvSlice{5, 100, 100e3, 10.0}});
  EXPECT_EQ(t.match({2}).chunks, 0);
  EXPECT_EQ(t.match({1}).chunks, 1);
  EXPECT_EQ(t.match({4}).chunks, 1);
  EXPECT_DOUBLE_EQ(t.clock(), 2e-5);
  // Now chunk 1 (3e-5) and chunk 4 (3e-5) tie; chunk 1 is older -> chunk 1 goes; clock 3e-5.
  t.insert(KvSlice{-1, 64, 64e3, 0.5}, {KvSlice{6, 100, 100e3, 1.0}});
  EXPECT_EQ(t.match({1}).chunks, 0);
  EXPECT_DOUBLE_EQ(t.clock(), 3e-5);
}

TEST(PerCacheKvTree, SliceLargerThanTheLimitIsNotCached) {
  KvTree t(50e3, KvEviction::kLfu, true);
  EXPECT_EQ(t.insert(slice(-1, 64), {slice(1)}), 0.0);
  EXPECT_TRUE(t.match({1}).nodes.empty());
  EXPECT_THROW(parse_kv_eviction("lru"), ConfigError);
}

// The bank scores its entries from reused slots of blocked rows: after many evictions and
// pending entries, a match equals the plain scan (dot() over answered entries in insertion
// order, ties to the older), including entries and queries of another length.
TEST(PerCacheQaBank, BlockedMatchEqualsThePlainScanThroughEvictions) {
  sim::Rng rng(3, 0, "test", "qabank");
  QaBank bank(37 * 4096.0, 4096.0);  // 37 entries: evictions start early
  auto random_vec = [&](std::size_t dim) {
    std::vector<float> v(dim);
    for (auto& x : v) x = static_cast<float>(rng.uniform() - 0.5);
    return v;
  };
  for (int step = 0; step < 400; ++step) {
    const std::size_t dim = step % 50 == 7 ? 5 : 24;  // now and then an entry of another length
    QaEntry e = entry(std::string("q").append(std::to_string(step)), random_vec(dim), rng.uniform() < 0.7);
    const std::uint64_t id = bank.insert(e);
    if (step % 3 == 0) bank.touch(bank.size() - 1);
    if (step % 5 == 0) bank.answer(id, "late answer", 3);
    for (const std::size_t qdim : {std::size_t{24}, std::size_t{5}}) {
      const auto q = random_vec(qdim);
      const QaMatch m = bank.match(q, 0.1);
      double best = -1.0;
      std::optional<std::size_t> best_i;
      for (std::size_t i = 0; i < bank.entries().size(); ++i) {
        if (!bank.entries()[i].answered) continue;
        const double sim = traces::dot(q, bank.entries()[i].embedding);
        if (!best_i || sim > best) {
          best = sim;
          best_i = i;
        }
      }
      ASSERT_EQ(m.similarity, best) << "step " << step;
      ASSERT_EQ(m.index, best >= 0.1 ? best_i : std::nullopt) << "step " << step;
    }
  }
  EXPECT_GT(bank.evictions(), 300u);
}

// The match as the walk the document describes: at each level, the live child carrying the next
// retrieved chunk with the longest continuation (ties: more frequent, then older), computed
// afresh level by level. match() finds the same nodes in one descent.
std::int64_t reference_longest(const KvTree& t, std::int32_t node, const std::vector<std::int32_t>& chunks,
                               std::size_t i, std::int32_t* first) {
  const auto& nodes = t.nodes();
  if (i >= chunks.size()) return 0;
  std::int64_t best = 0;
  std::int32_t best_child = -1;
  for (std::int32_t c : nodes[static_cast<std::size_t>(node)].children) {
    const KvNode& n = nodes[static_cast<std::size_t>(c)];
    if (!n.alive || n.chunk != chunks[i]) continue;
    const std::int64_t len = 1 + reference_longest(t, c, chunks, i + 1, nullptr);
    const KvNode* b = best_child < 0 ? nullptr : &nodes[static_cast<std::size_t>(best_child)];
    if (!b || len > best || (len == best && (n.freq > b->freq || (n.freq == b->freq && n.created < b->created)))) {
      best = len;
      best_child = c;
    }
  }
  if (first) *first = best_child;
  return best;
}

TEST(PerCacheKvTree, MatchEqualsTheLevelByLevelWalkOnRandomTreesWithDuplicates) {
  sim::Rng rng(7, 0, "test", "kvtree");
  for (int trial = 0; trial < 20; ++trial) {
    KvTree t(3e6, trial % 2 ? KvEviction::kLfu : KvEviction::kPgdsf, true);
    auto random_list = [&] {
      std::vector<std::int32_t> l(1 + rng.uniform_int(4));
      for (auto& c : l) c = static_cast<std::int32_t>(rng.uniform_int(5));  // few ids: many duplicates
      return l;
    };
    for (int q = 0; q < 200; ++q) {
      const auto chunks = random_list();
      const KvMatch m = t.match(chunks);
      std::vector<std::int32_t> want;
      if (t.nodes()[0].alive) {
        want.push_back(0);
        std::int32_t cur = 0;
        for (std::size_t i = 0; i < chunks.size(); ++i) {
          std::int32_t next = -1;
          reference_longest(t, cur, chunks, i, &next);
          if (next < 0) break;
          want.push_back(next);
          cur = next;
        }
      }
      ASSERT_EQ(m.nodes, want) << "trial " << trial << " query " << q;
      t.touch(m);
      std::vector<KvSlice> sl;
      for (auto c : chunks) sl.push_back(slice(c));
      t.insert(slice(-1, 64), sl);
    }
    EXPECT_GT(t.nodes().size(), 60u);  // the tree grew, evicted and carried duplicate chunks
  }
}

}  // namespace
}  // namespace mobisim::policies
