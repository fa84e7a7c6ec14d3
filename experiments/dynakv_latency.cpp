#include "experiments/dynakv_latency.h"

#include <algorithm>

namespace mobisim::experiments {

LayerCompute layer_compute(const models::CostModel& cost, const devices::ComputeUnitSpec& cpu, models::DType dtype,
                           std::int64_t attended) {
  using models::OpKind;
  LayerCompute c;
  // cost.decode sums every per-layer operator over the model's layers.
  const double layers = cost.spec().n_layers;
  for (const auto& op : cost.decode(attended).ops) {
    const double s = cpu.op_seconds(op, dtype);
    switch (op.kind) {
      case OpKind::kAttnNorm:
      case OpKind::kQProj:
      case OpKind::kRope:
        c.before_retrieval_s += s / layers;
        break;
      case OpKind::kKProj:
      case OpKind::kVProj:
      case OpKind::kAttnScore:
        c.beside_retrieval_s += s / layers;
        break;
      case OpKind::kEmbed:
      case OpKind::kFinalNorm:
      case OpKind::kLmHead:
        c.per_token_s += s;
        break;
      default:
        c.after_retrieval_s += s / layers;
    }
  }
  return c;
}

double pipelined_layer_seconds(const LayerCompute& c, double cluster_s, const LayerIo& io) {
  return std::max(c.before_retrieval_s, io.representatives_s) + cluster_s +
         std::max(c.beside_retrieval_s, io.retrieval_s) + std::max(c.after_retrieval_s, io.background_s);
}

}  // namespace mobisim::experiments
