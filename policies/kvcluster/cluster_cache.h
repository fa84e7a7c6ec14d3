#pragma once
// The DRAM cache of KV clusters (seed 003 section 6): a byte budget
// (cache_ratio x the KV cache) holding whole clusters, keyed by (table, cluster),
// with a registered replacement policy of kind "kv_cluster_replacement":
//
//   lru              least recently retrieved cluster first
//   lfu              least often retrieved cluster first (ties: least recent)
//   cluster_aligned  section 6.2: Principle 1, prefer small clusters (retrievals per
//                    byte); Principle 2, clusters updated within `recent_steps` are
//                    kept in a reserved share of the budget regardless of the score
//
// A policy scores entries; the lowest score is evicted first (ties: lower key).
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "sim/params.h"

namespace mobisim::policies::kvcluster {

struct CachedCluster {
  std::int64_t bytes = 0;
  std::int64_t hits = 0;        // retrievals served from DRAM or loaded into it
  int last_access_step = -1;
  int last_update_step = -1;    // append or split (Table 2's "updated clusters")
};

class ClusterReplacement {
 public:
  static constexpr const char* kRegistryKind = "kv_cluster_replacement";
  virtual ~ClusterReplacement() = default;
  virtual double score(const CachedCluster& e, int now_step) const = 0;  // lower: evicted first
  // Share of the budget reserved for recently updated clusters (0: none) and what "recent" means.
  virtual double reserved_fraction() const { return 0.0; }
  virtual int recent_steps() const { return 0; }
};

class ClusterCache {
 public:
  using Key = std::pair<int, int>;  // (table, cluster)
  ClusterCache(std::int64_t capacity_bytes, std::shared_ptr<const ClusterReplacement> policy);

  bool contains(Key k) const { return entries_.count(k) > 0; }
  // A retrieval of cluster k (bytes = its current size): a hit when cached, else it
  // is inserted, evicting by the policy. Returns true on a hit.
  bool access(Key k, std::int64_t bytes, int step);
  // The cluster changed (append or split child): its size and update step.
  void updated(Key k, std::int64_t bytes, int step);
  void erase(Key k);
  std::int64_t used_bytes() const { return used_; }
  std::int64_t capacity_bytes() const { return capacity_; }
  std::int64_t hits() const { return hits_; }
  std::int64_t misses() const { return misses_; }
  std::int64_t peak_bytes() const { return peak_; }

 private:
  struct Entry {
    CachedCluster c;
    double score = 0;  // its score at order_step_, while it is in order_
  };
  void make_room(std::int64_t need, int step, Key keep);
  // An entry is about to change: out of the eviction order and the update-step totals.
  void unindex(const Key& k, const Entry& e);
  // It has changed: back into them (the order only if it is kept for `step`).
  void index(const Key& k, Entry& e, int step);
  bool is_protected(const CachedCluster& e, int step) const;
  std::int64_t protected_bytes(int step) const;
  std::int64_t capacity_;
  std::shared_ptr<const ClusterReplacement> policy_;
  std::map<Key, Entry> entries_;
  // The eviction order for one step (score, then key: the lowest first, ties to the lower key, as a
  // scan of entries_ in key order finds them), built at the step's first eviction and kept in step
  // with every change until the next step: an eviction costs O(log n), not a scan of every entry.
  std::set<std::pair<double, Key>> order_;
  int order_step_ = INT_MIN;  // INT_MIN: order_ is not kept
  // Bytes of the cached clusters by their last update step (>= 0): the recently updated bytes are
  // the last recent_steps + 1 of them.
  std::map<int, std::int64_t> updated_bytes_;
  std::int64_t used_ = 0, hits_ = 0, misses_ = 0, peak_ = 0;
};

// The replacement a variant gets when its config names none.
inline constexpr const char* kDefaultReplacement = "cluster_aligned";
std::shared_ptr<const ClusterReplacement> make_replacement(const YAML::Node& node, const ConfigSource& source);

}  // namespace mobisim::policies::kvcluster
