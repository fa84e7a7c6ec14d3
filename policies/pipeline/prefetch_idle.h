#pragma once
// `prefetch`: in idle time, the K/V the next request will most likely reuse is promoted from
// flash to DRAM (the move PerCache's cache scheduler makes between its flash and DRAM tiers while
// the phone is idle, applied to the pipeline's KV-reuse stage). Skipped when the device does not
// allow background work (low battery, no thermal headroom: Device::background_allowed()). `quiet_s` after a request's answer,
// the stage looks that request's prompt up in the KV-reuse stage (as a follow-up would: for a
// chat, the next turn starts with it) and, when the matched prefix's bytes fit in the DRAM ledger
// beside everything else (held as "<app>/prefetch"; a prefix that does not fit is not promoted),
// reads them from flash (nothing after a request the answer cache answered). The next request's
// leading tokens that equal that prefix are then brought back from DRAM: its load_or_recompute split reads them at DRAM bandwidth instead of
// from flash (split_estimate_s still plans the flash read). A request that arrives before the
// read has finished gets nothing from it. The look-up counts as a use of the stored entry (its
// recency, for eviction).
//
// Parameters:
//   quiet_s   idle time after an answer before the prefetch starts (s)
//   max_mb    largest prefix promoted (MB); a longer match is promoted up to this size
#include <vector>

#include "policies/pipeline/idle_stage.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class PrefetchIdle : public IdleStage {
 public:
  explicit PrefetchIdle(const Params& p) : quiet_s_(p.real("quiet_s")), max_bytes_(p.real("max_mb") * 1e6) {}
  static ParamSchema schema();
  sim::Task<void> after(devices::Device& device, const std::string& owner, KvReuse& reuse, const Request& r,
                        bool answer_hit, double kv_bytes_per_token) override;
  IdleClaim claim(devices::Device& device, const std::string& owner, const Request& r) override;

 private:
  double quiet_s_, max_bytes_;
  std::int64_t generation_ = 0;  // bumped by claim(): idle work of an earlier generation stops
  double held_ = 0;              // DRAM held for the prefetched (or being prefetched) prefix
  bool ready_ = false;           // the read has finished
  std::vector<std::int32_t> tokens_;  // the prefetched prefix's token ids
};

}  // namespace mobisim::policies::pipeline
