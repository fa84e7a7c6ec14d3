#include "experiments/dynakv_dram.h"

#include "sim/error.h"

namespace mobisim::experiments {

DynaKvDramLedger::DynaKvDramLedger(devices::Dram& dram, std::int64_t weight_bytes) : dram_(&dram) {
  set(weights_owner_, weights_, weight_bytes);
}

DynaKvDramLedger::DynaKvDramLedger(const devices::DeviceProfile& device, std::int64_t weight_bytes,
                                   sim::StatGroup& device_stats)
    : own_sim_(std::make_unique<sim::Simulator>()),
      own_dram_(std::make_unique<devices::Dram>(*own_sim_, device.dram, device.name, device_stats.child("dram"))),
      dram_(own_dram_.get()) {
  set(weights_owner_, weights_, weight_bytes);
}

DynaKvDramLedger::~DynaKvDramLedger() {
  if (own_sim_) own_sim_->shutdown();
}

sim::Time DynaKvDramLedger::now() const { return own_sim_ ? own_sim_->now() : 0; }

void DynaKvDramLedger::set(const std::string& owner, std::int64_t& held, std::int64_t bytes) {
  // Integer byte counts: their differences convert to double exactly (below 2^53).
  if (bytes > held)
    dram_->reserve(owner, static_cast<double>(bytes - held));
  else if (bytes < held)
    dram_->release(owner, static_cast<double>(held - bytes));
  held = bytes;
}

void DynaKvDramLedger::hold(const DynaKvDramUse& use) {
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
}

void DynaKvDramLedger::hold_for(const DynaKvDramUse& use, sim::Time duration_ns) {
  if (!own_sim_) throw Error("DynaKvDramLedger::hold_for: a ledger in a Device's DRAM runs on that Device's clock (use hold)");
  hold(use);
  own_sim_->run_until(own_sim_->now() + duration_ns);
}

void DynaKvDramLedger::finish() {
  hold(DynaKvDramUse{});
  set(weights_owner_, weights_, 0);
  if (own_sim_) own_sim_->shutdown();
}

}  // namespace mobisim::experiments
