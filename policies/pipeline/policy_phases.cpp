#include "policies/pipeline/policy_phases.h"

#include <algorithm>
#include <utility>


namespace mobisim::policies::pipeline {

double phase_marginal_energy_j(const devices::DeviceProfile& phone, const std::string& unit, double seconds,
                               std::optional<double> power_w, const std::string& needed_by) {
  if (!power_w) return phone.marginal_energy_j(unit, seconds, needed_by);
  return (*power_w - phone.unit_power_w(unit, needed_by).second) * seconds;
}

void PolicyPlan::set(std::vector<specdec::Phase> phases, double extra_dram_bytes) {
  replay_.set(std::move(phases));
  extra_bytes_ = std::max(0.0, extra_dram_bytes);
}

sim::Task<void> PolicyPlan::prefill(devices::Device& device, int priority) {
  if (extra_bytes_ > 0) device.dram().reserve(owner_, extra_bytes_);
  co_await replay_.prefill(device, priority);
}

sim::Task<void> PolicyPlan::rest(devices::Device& device, int priority, specdec::PhaseReplay::VerifyWrap wrap) {
  co_await replay_.rest(device, priority, std::move(wrap));
  if (extra_bytes_ > 0) device.dram().release(owner_, extra_bytes_);
}

sim::Task<void> PolicyPrefill::begin(devices::Device& device, const models::CostModel& cost,
                                     const std::string& owner) {
  (void)device;
  (void)cost;
  plan_->begin(owner);
  co_return;
}

sim::Task<void> PolicyPrefill::run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                                   std::int64_t n_cached, int priority, double& active_energy_j) {
  (void)cost;
  (void)n_new;
  (void)n_cached;
  (void)active_energy_j;  // the driver reads the phone's energy meter around the request
  co_await plan_->prefill(device, priority);
}

sim::Task<void> PolicyDecode::run(const DecodeJob& job, Decoded& out) {
  co_await plan_->rest(job.device, job.priority);
  out.steps = plan_->verifications();
}

}  // namespace mobisim::policies::pipeline
