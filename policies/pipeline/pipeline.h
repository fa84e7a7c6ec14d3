#pragma once
// One request through the pipeline's stages on one phone:
//
//   answer_cache        a past query close enough answers it (AnswerCache; optional): a hit ends here
//   kv_reuse            which prompt prefix [0, s) has K/V stored on flash (KvReuse)
//   load_or_recompute   how it comes back: the strategy's split l -> [0, l) recomputed on the unit
//                       while [l, s) is read from flash (a page-cached share copied from DRAM)
//   prefill             the prompt's other tokens, attending to the s reused ones (PrefillStage:
//                       one pass on a unit, or the NPU's static graphs)
//   decode              one token at a time on the unit
//   kv residency        the request's K/V held in the phone's DRAM ledger while it runs
//   store               what the KV-reuse stage keeps, written to flash in the background
//
// Every step is an event on the Device: it queues on the unit at the pipeline's priority, shares
// the DRAM bus and the flash with whatever else runs on the phone. The split strategy's
// closed-form time is kept beside the event path's (split_estimate_s, split_s): with nothing
// else running they agree to the nanosecond. Used by the pipeline app and by document drivers
// whose request flow it is (the prefix-caching note's TTFT experiment). Apps (policies/apps/) sit
// above it; the stage implementations of this folder below it.
#include <memory>
#include <string>

#include "devices/device.h"
#include "models/cost_model.h"
#include "policies/kvsplit/kv_split.h"
#include "policies/kvsplit/split_costs.h"
#include "policies/pipeline/answer_cache.h"
#include "policies/pipeline/decode_costs.h"
#include "policies/pipeline/kv_reuse.h"
#include "policies/pipeline/prefill_stage.h"
#include "policies/pipeline/request.h"

namespace mobisim::policies::pipeline {

struct PipelineOptions {
  std::string unit = "cpu";        // recomputes and decodes (and prefills, unless a prefill stage is given)
  int priority = 0;                // queue priority on the unit (lower first)
  double page_cache_fraction = 0;  // share of a stored prefix's bytes already in DRAM, [0, 1)
};

// One served request, as its row of the records.
struct Served {
  RequestTimes times;
  // The same instants on the simulated clock (integer ns): start, end of the split, first token.
  sim::Time started = 0, split_done = 0, first_token = 0;
  std::int64_t prompt_tokens = 0, matched_tokens = 0, reused_tokens = 0, recomputed_tokens = 0, loaded_tokens = 0;
  double split_s = 0, split_estimate_s = 0, prefill_s = 0, decode_s = 0;
  bool reuse_rejected = false;  // a stored entry failed verification (the prompt was prefilled whole)
  bool answer_hit = false;      // served by the answer cache: no prefill, no decode
  double answer_similarity = -1;
  // matched_tokens: the stored prefix the KV-reuse stage found; reused_tokens: of those, what was
  // brought back (at most the prompt less its last token, whose logits give the first answer token).
  KvStored stored;
};

class Pipeline {
 public:
  // `prefill` null: one batched pass on options.unit; `answers` null: no answer cache.
  Pipeline(const models::CostModel& cost, PipelineOptions options, std::unique_ptr<KvReuse> reuse,
           std::unique_ptr<kvsplit::KvSplitStrategy> split, std::unique_ptr<PrefillStage> prefill = nullptr,
           std::unique_ptr<AnswerCache> answers = nullptr);
  // Before the first request, on the phone: the KV-reuse stage learns the model's K/V size, the
  // prefill stage sets up what it keeps (graphs held in DRAM under `owner`).
  sim::Task<void> start(devices::Device& device, const std::string& owner);
  const KvReuse& reuse() const { return *reuse_; }
  // Serves `r` from now on; `kv_owner` names its K/V in the DRAM ledger.
  sim::Task<void> serve(devices::Device& device, const std::string& kv_owner, const Request& r, Served& out);

 private:
  sim::Task<void> bring_back(devices::Device& device, std::int64_t s, Served& out);
  sim::Task<void> load(devices::Device& device, double bytes);

  const models::CostModel& cost_;
  PipelineOptions options_;
  std::unique_ptr<KvReuse> reuse_;
  std::unique_ptr<kvsplit::KvSplitStrategy> split_;
  std::unique_ptr<kvsplit::DeviceSplitCosts> split_costs_;  // set by start(): the phone's
  std::unique_ptr<PrefillStage> prefill_;
  std::unique_ptr<AnswerCache> answers_;  // may be null: no answer cache
  DecodeCosts decode_;
};

}  // namespace mobisim::policies::pipeline
