// DynaKV's memory side (seed 003 section 6) and the session replay: cluster
// cache replacement by hand, reads through the simulated UFS, and policies
// replayed over a drifting session.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "devices/device.h"
#include "policies/kvcluster/cluster_cache.h"
#include "policies/kvcluster/flash_io.h"
#include "policies/kvcluster/session_replay.h"
#include "sim/error.h"
#include "test_kvcluster_util.h"

namespace mobisim::policies::kvcluster {
namespace {

using testing::make;

std::shared_ptr<const ClusterReplacement> replacement(const std::string& yaml) {
  return make_replacement(load_yaml_string(yaml, "test"), ConfigSource{});
}

TEST(KvClusterCache, LruAndLfuEvictDifferentClustersByHand) {
  // Capacity 10 KB; A and B 4 KB each. A retrieved at steps 0 and 1, B at 2; C (4 KB) at 3.
  for (const char* impl : {"lru", "lfu"}) {
    ClusterCache cache(10 * 1024, replacement(fmt::format("{{impl: {}}}", impl)));
    EXPECT_FALSE(cache.access({0, 0}, 4096, 0));
    EXPECT_TRUE(cache.access({0, 0}, 4096, 1));
    EXPECT_FALSE(cache.access({0, 1}, 4096, 2));
    EXPECT_FALSE(cache.access({0, 2}, 4096, 3));
    EXPECT_EQ(cache.used_bytes(), 8192);
    if (std::string(impl) == "lru") {
      EXPECT_FALSE(cache.contains({0, 0}));  // least recent
      EXPECT_TRUE(cache.contains({0, 1}));
    } else {
      EXPECT_TRUE(cache.contains({0, 0}));   // two retrievals
      EXPECT_FALSE(cache.contains({0, 1}));
    }
    EXPECT_EQ(cache.hits(), 1);
    EXPECT_EQ(cache.misses(), 3);
  }
}

TEST(KvClusterCache, ClusterAlignedPrefersSmallAndKeepsUpdatedClusters) {
  // A: 8 KB retrieved twice (0.25 per KB); B: 1 KB retrieved once (1 per KB).
  ClusterCache cache(10 * 1024, replacement("{impl: cluster_aligned, reserved_fraction: 0.5, recent_steps: 4}"));
  cache.access({0, 0}, 8192, 0);
  cache.access({0, 0}, 8192, 1);
  cache.access({0, 1}, 1024, 2);
  cache.access({0, 2}, 2048, 3);  // needs 1 KB more: the large A goes although used more often
  EXPECT_FALSE(cache.contains({0, 0}));
  EXPECT_TRUE(cache.contains({0, 1}));
  // D (8 KB) arrives; C was just updated (protected, 2 KB <= 5 KB reserve), B was not: B goes.
  cache.updated({0, 2}, 2048, 4);
  cache.access({0, 3}, 8192, 5);
  EXPECT_TRUE(cache.contains({0, 2}));
  EXPECT_FALSE(cache.contains({0, 1}));
  EXPECT_THROW(replacement("{impl: cluster_aligned, reserved_fraction: 2}"), ConfigError);
}

// The cache as it evicted before its eviction order was kept between evictions: every eviction
// scans every entry (score, then key) and sums the recently updated bytes. The kept order must
// evict exactly as this does (DynaKV's figures depend on it, byte for byte).
class ScanningCache {
 public:
  ScanningCache(std::int64_t capacity, std::shared_ptr<const ClusterReplacement> policy)
      : capacity_(capacity), policy_(std::move(policy)) {}
  bool access(ClusterCache::Key k, std::int64_t bytes, int step) {
    auto it = entries_.find(k);
    if (it != entries_.end()) {
      used_ += bytes - it->second.bytes;
      it->second.bytes = bytes;
      it->second.hits += 1;
      it->second.last_access_step = step;
      return true;
    }
    if (bytes > capacity_) return false;
    make_room(bytes, step, k);
    if (used_ + bytes > capacity_) return false;
    entries_[k] = CachedCluster{bytes, 1, step, -1};
    used_ += bytes;
    return false;
  }
  void updated(ClusterCache::Key k, std::int64_t bytes, int step) {
    auto it = entries_.find(k);
    if (it == entries_.end()) return;
    used_ += bytes - it->second.bytes;
    it->second.bytes = bytes;
    it->second.last_update_step = step;
    make_room(0, step, k);
  }
  bool contains(ClusterCache::Key k) const { return entries_.count(k) > 0; }
  std::int64_t used() const { return used_; }

