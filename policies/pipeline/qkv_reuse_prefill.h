#pragma once
// `qkv_reuse`: the prefill of PerCache's QKV reuse (seed 000 appendix B.1) on a compute unit. The
// reused positions' Q/K/V projections (and RoPE) are skipped, but attention and the FFN still run
// for every position of the prompt: one pass of CostModel::prefill over the whole prompt with the
// reused positions as `n_reused_qkv` (PrefillShape{n, 0, reused, 1}), where the `unit` stage
// computes only the new positions against the reused ones' K/V (prefix skipping, RAGCache proper).
// With `mode: kv_projection` only K and V were stored (the paper's RAGCache as evaluated in its
// section 5.3): the reused positions' Q projection is computed too, after the pass. The same
// shapes as the `rag` app's CachingPolicy (policies/rag/cache_engine.h, reuse_mode).
//
// Parameters:
//   unit   the compute unit (a pipeline app fills in its own `unit` when this is not given)
//   mode   qkv_projection (PerCache: Q, K and V stored) | kv_projection (K and V stored, Q recomputed)
#include "policies/pipeline/prefill_stage.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class QkvReusePrefill : public PrefillStage {
 public:
  explicit QkvReusePrefill(const Params& p);
  static ParamSchema schema();
  sim::Task<void> run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                      std::int64_t n_cached, int priority, double& active_energy_j) override;
  std::string unit() const override { return unit_; }

 private:
  std::string unit_;
  bool recompute_q_;
};

}  // namespace mobisim::policies::pipeline
