#include "policies/kvcluster/flash_io.h"

#include "sim/event.h"
#include "sim/stats.h"

namespace mobisim::policies::kvcluster {

sim::Task<void> read_runs(sim::Simulator& sim, devices::Storage& storage, std::vector<ReadRun> runs) {
  std::vector<sim::Event> reads;
  reads.reserve(runs.size());
  for (const ReadRun& r : runs) reads.push_back(sim.start(storage.read(static_cast<double>(r.bytes), "kv run")).done_event());
  if (!reads.empty()) co_await sim::all_of(sim, reads);
}

double simulated_read_seconds(const devices::StorageSpec& spec, const std::vector<ReadRun>& runs) {
  if (runs.empty()) return 0.0;
  sim::Simulator sim;
  sim::StatGroup stats("flash_io");
  devices::Storage storage(sim, spec, "ufs", stats);
  sim.start(read_runs(sim, storage, runs), "read runs");
  sim.run();
  const double seconds = sim::to_seconds(sim.now());
  sim.shutdown();
  return seconds;
}

double effective_bandwidth_bps(std::int64_t wanted_bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(wanted_bytes) / seconds : 0.0;
}

}  // namespace mobisim::policies::kvcluster