 private:
  void make_room(std::int64_t need, int step, ClusterCache::Key keep) {
    const int recent = policy_->recent_steps();
    const auto reserve = static_cast<std::int64_t>(policy_->reserved_fraction() * capacity_);
    while (used_ + need > capacity_ && !entries_.empty()) {
      std::int64_t protected_bytes = 0;
      for (const auto& [k, e] : entries_)
        if (recent > 0 && e.last_update_step >= 0 && step - e.last_update_step <= recent) protected_bytes += e.bytes;
      const bool protect = protected_bytes <= reserve;
      const ClusterCache::Key* victim = nullptr;
      double best = 0;
      for (const auto& [k, e] : entries_) {
        if (k == keep) continue;
        if (protect && recent > 0 && e.last_update_step >= 0 && step - e.last_update_step <= recent) continue;
        const double sc = policy_->score(e, step);
        if (!victim || sc < best) {
          victim = &k;
          best = sc;
        }
      }
      if (!victim) return;
      used_ -= entries_.at(*victim).bytes;
      entries_.erase(*victim);
    }
  }
  std::int64_t capacity_, used_ = 0;
  std::shared_ptr<const ClusterReplacement> policy_;
  std::map<ClusterCache::Key, CachedCluster> entries_;
};

TEST(KvClusterCache, TheKeptEvictionOrderEvictsExactlyAsAScanOfEveryEntry) {
  for (const char* impl : {"{impl: cluster_aligned, reserved_fraction: 0.3, recent_steps: 3}", "{impl: lru}",
                           "{impl: lfu}", "{impl: cluster_aligned, reserved_fraction: 0, recent_steps: 0}"}) {
    ClusterCache cache(40 * 1024, replacement(impl));
    ScanningCache scan(40 * 1024, replacement(impl));
    std::uint64_t x = 12345;
    auto next = [&x](std::uint64_t n) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      return (x >> 33) % n;
    };
    int step = 0;
    for (int op = 0; op < 20000; ++op) {
      if (next(8) == 0) ++step;
      const ClusterCache::Key k{static_cast<int>(next(3)), static_cast<int>(next(40))};
      const auto bytes = static_cast<std::int64_t>(512 * (1 + next(12)));
      if (next(4) == 0) {
        cache.updated(k, bytes, step);
        scan.updated(k, bytes, step);
      } else {
        ASSERT_EQ(cache.access(k, bytes, step), scan.access(k, bytes, step)) << impl << " op " << op;
      }
      ASSERT_EQ(cache.used_bytes(), scan.used()) << impl << " op " << op;
      for (int t = 0; t < 3; ++t)
        for (int c = 0; c < 40; ++c) ASSERT_EQ(cache.contains({t, c}), scan.contains({t, c})) << impl << " op " << op;
    }
  }
}

TEST(KvClusterFlashIo, ContiguousRunsBeatScatteredPagesOnUfs40) {
  const auto spec = devices::load_device_profile("oneplus-12").require_storage("test");
  std::vector<ReadRun> scattered(64, ReadRun{0, 4096, 1}), contiguous{ReadRun{0, 64 * 4096, 64}};
  const double t_scattered = simulated_read_seconds(spec, scattered);
  const double t_contiguous = simulated_read_seconds(spec, contiguous);
  // 64 commands at 120k IOPS take at least 64 / 120000 s; one 256 KB run moves at ~2.9 GB/s.
  EXPECT_GE(t_scattered, 64.0 / 120000.0);
  EXPECT_LT(t_contiguous, 0.5 * t_scattered);
  EXPECT_NEAR(t_contiguous, spec.read_seconds(64 * 4096.0), 1e-6);
  EXPECT_DOUBLE_EQ(simulated_read_seconds(spec, {}), 0.0);
}

traces::DriftingSpec replay_spec() {
  traces::DriftingSpec s;
  s.n_layers = 2;
  s.n_kv_heads = 2;
  s.group = 2;
  s.head_dim = 16;
  s.prefill = 256;
  s.decode = 512;
  s.birth_every = 64;
  return s;
}

TEST(KvClusterReplay, FullTopKCapturesAllMassAndEveryPolicyKeepsInvariants) {
  const auto session = traces::generate_drifting_session(replay_spec());
  ReplayOptions opt;
  opt.accuracy_every = 1;
  for (const char* impl : {"no_cluster", "pqcache", "clusterkv", "dynakv"}) {
    auto p = make(fmt::format("{{impl: {}, top_k_percent: 100}}", impl));
    const auto r = replay_session(session, *p, opt);
    ASSERT_EQ(r.steps.size(), 512u);
    for (const auto& st : r.steps) EXPECT_NEAR(st.mass, 1.0, 1e-5) << impl;
  }
}

TEST(KvClusterReplay, AccuracyEverySamplesExactlyTheEveryStepValuesAndChangesNothingElse) {
  auto spec = replay_spec();
  spec.decode = 64;
  const auto session = traces::generate_drifting_session(spec);
  auto p = make("{impl: dynakv, top_k_percent: 10}");
  ReplayOptions every, sampled, off;
  every.accuracy_every = 1;
  sampled.accuracy_every = 5;
  const auto a = replay_session(session, *p, every);
  const auto b = replay_session(session, *p, sampled);
  const auto c = replay_session(session, *p, off);
  ASSERT_EQ(a.steps.size(), 64u);
  int measured = 0;
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_TRUE(a.steps[i].mass_measured);
    EXPECT_GT(a.steps[i].mass, 0.0);
    EXPECT_EQ(b.steps[i].mass_measured, i % 5 == 0) << i;
    EXPECT_EQ(b.steps[i].mass, i % 5 == 0 ? a.steps[i].mass : 0.0) << i;  // bit-identical when sampled
    EXPECT_FALSE(c.steps[i].mass_measured);
    measured += b.steps[i].mass_measured;
    // The measurement is read-only: everything else of the step is the same.
    EXPECT_EQ(c.steps[i].read_bytes, a.steps[i].read_bytes);
    EXPECT_EQ(c.steps[i].commands, a.steps[i].commands);
    EXPECT_EQ(c.steps[i].attended, a.steps[i].attended);
  }
  EXPECT_EQ(measured, 13);  // steps 0, 5, ..., 60
  ReplayOptions bad;
  bad.accuracy_every = -1;
  EXPECT_THROW(replay_session(session, *p, bad), ConfigError);
}

