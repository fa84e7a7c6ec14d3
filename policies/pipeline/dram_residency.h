#pragma once
// `dram`: the request's whole K/V (prompt and answer) held in the phone's DRAM ledger while it
// runs (the default); decode steps read nothing more. A request whose K/V does not fit beside
// everything else stops the run naming DRAM. No parameters.
#include "policies/pipeline/kv_residency.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class DramResidency : public KvResidency {
 public:
  explicit DramResidency(const Params&) {}
  DramResidency() = default;
  static ParamSchema schema() { return {}; }
  void begin(const models::CostModel& cost) override { bytes_per_token_ = cost.spec().kv_bytes_per_token(); }
  using KvResidency::hold;
  void hold(devices::Device& device, const std::string& owner, const KvTurn& turn) override;
  void release(devices::Device& device, const std::string& owner) override;

 private:
  double bytes_per_token_ = 0;
  double held_ = 0;
};

}  // namespace mobisim::policies::pipeline
