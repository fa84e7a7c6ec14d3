#pragma once
// The wiring every driver shares: one simulated run = a Simulator and the Device it
// drives, owned together and torn down in the only safe order.
//
//   SimulatedRun run(profile, stats.child("device"), ctx.timeline_process("naive / u0", {...}));
//   policies::RagPipeline pipe(run.sim(), run.device(), ...);   // built on top, dies first
//   run.start(replay(run.sim(), pipe, ...), "user u0");
//   run.run();                                                   // runs, then shuts down
//
// run() ends with Simulator::shutdown(): processes that never finished are destroyed while the
// device and anything the driver built on top still exist, and every time-weighted statistic
// the simulation clocks is closed, so the statistics tree (which outlives the run, in the
// Results) holds plain values and never reads a dead simulator. The destructor shuts down too,
// before the device goes, when a run is abandoned by an exception.
#include <string>

#include "devices/device.h"
#include "sim/simulator.h"
#include "sim/stats.h"
#include "sim/timeline.h"

namespace mobisim::experiments {

class SimulatedRun {
 public:
  // `sustained`: the experiment's `thermal:` setting (devices/power_manager.h); default `none`.
  SimulatedRun(const devices::DeviceProfile& profile, sim::StatGroup& device_stats,
               sim::TimelineProcess* timeline = nullptr, const devices::SustainedOptions& sustained = {})
      : device_(sim_, profile, device_stats, timeline, sustained) {}
  ~SimulatedRun() { sim_.shutdown(); }
  SimulatedRun(const SimulatedRun&) = delete;
  SimulatedRun& operator=(const SimulatedRun&) = delete;

  sim::Simulator& sim() { return sim_; }
  devices::Device& device() { return device_; }
  void start(sim::Task<void> process, std::string name) { sim_.start(std::move(process), std::move(name)); }
  // Runs until no events remain, then shuts the simulation down (see above).
  void run() {
    try {
      sim_.run();
    } catch (...) {
      sim_.shutdown();  // while the pipeline the processes use still exists
      throw;
    }
    if (devices::PowerManager* pm = device_.power()) pm->finish();  // heat and charge up to the last event
    sim_.shutdown();
  }

 private:
  sim::Simulator sim_;        // declared first: destroyed last
  devices::Device device_;
};

}  // namespace mobisim::experiments