TEST(KvClusterReplay, ReplayingPoliciesTogetherEqualsReplayingEachAlone) {
  // replay_sessions shares each step's exact attention across its jobs; every summary must equal
  // the one replay_session gives alone, bit for bit (different placements, caches, sampling, GQA).
  auto spec = replay_spec();
  spec.decode = 96;
  const auto session = traces::generate_drifting_session(spec);
  const auto dynakv = make("{impl: dynakv, top_k_percent: 10}");
  const auto pq = make("{impl: pqcache, top_k_percent: 20}");
  const auto ckv = make("{impl: clusterkv, top_k_percent: 10}");
  std::vector<ReplayJob> jobs(4);
  jobs[0] = {dynakv.get(), {}};
  jobs[0].options.accuracy_every = 1;
  jobs[1] = {pq.get(), {}};
  jobs[1].options.accuracy_every = 3;
  jobs[1].options.placement = Placement::kSequence;
  jobs[2] = {ckv.get(), {}};
  jobs[2].options.accuracy_every = 1;
  jobs[2].options.cache_ratio = 0.2;
  jobs[2].options.replacement = replacement("{impl: lru}");
  jobs[3] = {dynakv.get(), {}};  // the same policy twice: the shared scores are not consumed
  jobs[3].options.accuracy_every = 2;
  const auto together = replay_sessions(session, jobs);
  ASSERT_EQ(together.size(), jobs.size());
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const auto alone = replay_session(session, *jobs[j].policy, jobs[j].options);
    ASSERT_EQ(together[j].steps.size(), alone.steps.size());
    int measured = 0;
    for (std::size_t i = 0; i < alone.steps.size(); ++i) {
      const auto& a = alone.steps[i];
      const auto& b = together[j].steps[i];
      EXPECT_EQ(a.mass_measured, b.mass_measured) << j << "/" << i;
      EXPECT_EQ(a.mass, b.mass) << j << "/" << i;  // bit-identical
      EXPECT_EQ(a.read_bytes, b.read_bytes);
      EXPECT_EQ(a.commands, b.commands);
      EXPECT_EQ(a.hit_bytes, b.hit_bytes);
      EXPECT_EQ(a.attended, b.attended);
      EXPECT_EQ(a.io_seconds, b.io_seconds);
      measured += a.mass_measured;
    }
    EXPECT_GT(measured, 0);
    EXPECT_EQ(alone.run_count, together[j].run_count);
    EXPECT_EQ(alone.run_entries_sum, together[j].run_entries_sum);
    EXPECT_EQ(alone.run_entries_max, together[j].run_entries_max);
    EXPECT_EQ(alone.mean_variance, together[j].mean_variance);
    EXPECT_EQ(alone.cache_hits, together[j].cache_hits);
    EXPECT_EQ(alone.updated_retrieved_within, together[j].updated_retrieved_within);
  }
  // The shared scores, computed several steps per pass over blocks of keys, are the ones
  // attention_mass computes alone, bit for bit: every step from the prefill (257 keys: a block of
  // 256 plus one row) on, with lookahead strides 1 and 3, for both heads of a group.
  // head_dim 128 as the experiments' models: long enough that Eigen's one-row dot product sums
  // in another order than its GEMV rows.
  auto wide_spec = spec;
  wide_spec.head_dim = 128;
  wide_spec.decode = 24;
  const auto wide = traces::generate_drifting_session(wide_spec);
  const std::vector<int> subset{0, 5, 255, 256, 270};
  for (auto [stride, block] : {std::pair{1, 256}, std::pair{3, 256}, std::pair{1, 5}, std::pair{2, 7}}) {
    ExactAttention exact(wide, stride, block);
    for (int step = 0; step < wide_spec.decode; step += stride)
      for (int g = 0; g < 2; ++g) {
        const int table = 3, n = wide_spec.prefill + step + 1;  // layer 1, KV head 1
        const float* q = wide.queries[static_cast<std::size_t>(1 * 4 + 1 * 2 + g)].row(step).data();
        const auto& e = exact.scores(step, table, g, n);
        ASSERT_EQ(e.weights.size(), n);
        ASSERT_EQ(e.mass_of(subset), attention_mass(wide.keys[table], n, q, subset)) << stride << "/" << block << "/" << step;
        ASSERT_EQ(e.weights, exact_scores(wide.keys[table], n, q).weights);
      }
  }
}

