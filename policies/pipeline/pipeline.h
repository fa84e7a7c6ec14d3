#pragma once
// One request through the pipeline's stages on one phone:
//
//   answer_cache        a past query close enough answers it (AnswerCache; optional): a hit ends here
//   (retrieval)         a fixed cost on the unit (PipelineOptions::retrieval_ms; 0: none), at the end
//                       of which a RAG request's chunks are retrieved: the first top_k of its ranking
//                       already in the knowledge bank fill its prompt (retrieve_at(), request.h)
//   kv_reuse            which prompt prefix [0, s) has K/V stored on flash (KvReuse), after a fixed
//                       matching cost on the unit (PipelineOptions::kv_match_ms; 0: none)
//   load_or_recompute   how it comes back: the strategy's split l -> [0, l) recomputed on the unit
//                       while [l, s) is read from flash (a page-cached share copied from DRAM) or
//                       over a link; Cake's blocks claimed from both ends (split_events.h)
//   prefill             the prompt's other tokens, attending to the s reused ones (PrefillStage:
//                       one pass on a unit, or the NPU's static graphs)
//   decode              the answer after its first token (DecodeStage: one token per step on the
//                       unit, or a CoordGen-document speculative decoder)
//   kv residency        where the request's K/V lives while it runs (KvResidency: all in the DRAM
//                       ledger, or DynaKV's clusters on flash read by every decode step)
//   store               what the KV-reuse stage keeps, written to flash in the background
//   idle                what the app does until its next request (IdleStage; optional: e.g.
//                       promote the K/V the next request will likely reuse from flash to DRAM)
//
// Every step is an event on the Device: it queues on the unit at the pipeline's priority, shares
// the DRAM bus and the flash with whatever else runs on the phone. The split strategy's
// closed-form time is kept beside the event path's (split_estimate_s, split_s): with nothing
// else running they agree to the nanosecond (over a link; within the flash commands' rounding on
// flash). Used by the pipeline app and by document drivers whose request flow it is (the
// prefix-caching note's TTFT experiment, the KVPR/Cake figures). Apps (policies/apps/) sit
// above it; the stage implementations of this folder below it.
#include <memory>
#include <string>

#include "devices/device.h"
#include "models/cost_model.h"
#include "policies/kvsplit/kv_split.h"
#include "policies/kvsplit/split_costs.h"
#include "policies/pipeline/answer_cache.h"
#include "policies/pipeline/decode_stage.h"
#include "policies/pipeline/idle_stage.h"
#include "policies/pipeline/kv_residency.h"
#include "policies/pipeline/kv_reuse.h"
#include "policies/pipeline/prefill_stage.h"
#include "policies/pipeline/request.h"

