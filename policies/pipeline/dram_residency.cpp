#include "policies/pipeline/dram_residency.h"

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

void DramResidency::hold(devices::Device& device, const std::string& owner, const KvTurn& turn) {
  held_ = static_cast<double>(turn.prompt + turn.answer) * bytes_per_token_;
  device.dram().reserve(owner, held_);
}

void DramResidency::release(devices::Device& device, const std::string& owner) {
  device.dram().release(owner, held_);
  held_ = 0;
}

MOBISIM_REGISTER(KvResidency, DramResidency, "dram", "The request's whole K/V in DRAM while it runs (the default).")

}  // namespace mobisim::policies::pipeline