// GQA: when every query head of a group asks the same (followers without noise), the union is the
// first head's selection, so union and first_head replays read, attend and count the same; with
// independent heads the union attends far more, and counts more updated clusters as retrieved.
TEST(KvClusterReplay, GqaUnionOfAgreeingHeadsEqualsTheFirstHeadsAndGrowsWithDisagreement) {
  auto spec = replay_spec();
  spec.decode = 128;
  spec.group = 4;
  spec.query_noise = 0;
  spec.query_head_correlation = 1;
  const auto agreeing = traces::generate_drifting_session(spec);
  spec.query_head_correlation = 0;
  spec.query_noise = 0.5;
  const auto independent = traces::generate_drifting_session(spec);
  auto p = make("{impl: dynakv, top_k_percent: 10}");
  ReplayOptions uni, first;
  first.gqa = GqaSelection::kFirstHead;
  const auto a = replay_session(agreeing, *p, uni);
  const auto b = replay_session(agreeing, *p, first);
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].read_bytes, b.steps[i].read_bytes) << i;
    EXPECT_EQ(a.steps[i].commands, b.steps[i].commands) << i;
    EXPECT_EQ(a.steps[i].attended, b.steps[i].attended) << i;
  }
  EXPECT_EQ(a.updated_retrieved_within, b.updated_retrieved_within);
  const auto c = replay_session(independent, *p, uni);
  const auto d = replay_session(independent, *p, first);
  std::int64_t attended_union = 0, attended_first = 0;
  for (std::size_t i = 0; i < c.steps.size(); ++i) {
    EXPECT_GE(c.steps[i].attended, d.steps[i].attended) << i;
    attended_union += c.steps[i].attended;
    attended_first += d.steps[i].attended;
  }
  EXPECT_GT(2 * attended_union, 3 * attended_first);  // four heads: more than 1.5x the first head's
  EXPECT_GT(c.updated_retrieved_within[0], d.updated_retrieved_within[0]);
  EXPECT_EQ(gqa_selection_from_string("first_head"), GqaSelection::kFirstHead);
  EXPECT_THROW(gqa_selection_from_string("every_head"), InputError);
}

