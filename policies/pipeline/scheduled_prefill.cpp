#include "policies/pipeline/scheduled_prefill.h"

#include <fmt/format.h>

namespace mobisim::policies::pipeline {

void ScheduledPrefill::loader_spans(sim::Time t0) const {
  if (!timeline_) return;
  for (const specdec::LoadSpan& l : schedule_.loads)
    timeline_->span(device_name_ + "/graph loader", fmt::format("load G_d B{}", l.block),
                    t0 + sim::from_seconds(l.start_s), t0 + sim::from_seconds(l.end_s), "load");
}

sim::Task<void> ScheduledPrefill::run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                                      std::int64_t n_cached, int priority, double& active_energy_j) {
  (void)cost;
  (void)n_new;
  (void)n_cached;
  (void)active_energy_j;  // the driver reads the phone's energy meter
  sim::Simulator& sim = device.sim();
  const sim::Time t0 = sim.now();
  loader_spans(t0);
  for (const specdec::ComputeSlot& c : schedule_.computes) {
    // A slot waits for its scheduled start (its block's graph load), never starts before it.
    const sim::Time start = t0 + sim::from_seconds(c.start_s);
    if (sim.now() < start) co_await sim.timeout(start - sim.now());
    co_await device.busy("npu", sim::from_seconds(c.end_s - c.start_s),
                         fmt::format("B{} chunk {} on {}", c.block, c.chunk, c.on_decode_graph ? "G_d" : "G_p"),
                         priority);
  }
  const sim::Time end = t0 + sim::from_seconds(schedule_.latency_s());
  if (sim.now() < end) co_await sim.timeout(end - sim.now());
}

}  // namespace mobisim::policies::pipeline
