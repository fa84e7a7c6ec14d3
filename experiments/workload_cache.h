#pragma once
// Generated workloads kept for the next runs of one process: the points of a sweep run in process
// (`mobisim sweep --in-process`, the sweep figures of `reproduce`) mostly generate the same
// workload, and generating it was a third of each point's time. A run looks its workload up by the
// generator's resolved configuration and seed, so a point that changes either generates its own.
// Not thread-safe: the runs that share one are run one after another.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "traces/rag_trace.h"

namespace mobisim::experiments {

class WorkloadCache {
 public:
  // The workload under `key`, made by `make` when absent. Keeps the last kKept workloads (memory
  // holds a few workloads however many points a sweep has).
  std::shared_ptr<const traces::RagTrace> rag_trace(const std::string& key,
                                                    const std::function<traces::RagTrace()>& make);
  std::size_t generated() const { return generated_; }  // how many `make` calls (for tests)

 private:
  static constexpr std::size_t kKept = 2;
  std::vector<std::pair<std::string, std::shared_ptr<const traces::RagTrace>>> kept_;  // most recent last
  std::size_t generated_ = 0;
};

}  // namespace mobisim::experiments
