#pragma once
// The KV-residency stage: where a request's K/V lives while its answer is decoded, and what a
// decode step reads because of it. One implementation = one file pair in this folder, registered
// with
//   MOBISIM_REGISTER(KvResidency, MyResidency, "my_residency", "doc");
// and chosen in a pipeline app's YAML as `kv_residency: {impl: my_residency, ...}`.
//
//   dram     all of it in the phone's DRAM ledger (the default; no reads)
//   dynakv   DynaKV's adaptive clusters on flash (and its baselines pqcache, clusterkv,
//            no_cluster): a DRAM cluster cache of cache_ratio x the K/V, every decode step reads
//            from flash the retrieved clusters that miss it
#include <cstdint>
#include <string>

#include "devices/device.h"
#include "models/cost_model.h"

namespace mobisim::policies::pipeline {

class KvResidency {
 public:
  static constexpr const char* kRegistryKind = "kv_residency";
  virtual ~KvResidency() = default;
  // Before the first request: the model whose K/V is held.
  virtual void begin(const models::CostModel& cost) = 0;
  // Holds the K/V of a request of `tokens` positions (prompt and answer) under `owner` in the DRAM
  // ledger, as far as this stage keeps it there; a phone that cannot hold it stops the run.
  virtual void hold(devices::Device& device, const std::string& owner, std::int64_t tokens) = 0;
  // Releases what hold() took.
  virtual void release(devices::Device& device, const std::string& owner) = 0;
  // Whether decode steps read anything (false: step() is never called).
  virtual bool reads_per_step() const { return false; }
  // Before a decode step attending `context` cached positions: the reads the step waits for.
  virtual sim::Task<void> step(devices::Device& device, std::int64_t context) {
    (void)device;
    (void)context;
    co_return;
  }
};

}  // namespace mobisim::policies::pipeline
