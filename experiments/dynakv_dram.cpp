#include "experiments/dynakv_dram.h"

namespace mobisim::experiments {

DynaKvDramLedger::DynaKvDramLedger(const devices::DeviceProfile& device, std::int64_t weight_bytes,
                                   sim::StatGroup& device_stats)
    : dram_(sim_, device.dram, device.name, device_stats.child("dram")) {
  set(weights_owner_, weights_, weight_bytes);
}

DynaKvDramLedger::~DynaKvDramLedger() { sim_.shutdown(); }

void DynaKvDramLedger::set(const std::string& owner, std::int64_t& held, std::int64_t bytes) {
  // Integer byte counts: their differences convert to double exactly (below 2^53).
  if (bytes > held)
    dram_.reserve(owner, static_cast<double>(bytes - held));
  else if (bytes < held)
    dram_.release(owner, static_cast<double>(held - bytes));
  held = bytes;
}

void DynaKvDramLedger::hold_for(const DynaKvDramUse& use, sim::Time duration_ns) {
  // Whatever shrinks first, so a step's bytes are checked against what it holds, not the step before's.
  auto shrink = [&](const std::string& owner, std::int64_t& held, std::int64_t bytes) {
    if (bytes < held) set(owner, held, bytes);
  };
  shrink(cache_owner_, held_.cache, use.cache);
  shrink(representatives_owner_, held_.representatives, use.representatives);
  shrink(retrieved_owner_, held_.retrieved, use.retrieved);
  shrink(dram_only_owner_, held_.dram_only, use.dram_only);
  set(cache_owner_, held_.cache, use.cache);
  set(representatives_owner_, held_.representatives, use.representatives);
  set(retrieved_owner_, held_.retrieved, use.retrieved);
  set(dram_only_owner_, held_.dram_only, use.dram_only);
  sim_.run_until(sim_.now() + duration_ns);
}

void DynaKvDramLedger::finish() {
  hold_for(DynaKvDramUse{}, 0);
  set(weights_owner_, weights_, 0);
  sim_.shutdown();
}

}  // namespace mobisim::experiments
