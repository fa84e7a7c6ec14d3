#include "policies/specdec/phase_replay.h"

#include <algorithm>

#include "sim/error.h"

namespace mobisim::policies::specdec {

namespace {

// The prefill's slots and, after its last one, the CPU LM head that gives the first token (sd_policies.cpp).
bool is_prefill_label(const Phase& ph) {
  return ph.label == "prefill" || ph.label == "prefill attention" || ph.label == "prefill lm head";
}

// One phase on its unit, at the power it draws (Phase::power_w) when that is not the unit's own.
sim::Task<void> run_phase(devices::Device& device, const Phase& ph, int priority) {
  if (ph.power_w)
    co_await device.busy_drawing(ph.unit, sim::from_seconds(ph.seconds), *ph.power_w, ph.label, ph.priority + priority);
  else
    co_await device.busy(ph.unit, sim::from_seconds(ph.seconds), ph.label, ph.priority + priority);
}

}  // namespace

void PhaseReplay::set(std::vector<Phase> phases) {
  if (background_ && !background_->done())
    throw Error("internal: a request's phases were replaced while its calibration stream still ran");
  phases_ = std::move(phases);
  // The policies emit the prefill's slots first (add_prefill); what follows is the decoder's.
  split_ = 0;
  while (split_ < phases_.size() && (phases_[split_].background || is_prefill_label(phases_[split_]))) ++split_;
  background_.reset();
  done_.clear();
  join_wait_s_ = 0;
}

std::int64_t PhaseReplay::verifications() const {
  return std::count_if(phases_.begin(), phases_.end(),
                       [](const Phase& ph) { return !ph.background && ph.label == "verify"; });
}

sim::Task<void> PhaseReplay::phase(devices::Device& device, std::size_t i, int priority) {
  co_await run_phase(device, phases_[i], priority);
  if (!done_.empty()) done_[i].succeed();
}

sim::Task<void> PhaseReplay::background(devices::Device& device, int priority) {
  for (const Phase& ph : phases_) {
    if (!ph.background) continue;
    if (ph.after >= 0) co_await done_[static_cast<std::size_t>(ph.after)];
    co_await run_phase(device, ph, priority);
  }
}

sim::Task<void> PhaseReplay::wait_background(devices::Device& device) {
  if (!background_ || background_->done()) co_return;
  const sim::Time from = device.sim().now();
  co_await background_->done_event();
  join_wait_s_ += sim::to_seconds(device.sim().now() - from);
}

sim::Task<void> PhaseReplay::prefill(devices::Device& device, int priority) {
  const bool any_background =
      std::any_of(phases_.begin(), phases_.end(), [](const Phase& ph) { return ph.background; });
  if (any_background) {
    done_.reserve(phases_.size());  // events are not moved once awaited
    for (std::size_t i = 0; i < phases_.size(); ++i) done_.emplace_back(device.sim());
    background_ = device.sim().start(background(device, priority), "calibration");
  }
  for (std::size_t i = 0; i < split_; ++i)
    if (!phases_[i].background) co_await phase(device, i, priority);
}

sim::Task<void> PhaseReplay::rest(devices::Device& device, int priority, VerifyWrap wrap) {
  std::int64_t verified = 0;
  for (std::size_t i = split_; i < phases_.size(); ++i) {
    if (phases_[i].background) continue;
    if (phases_[i].join) co_await wait_background(device);
    if (wrap && phases_[i].label == "verify")
      co_await wrap(verified++, phase(device, i, priority));
    else
      co_await phase(device, i, priority);
  }
  // The background stream reads `phases_` and `done_`: it ends before the next request's set().
  co_await wait_background(device);
}

}  // namespace mobisim::policies::specdec
