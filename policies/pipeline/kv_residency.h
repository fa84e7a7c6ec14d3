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
#include "sim/event.h"

namespace mobisim::policies::pipeline {

class KvResidency {
 public:
  static constexpr const char* kRegistryKind = "kv_residency";
  virtual ~KvResidency() = default;
  // Before the first request: the model whose K/V is held.
  virtual void begin(const models::CostModel& cost) = 0;
  // Holds the K/V of a request of `prompt` + `answer` positions under `owner` in the DRAM ledger,
  // as far as this stage keeps it there; a phone that cannot hold it stops the run.
  virtual void hold(devices::Device& device, const std::string& owner, std::int64_t prompt, std::int64_t answer) = 0;
  // Releases what hold() took.
  virtual void release(devices::Device& device, const std::string& owner) = 0;
  // Bytes the stage has read from flash so far (all requests).
  virtual double read_bytes() const { return 0; }
  // Whether decode steps read anything (false: step() is never called).
  virtual bool reads_per_step() const { return false; }
  // The reads of a decode step attending `context` cached positions. The decode stage runs the
  // step's compute while they are in flight and goes on when both are done (DynaKV overlaps the
  // retrieval with the step's computation, seed 003 section 6.1).
  virtual sim::Task<void> step(devices::Device& device, std::int64_t context) {
    (void)device;
    (void)context;
    co_return;
  }
};

// A decode step's compute with the residency stage's reads for it in flight (see step()).
inline sim::Task<void> with_step_reads(devices::Device& device, KvResidency& residency, std::int64_t context,
                                       sim::Task<void> compute) {
  if (!residency.reads_per_step()) {
    co_await compute;
    co_return;
  }
  const sim::ProcessHandle reads = device.sim().start(residency.step(device, context), "kv reads");
  co_await compute;
  if (!reads.done()) co_await reads.done_event();
}

}  // namespace mobisim::policies::pipeline
