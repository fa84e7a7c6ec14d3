#pragma once
// A prompt's prefill as a CoordGen graph-switching schedule plans it (policies/specdec/
// graph_schedule.h, CoordGen section 3.2, Figure 8): every compute slot (block b of chunk c, on
// G_p or G_d) runs on the NPU from its scheduled start, and the prefill ends when the schedule
// does (its last graph loads included: decoding cannot start before G_d is in). The graph
// loader's spans go on the timeline's "<device>/graph loader" track. Times are counted from when
// the stage starts; alone on a phone the slots start exactly when the schedule says.
//
// Not in the stage registry: the schedule is the coordgen_schedule driver's (one per strategy and
// prompt length), not a YAML value.
#include <string>

#include "policies/pipeline/prefill_stage.h"
#include "policies/specdec/graph_schedule.h"
#include "sim/timeline.h"

namespace mobisim::policies::pipeline {

class ScheduledPrefill : public PrefillStage {
 public:
  // `timeline` may be null (no loader track).
  ScheduledPrefill(specdec::GraphSchedule schedule, sim::TimelineProcess* timeline, std::string device_name)
      : schedule_(std::move(schedule)), timeline_(timeline), device_name_(std::move(device_name)) {}
  sim::Task<void> run(devices::Device& device, const models::CostModel& cost, std::int64_t n_new,
                      std::int64_t n_cached, int priority, double& active_energy_j) override;
  std::string unit() const override { return "npu"; }

 private:
  void loader_spans(sim::Time t0) const;

  specdec::GraphSchedule schedule_;
  sim::TimelineProcess* timeline_;
  std::string device_name_;
};

}  // namespace mobisim::policies::pipeline
