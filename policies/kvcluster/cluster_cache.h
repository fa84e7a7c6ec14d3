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
#include <cstdint>
#include <map>
#include <memory>
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
  void make_room(std::int64_t need, int step, Key keep);
  std::int64_t capacity_;
  std::shared_ptr<const ClusterReplacement> policy_;
  std::map<Key, CachedCluster> entries_;
  std::int64_t used_ = 0, hits_ = 0, misses_ = 0, peak_ = 0;
};

// The replacement a variant gets when its config names none.
inline constexpr const char* kDefaultReplacement = "cluster_aligned";
std::shared_ptr<const ClusterReplacement> make_replacement(const YAML::Node& node, const ConfigSource& source);

}  // namespace mobisim::policies::kvcluster