// As Figure 10 runs them: the baselines keep token order on flash, DynaKV its cluster layout
// (inter-cluster placement), and its threshold sits at the mean prefill variance (tau_scale 1) so
// that the short session splits.
TEST(KvClusterReplay, DynaKvReadsLessAndFasterThanBaselinesOnTheDriftingGenerator) {
  const auto session = traces::generate_drifting_session(replay_spec());
  std::map<std::string, double> io, mass, cmds;
  for (const char* impl : {"no_cluster", "pqcache", "clusterkv", "dynakv"}) {
    const bool dynakv = std::string(impl) == "dynakv";
    auto p = make(fmt::format("{{impl: {}, top_k_percent: 10{}}}", impl, dynakv ? ", tau_scale: 1.0" : ""));
    ReplayOptions opt;
    opt.accuracy_every = 1;
    opt.placement = dynakv ? Placement::kInterCluster : Placement::kSequence;
    opt.storage = devices::load_device_profile("oneplus-12").require_storage("test");
    const auto r = replay_session(session, *p, opt);
    for (const auto& st : r.steps) {
      io[impl] += st.io_seconds / r.steps.size();
      mass[impl] += st.mass / r.steps.size();
      cmds[impl] += static_cast<double>(st.commands) / r.steps.size();
    }
    RecordProperty(std::string(impl) + "_io_ms", std::to_string(io[impl] * 1e3));
    RecordProperty(std::string(impl) + "_mass", std::to_string(mass[impl]));
    RecordProperty(std::string(impl) + "_commands", std::to_string(cmds[impl]));
  }
  EXPECT_LT(io["dynakv"], io["pqcache"]);
  EXPECT_LT(io["dynakv"], io["clusterkv"]);
  EXPECT_LT(io["dynakv"], io["no_cluster"]);
  EXPECT_GE(mass["no_cluster"], mass["dynakv"]);  // token-level top-k is the upper bound
}

// A threshold at the mean prefill variance (tau_scale 1) so that the short session splits often.
TEST(KvClusterReplay, DelayedSplitReadsLessThanImmediateSplit) {
  const auto session = traces::generate_drifting_session(replay_spec());
  ReplayOptions opt;
  std::int64_t forced_immediate = 0, forced_delayed = 0;
  for (int b_max : {0, 16}) {
    auto p = make(fmt::format("{{impl: dynakv, top_k_percent: 10, b_max: {}, tau_scale: 1.0}}", b_max));
    const auto r = replay_session(session, *p, opt);
    int splits = 0;
    for (const auto& st : r.steps) {
      (b_max == 0 ? forced_immediate : forced_delayed) += st.forced_bytes;
      splits += st.splits;
    }
    RecordProperty(fmt::format("splits_bmax{}", b_max), std::to_string(splits));
    EXPECT_GT(splits, 5) << b_max;
  }
  RecordProperty("forced_bytes_bmax0", std::to_string(forced_immediate));
  RecordProperty("forced_bytes_bmax16", std::to_string(forced_delayed));
  EXPECT_GT(forced_immediate, forced_delayed);
}

// StepRecord keeps its runs compactly (StepRecord::run_code): every list reads back as it went in,
// page runs and odd sizes, empty lists, sizes past 32 bits; lists past the recorded ones are empty.
TEST(StepRecordRuns, EveryListReadsBackAsAppended) {
  std::mt19937_64 rng(34);
  std::uniform_int_distribution<std::int64_t> pages(1, 300), odd(0, 5'000'000), count(0, 40);
  std::bernoulli_distribution paged(0.7), huge(0.02);
  for (int trial = 0; trial < 50; ++trial) {
    StepRecord rec;
    std::vector<std::vector<std::int64_t>> lists(6);
    for (auto& list : lists) {
      for (auto n = count(rng); n > 0; --n)
        list.push_back(huge(rng) ? (std::int64_t{1} << 40) + odd(rng) : paged(rng) ? 4096 * pages(rng) : odd(rng));
      rec.append_runs(list);
    }
    for (int l = 0; l < 3; ++l) {
      EXPECT_EQ(rec.retrieval_runs(l), lists[static_cast<std::size_t>(2 * l)]) << trial;
      EXPECT_EQ(rec.prefetch_runs(l), lists[static_cast<std::size_t>(2 * l + 1)]) << trial;
    }
    EXPECT_TRUE(rec.retrieval_runs(3).empty());
    EXPECT_TRUE(rec.prefetch_runs(-1).empty());
  }
  // Whole pages under 64 of them: one byte each (and one for the count).
  StepRecord rec;
  const std::vector<std::int64_t> small = {4096, 8192, 63 * 4096};
  rec.append_runs(small);
  EXPECT_EQ(rec.run_code.size(), 4u);
  EXPECT_THROW(rec.append_runs(std::vector<std::int64_t>{-1}), Error);
}

}  // namespace
}  // namespace mobisim::policies::kvcluster
