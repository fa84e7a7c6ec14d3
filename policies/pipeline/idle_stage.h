#pragma once
// The idle-work stage: what an app does on the phone between its requests (PerCache's cache
// scheduler, Sleep-time Compute: work moved out of the critical path into idle time). One
// implementation = one file pair in this folder, registered with
//   MOBISIM_REGISTER(IdleStage, MyIdle, "my_idle", "doc");
// and chosen in a pipeline app's YAML as `idle: {impl: my_idle, ...}` (default: none).
//
//   prefetch             promote the K/V the next request will most likely reuse from flash to DRAM
//   percache_scheduler   PerCache's query prediction, cache scheduler, conversions, refresh and
//                        deferred cache writes, on the app's `semantic` answer cache (and
//                        `chunk_tree`, when it has one)
//   sleeptime            Sleep-time Compute: questions predicted from raw chunks, answered into
//                        the app's `semantic` answer cache
//   reactive_store       RAGCache / MeanCache's reactive update: a served query's QA entry and
//                        slices written by a deferred store job in idle time (no prediction)
//
// Idle work queues at its app's priority (IdleWorkload::priority); its model passes (through the rag
// pipeline: Device::compute_layers) give the unit up at their next layer boundary to work of
// better priority, e.g. a foreground app's request beside a background app's idle work.
//
// An idle stage may work on the state of the app's other stages: link() hands it the answer-cache
// and KV-reuse stages of the same pipeline (either may be absent), before any request; a stage
// that needs one the pipeline does not have throws a ConfigError there, naming it.
#include <cstdint>
#include <memory>
#include <string>

#include "devices/device.h"
#include "models/cost_model.h"
#include "policies/pipeline/answer_cache.h"
#include "policies/pipeline/kv_reuse.h"
#include "policies/pipeline/request.h"
#include "traces/rag_trace.h"

namespace mobisim::policies {
struct KnowledgeIndex;  // policies/rag/knowledge_index.h
}

namespace mobisim::policies::pipeline {

// The stages of the same pipeline an idle stage may share state with (null: the slot is empty).
struct StageLinks {
  AnswerCache* answers = nullptr;
  KvReuse* reuse = nullptr;
};

// The RAG workload behind an app's requests, for idle work that reads what a request does not
// carry (chunk and query texts: query prediction). Request i is query i of `trace`'s one user,
// arriving as the app issues it; the prompt's layout and fixed costs are the app's.
struct IdleWorkload {
  traces::RagTrace trace;  // one user
  std::string unit;        // the app's unit and queue priority
  int priority = 0;
  std::int64_t system_prompt_tokens = 0, top_k = 0;
  std::int64_t answer_tokens = 0;  // > 0: every answer has this length
  double retrieval_ms = 0, kv_match_ms = 0;
  // The user's knowledge index (retriever and phrase index over its chunks) when the driver built
  // one to share among its policies, as the rag loop does; null: a stage that needs it builds its own.
  std::shared_ptr<const KnowledgeIndex> knowledge;
};

// Background work an idle stage did since the last claim(): busy time of its steps, FLOPs, marginal
// energy (active minus idle power), jobs finished.
struct IdleWork {
  double busy_s = 0, flops = 0, energy_j = 0;
  std::int64_t jobs = 0;
};

struct IdleClaim {
  std::int64_t in_dram_tokens = 0;  // leading prompt tokens whose K/V the idle work put in DRAM
  IdleWork work;
};

class IdleStage {
 public:
  static constexpr const char* kRegistryKind = "idle";
  virtual ~IdleStage() = default;
  // Once the pipeline's stages are built (they outlive this stage).
  virtual void link(const StageLinks& links) { (void)links; }
  // True when the stage cannot run without use_workload() (an app without a RAG workload then stops
  // with a ConfigError before the run).
  virtual bool needs_rag_workload() const { return false; }
  // Before the first request, by an app that replays a RAG workload; a stage that cannot work
  // with it (e.g. texts missing for prediction) throws a ConfigError.
  virtual void use_workload(std::shared_ptr<const IdleWorkload> workload, const models::CostModel& cost) {
    (void)workload;
    (void)cost;
  }
  // Before the first request, on the phone (the stage may start idle work that precedes it).
  virtual void begin(devices::Device& device, const models::CostModel& cost, const std::string& owner) {
    (void)device;
    (void)cost;
    (void)owner;
  }
  // True when the stage writes what the answer cache (resp. KV-reuse stage) keeps of a served
  // request itself, deferred into idle time: the pipeline then does not store it after the answer.
  virtual bool stores_answers() const { return false; }
  virtual bool stores_kv() const { return false; }
  // Started in the background once request `r` has been served (answered from the answer cache
  // when `answer_hit`) and, unless the stage stores them, its K/V and answer stored; runs while the
  // app is idle (it must give up what it holds when claim() is called). `reuse` is the app's
  // KV-reuse stage; `owner` its DRAM owner prefix.
  virtual sim::Task<void> after(devices::Device& device, const std::string& owner, KvReuse& reuse, const Request& r,
                                bool answer_hit, double kv_bytes_per_token) = 0;
  // At the start of the next request `r`: ends the idle work and returns how many of r's leading
  // prompt tokens have their K/V in DRAM thanks to it (read back from DRAM, not flash), and the
  // background work done since the last claim.
  virtual IdleClaim claim(devices::Device& device, const std::string& owner, const Request& r) = 0;
};

}  // namespace mobisim::policies::pipeline
