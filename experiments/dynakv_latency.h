#pragma once
// Per-token latency of DynaKV-style retrieval decoding on a CPU backend (seed 003,
// section 6.1 and Figure 9): how one layer's compute and its flash I/O overlap.
// The driver runs this pipeline as events on a Device (experiments/dynakv_step_events.h);
// the closed form below is what those events must give (the tests' oracle).
//
//   layer = max(attention norm + Q projection + RoPE,  representatives read)        pipeline 1
//         + cluster arithmetic (selection, assignment, variance, split)
//         + max(K/V projections + Q-K scores,  retrieval of the selected clusters)
//         + max(softmax + context + O projection + FFN,
//               prefetch of the next layer's cached clusters + this layer's writes)   pipeline 2
//
// The retrieval depends on the layer's own query, so only the K/V projection and the
// Q-K similarity can hide it (the document: "the transfer of retrieved KV entries is
// further overlapped with the computation of key-value (KV) projection and Q-K
// similarity"); what it takes beyond that is on the critical path of every layer.
#include <cstdint>

#include "devices/compute_unit.h"
#include "models/cost_model.h"

namespace mobisim::experiments {

// CPU time of one decode step, per layer, split where the pipeline overlaps it.
struct LayerCompute {
  double before_retrieval_s = 0;  // attention norm, Q projection, RoPE (pipeline 1)
  double beside_retrieval_s = 0;  // K/V projections and Q-K scores (hide the retrieval)
  double after_retrieval_s = 0;   // softmax, context, O projection, residuals, FFN (pipeline 2)
  double per_token_s = 0;         // embedding, final norm, LM head (once per token, not per layer)
  double per_layer_s() const { return before_retrieval_s + beside_retrieval_s + after_retrieval_s; }
};

// One token attending `attended` cached entries per KV head, on `cpu` at `dtype`.
LayerCompute layer_compute(const models::CostModel& cost, const devices::ComputeUnitSpec& cpu, models::DType dtype,
                           std::int64_t attended);

// Flash time of one layer of one step.
struct LayerIo {
  double representatives_s = 0;  // the layer's cluster representatives, read beside the Q projection
  double retrieval_s = 0;        // the selected clusters not in the DRAM cache (+ forced split loads)
  double background_s = 0;       // cached clusters' prefetch + offload writes and pool moves
};

// The critical path of one layer (the formula above); `cluster_s` is the cluster arithmetic.
double pipelined_layer_seconds(const LayerCompute& c, double cluster_s, const LayerIo& io);

}  // namespace mobisim::experiments
