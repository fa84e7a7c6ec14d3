#include "experiments/workload_cache.h"

#include <algorithm>

namespace mobisim::experiments {

std::shared_ptr<const traces::RagTrace> WorkloadCache::rag_trace(const std::string& key,
                                                                 const std::function<traces::RagTrace()>& make) {
  auto it = std::find_if(kept_.begin(), kept_.end(), [&](const auto& e) { return e.first == key; });
  if (it != kept_.end()) {
    std::rotate(it, it + 1, kept_.end());  // now the most recent
    return kept_.back().second;
  }
  auto trace = std::make_shared<const traces::RagTrace>(make());
  ++generated_;
  if (kept_.size() == kKept) kept_.erase(kept_.begin());
  kept_.emplace_back(key, trace);
  return trace;
}

}  // namespace mobisim::experiments
