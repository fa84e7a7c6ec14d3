#include "policies/kvcluster/cluster_cache.h"

#include <algorithm>

#include "sim/registry.h"

namespace mobisim::policies::kvcluster {

ClusterCache::ClusterCache(std::int64_t capacity_bytes, std::shared_ptr<const ClusterReplacement> policy)
    : capacity_(std::max<std::int64_t>(0, capacity_bytes)), policy_(std::move(policy)) {}

void ClusterCache::make_room(std::int64_t need, int step, Key keep) {
  const int recent = policy_->recent_steps();
  const std::int64_t reserve = static_cast<std::int64_t>(policy_->reserved_fraction() * capacity_);
  while (used_ + need > capacity_ && !entries_.empty()) {
    // Recently updated clusters are protected while they fit in the reserved share.
    std::int64_t protected_bytes = 0;
    for (const auto& [k, e] : entries_)
      if (recent > 0 && e.last_update_step >= 0 && step - e.last_update_step <= recent) protected_bytes += e.bytes;
    const bool protect = protected_bytes <= reserve;
    const Key* victim = nullptr;
    double best = 0;
    for (const auto& [k, e] : entries_) {
      if (k == keep) continue;
      if (protect && recent > 0 && e.last_update_step >= 0 && step - e.last_update_step <= recent) continue;
      const double s = policy_->score(e, step);
      if (!victim || s < best) {
        victim = &k;
        best = s;
      }
    }
    if (!victim) return;  // everything left is protected or is `keep`
    erase(*victim);
  }
}

bool ClusterCache::access(Key k, std::int64_t bytes, int step) {
  auto it = entries_.find(k);
  if (it != entries_.end()) {
    ++hits_;
    used_ += bytes - it->second.bytes;
    it->second.bytes = bytes;
    it->second.hits += 1;
    it->second.last_access_step = step;
    return true;
  }
  ++misses_;
  if (bytes > capacity_) return false;  // too large to cache: streamed through
  make_room(bytes, step, k);
  if (used_ + bytes > capacity_) return false;
  entries_[k] = CachedCluster{bytes, 1, step, -1};
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  return false;
}

void ClusterCache::updated(Key k, std::int64_t bytes, int step) {
  auto it = entries_.find(k);
  if (it == entries_.end()) return;  // only cached clusters carry state
  used_ += bytes - it->second.bytes;
  it->second.bytes = bytes;
  it->second.last_update_step = step;
  make_room(0, step, k);
  peak_ = std::max(peak_, used_);
}

void ClusterCache::erase(Key k) {
  auto it = entries_.find(k);
  if (it == entries_.end()) return;
  used_ -= it->second.bytes;
  entries_.erase(it);
}

std::shared_ptr<const ClusterReplacement> make_replacement(const YAML::Node& node, const ConfigSource& source) {
  return Registry<ClusterReplacement>::instance().create(node, source, kDefaultReplacement);
}

}  // namespace mobisim::policies::kvcluster