namespace mobisim::policies::pipeline {

struct PipelineOptions {
  std::string unit = "cpu";        // recomputes and decodes (and prefills, unless a prefill stage is given)
  int priority = 0;                // queue priority on the unit (lower first)
  double page_cache_fraction = 0;  // share of a stored prefix's bytes already in DRAM, [0, 1)
  // How stored K/V comes back (load_or_recompute): read from flash, or over a link (KVPR's
  // server: PCIe from host DRAM); rebuilt by prefill or from stored layer inputs; what the store
  // holds per token; the NPU graphs' chunk; whether Q of every reused position is computed too.
  std::string link;
  kvsplit::RecomputeKind recompute = kvsplit::RecomputeKind::kPrefill;
  kvsplit::Payload payload = kvsplit::Payload::kKv;
  std::int64_t npu_chunk = 64;
  bool with_q = false;
  // Fixed costs on `unit` (0: none): retrieving the prompt's context after an answer-cache miss,
  // and matching it against the KV-reuse stage's store (PerCache Table 1: 3,940 ms and 15 ms).
  double retrieval_ms = 0, kv_match_ms = 0;
};

// The defaults on `unit` at `priority` (one place to build them, as the struct grows).
inline PipelineOptions options_on(std::string unit, int priority = 0) {
  PipelineOptions o;
  o.unit = std::move(unit);
  o.priority = priority;
  return o;
}

// One served request, as its row of the records.
struct Served {
  RequestTimes times;
  // The same instants on the simulated clock (integer ns): start, end of the split, first token.
  sim::Time started = 0, split_done = 0, first_token = 0;
  std::int64_t prompt_tokens = 0, matched_tokens = 0, reused_tokens = 0, recomputed_tokens = 0, loaded_tokens = 0;
  double split_s = 0, split_estimate_s = 0, prefill_s = 0, decode_s = 0;
  // The split's two streams' busy times (the unit's rebuilds, the reads), each piece as the split
  // costs charge it alone; what waiting added is in split_s.
  double split_compute_s = 0, split_copy_s = 0;
  // The decode stage's verifications, accepted draft tokens per verification, and its closed-form
  // time for the request (-1: the stage has none).
  std::int64_t decode_steps = 0;
  double accepted_per_step = 0, decode_estimate_s = -1;
  double kv_read_bytes = 0;  // what the KV-residency stage read from flash while it decoded
  std::int64_t prefetched_tokens = 0;  // leading prompt tokens the idle stage had put in DRAM
  IdleWork idle_work;                  // the idle stage's background work since the previous request
  bool reuse_rejected = false;  // a stored entry failed verification (the prompt was prefilled whole)
  bool answer_hit = false;      // served by the answer cache: no prefill, no decode
  double answer_similarity = -1;
  // An answer-cache hit's answer (empty: the LLM generated the request's own answer) and whether
  // its entry was stale (AnswerLookup::stale): what the drivers score the served answers with.
  std::string served_answer;
  bool answer_stale = false;
  // The phases before the split, as the rag loop's records time them: the answer cache's look-up
  // (embedding the query, matching it), the fixed costs of retrieval and of matching the store.
  double embed_s = 0, qa_match_s = 0, retrieval_s = 0, kv_match_s = 0;
  std::int64_t retrieved_chunks = 0;  // chunk segments of the prompt as retrieved (0 on a hit)
  std::int64_t matched_chunks = 0;    // of those, the ones the KV-reuse stage's match covers (KvMatch::chunks)
  double loaded_bytes = 0;            // the stored K/V brought back by reads (flash, DRAM or a link), not rebuilt
  // The flash the KV-reuse stage and the answer cache held when the request was taken up.
  double cache_bytes = 0;
  // The phone's FLOPs and energy (idle power included) from the request's start to its end, as
  // Device::energy_j counts them: with the phone to the app, the request's own (the rag loop's
  // QueryRecord::flops and energy_j); work of other apps or of background writes meanwhile counts too.
  double device_flops = 0, device_energy_j = 0;
  // matched_tokens: the stored prefix the KV-reuse stage found; reused_tokens: of those, what was
  // brought back (at most the prompt less its last token, whose logits give the first answer token).
  KvStored stored;
  // The background write of `stored` to flash, started when the request ends (unset when nothing was
  // written after the answer): a driver that waits until the request's store is on flash joins it.
  sim::ProcessHandle store_write;
};

class Pipeline {
 public:
  // `prefill` null: one batched pass on options.unit; `answers` null: no answer cache; `decode`
  // null: one token per step on options.unit; `residency` null: all K/V in DRAM; `idle` null:
  // nothing between requests.
  Pipeline(const models::CostModel& cost, PipelineOptions options, std::unique_ptr<KvReuse> reuse,
           std::unique_ptr<kvsplit::KvSplitStrategy> split, std::unique_ptr<PrefillStage> prefill = nullptr,
           std::unique_ptr<AnswerCache> answers = nullptr, std::unique_ptr<DecodeStage> decode = nullptr,
           std::unique_ptr<KvResidency> residency = nullptr, std::unique_ptr<IdleStage> idle = nullptr);
  // Before the first request, on the phone: the KV-reuse stage learns the model's K/V size, the
  // prefill and decode stages set up what they keep (graphs held in DRAM under `owner`).
  sim::Task<void> start(devices::Device& device, const std::string& owner);
  const KvReuse& reuse() const { return *reuse_; }
  bool has_idle_stage() const { return idle_ != nullptr; }
  bool idle_stage_needs_rag_workload() const { return idle_ && idle_->needs_rag_workload(); }
  // The RAG workload behind the requests, for the idle stage (IdleStage::use_workload); before start().
  void use_workload(std::shared_ptr<const IdleWorkload> workload);
  // Serves `r` from now on; `kv_owner` names its K/V in the DRAM ledger.
  sim::Task<void> serve(devices::Device& device, const std::string& kv_owner, const Request& r, Served& out);

 private:
  // Adds the time it took (queueing included) to `seconds`.
  sim::Task<void> fixed_cost(devices::Device& device, double ms, const char* what, double& active_energy_j,
                             double& seconds);
  // `in_dram`: leading prompt tokens whose K/V the idle stage put in DRAM.
  // `files`: the match's stored files (KvReuse::matched_files()), read one by one when the whole prefix is
  // loaded from flash.
  sim::Task<void> bring_back(devices::Device& device, std::int64_t s, std::int64_t in_dram,
                             const std::vector<std::int64_t>& files, Served& out);
  kvsplit::DeviceCostOptions split_options() const;
  sim::Task<void> idle_after(devices::Device& device, std::shared_ptr<const Request> r);

  const models::CostModel& cost_;
  PipelineOptions options_;
  std::unique_ptr<KvReuse> reuse_;
  std::unique_ptr<kvsplit::KvSplitStrategy> split_;
  std::unique_ptr<kvsplit::DeviceSplitCosts> split_costs_;  // set by start(): the phone's
  std::unique_ptr<PrefillStage> prefill_;
  std::unique_ptr<AnswerCache> answers_;  // may be null: no answer cache
  std::unique_ptr<DecodeStage> decode_;
  std::unique_ptr<KvResidency> residency_;
  std::unique_ptr<IdleStage> idle_;  // may be null
  std::string owner_;  // set by start()
};

}  // namespace mobisim::policies::pipeline
