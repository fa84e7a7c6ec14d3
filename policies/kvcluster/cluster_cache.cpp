#include "policies/kvcluster/cluster_cache.h"

#include <algorithm>

#include "sim/registry.h"

namespace mobisim::policies::kvcluster {

ClusterCache::ClusterCache(std::int64_t capacity_bytes, std::shared_ptr<const ClusterReplacement> policy)
    : capacity_(std::max<std::int64_t>(0, capacity_bytes)), policy_(std::move(policy)) {}

bool ClusterCache::is_protected(const CachedCluster& e, int step) const {
  const int recent = policy_->recent_steps();
  return recent > 0 && e.last_update_step >= 0 && step - e.last_update_step <= recent;
}

std::int64_t ClusterCache::protected_bytes(int step) const {
  const int recent = policy_->recent_steps();
  if (recent <= 0) return 0;
  std::int64_t bytes = 0;
  // Update steps in [step - recent, step] (none is later than the step in progress, but count them alike).
  for (auto it = updated_bytes_.lower_bound(step - recent); it != updated_bytes_.end(); ++it) bytes += it->second;
  return bytes;
}

void ClusterCache::unindex(const Key& k, const Entry& e) {
  if (order_step_ != INT_MIN) order_.erase({e.score, k});
  if (e.c.last_update_step >= 0) {
    auto it = updated_bytes_.find(e.c.last_update_step);
    if (it != updated_bytes_.end()) {
      it->second -= e.c.bytes;
      if (it->second == 0) updated_bytes_.erase(it);
    }
  }
}

void ClusterCache::index(const Key& k, Entry& e, int step) {
  if (e.c.last_update_step >= 0) updated_bytes_[e.c.last_update_step] += e.c.bytes;
  if (order_step_ == INT_MIN) return;
  if (step != order_step_) {  // another step: every score may have moved, rebuild when needed
    order_.clear();
    order_step_ = INT_MIN;
    return;
  }
  e.score = policy_->score(e.c, step);
  order_.insert({e.score, k});
}

void ClusterCache::make_room(std::int64_t need, int step, Key keep) {
  const std::int64_t reserve = static_cast<std::int64_t>(policy_->reserved_fraction() * capacity_);
  while (used_ + need > capacity_ && !entries_.empty()) {
    // Recently updated clusters are protected while they fit in the reserved share.
    const bool protect = protected_bytes(step) <= reserve;
    if (order_step_ != step) {
      order_.clear();
      for (auto& [k, e] : entries_) {
        e.score = policy_->score(e.c, step);
        order_.insert({e.score, k});
      }
      order_step_ = step;
    }
    const Key* victim = nullptr;
    for (const auto& [score, k] : order_) {
      if (k == keep) continue;
      if (protect && is_protected(entries_.at(k).c, step)) continue;
      victim = &k;
      break;
    }
    if (!victim) return;  // everything left is protected or is `keep`
    erase(Key(*victim));
  }
}

bool ClusterCache::access(Key k, std::int64_t bytes, int step) {
  auto it = entries_.find(k);
  if (it != entries_.end()) {
    ++hits_;
    unindex(k, it->second);
    used_ += bytes - it->second.c.bytes;
    it->second.c.bytes = bytes;
    it->second.c.hits += 1;
    it->second.c.last_access_step = step;
    index(k, it->second, step);
    return true;
  }
  ++misses_;
  if (bytes > capacity_) return false;  // too large to cache: streamed through
  make_room(bytes, step, k);
  if (used_ + bytes > capacity_) return false;
  Entry& e = entries_[k];
  e.c = CachedCluster{bytes, 1, step, -1};
  index(k, e, step);
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  return false;
}

void ClusterCache::updated(Key k, std::int64_t bytes, int step) {
  auto it = entries_.find(k);
  if (it == entries_.end()) return;  // only cached clusters carry state
  unindex(k, it->second);
  used_ += bytes - it->second.c.bytes;
  it->second.c.bytes = bytes;
  it->second.c.last_update_step = step;
  index(k, it->second, step);
  make_room(0, step, k);
  peak_ = std::max(peak_, used_);
}

void ClusterCache::erase(Key k) {
  auto it = entries_.find(k);
  if (it == entries_.end()) return;
  unindex(k, it->second);
  used_ -= it->second.c.bytes;
  entries_.erase(it);
}

std::shared_ptr<const ClusterReplacement> make_replacement(const YAML::Node& node, const ConfigSource& source) {
  return Registry<ClusterReplacement>::instance().create(node, source, kDefaultReplacement);
}

}  // namespace mobisim::policies::kvcluster
