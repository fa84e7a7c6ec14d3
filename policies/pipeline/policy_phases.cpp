#include "policies/pipeline/policy_phases.h"

#include <algorithm>

#include "sim/error.h"

namespace mobisim::policies::pipeline {

namespace {

bool is_prefill(const specdec::Phase& ph) { return ph.label == "prefill" || ph.label == "prefill attention"; }

}  // namespace

void PolicyPlan::set(std::vector<specdec::Phase> phases, double extra_dram_bytes) {
  if (background_ && !background_->done())
    throw Error("internal: a policy plan was replaced while its calibration stream still ran");
  phases_ = std::move(phases);
  extra_bytes_ = std::max(0.0, extra_dram_bytes);
  // The policies emit the prefill's slots first (add_prefill); what follows is the decoder's.
  split_ = 0;
  while (split_ < phases_.size() && (phases_[split_].background || is_prefill(phases_[split_]))) ++split_;
  background_.reset();
  done_.clear();
  join_wait_s_ = 0;
}

std::int64_t PolicyPlan::verifications() const {
  return std::count_if(phases_.begin(), phases_.end(),
                       [](const specdec::Phase& ph) { return !ph.background && ph.label == "verify"; });
}

sim::Task<void> PolicyPlan::phase(devices::Device& device, std::size_t i, int priority) {
  const specdec::Phase& ph = phases_[i];
  co_await device.busy(ph.unit, sim::from_seconds(ph.seconds), ph.label, ph.priority + priority);
  if (!done_.empty()) done_[i].succeed();
}

// Background phases in order, each once the main-chain phase it follows has run (replay_phases).
sim::Task<void> PolicyPlan::background(devices::Device& device, int priority) {
  for (const specdec::Phase& ph : phases_) {
    if (!ph.background) continue;
    if (ph.after >= 0) co_await done_[static_cast<std::size_t>(ph.after)];
    co_await device.busy(ph.unit, sim::from_seconds(ph.seconds), ph.label, ph.priority + priority);
  }
}

sim::Task<void> PolicyPlan::wait_background(devices::Device& device) {
  if (!background_ || background_->done()) co_return;
  const sim::Time from = device.sim().now();
  co_await background_->done_event();
  join_wait_s_ += sim::to_seconds(device.sim().now() - from);
}

sim::Task<void> PolicyPlan::prefill(devices::Device& device, int priority) {
  if (extra_bytes_ > 0) device.dram().reserve(owner_, extra_bytes_);
  const bool any_background =
      std::any_of(phases_.begin(), phases_.end(), [](const specdec::Phase& ph) { return ph.background; });
  if (any_background) {
    done_.reserve(phases_.size());  // events are not moved once awaited
    for (std::size_t i = 0; i < phases_.size(); ++i) done_.emplace_back(device.sim());
    background_ = device.sim().start(background(device, priority), "calibration");
  }
  for (std::size_t i = 0; i < split_; ++i)
    if (!phases_[i].background) co_await phase(device, i, priority);
}

sim::Task<void> PolicyPlan::rest(devices::Device& device, int priority) {
  for (std::size_t i = split_; i < phases_.size(); ++i) {
    if (phases_[i].background) continue;
    if (phases_[i].join) co_await wait_background(device);
    co_await phase(device, i, priority);
  }
  // The background stream reads `phases_` and `done_`: it ends before the next request's set().
  co_await wait_background(device);
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
