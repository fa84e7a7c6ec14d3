#pragma once
// `vanilla`: one token per step on a compute unit. Output token i + 1 comes from a step over
// token i, attending to the prompt and the i - 1 tokens before it (a context of n + i - 1 cached
// positions); each step is the unit's roofline of CostModel::decode, memoised by context
// (decode_costs.h). The KV-residency stage's reads come before every step.
//
// Parameters:
//   unit   the compute unit (a pipeline app fills in its own `unit` when this is not given)
#include <memory>

#include "policies/pipeline/decode_costs.h"
#include "policies/pipeline/decode_stage.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class VanillaDecode : public DecodeStage {
 public:
  explicit VanillaDecode(const Params& p) : unit_(p.text("unit")) {}
  explicit VanillaDecode(std::string unit) : unit_(std::move(unit)) {}
  static ParamSchema schema();
  void begin(devices::Device& device, const models::CostModel& cost) override;
  sim::Task<void> run(const DecodeJob& job, Decoded& out) override;
  std::string unit() const override { return unit_; }

 private:
  std::string unit_;
  std::unique_ptr<DecodeCosts> costs_;  // set by begin()
};

}  // namespace mobisim::policies::pipeline
