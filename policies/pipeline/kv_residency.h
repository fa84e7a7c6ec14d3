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

// What a request asks the stage to hold: its prompt and answer positions and, when it is a turn
// of a conversation, the KV session it continues (its prompt then starts with everything the
// session's earlier turns held) and whether it is that session's last turn.
struct KvTurn {
  std::int64_t prompt = 0, answer = 0;
  std::int64_t session = -1;  // -1: none (the request's K/V is its own)
  bool ends_session = true;
};

class KvResidency {
 public:
  static constexpr const char* kRegistryKind = "kv_residency";
  virtual ~KvResidency() = default;
  // Before the first request: the model whose K/V is held.
  virtual void begin(const models::CostModel& cost) = 0;
  // Holds the K/V of a request of `turn.prompt` + `turn.answer` positions under `owner` in the DRAM
  // ledger, as far as this stage keeps it there; a phone that cannot hold it stops the run. A stage
  // may keep what it built for a KV session (DynaKV's clusters) from one turn to the next.
  virtual void hold(devices::Device& device, const std::string& owner, const KvTurn& turn) = 0;
  // The same for a request outside any KV session.
  void hold(devices::Device& device, const std::string& owner, std::int64_t prompt, std::int64_t answer) {
    hold(device, owner, KvTurn{prompt, answer});
  }
  // Releases what hold() took; after a turn that ends its session, what the session kept too.
  virtual void release(devices::Device& device, const std::string& owner) = 0;
  // A session's last turn needed no K/V (an answer cache served it): what the session kept goes.
  virtual void end_session(devices::Device& device, const std::string& owner, std::int64_t session) {
    (void)device;
    (void)owner;
    (void)session;
  }
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
