#include "policies/kvcluster/flash_io.h"

#include <algorithm>
#include <cmath>

#include "devices/storage_queue_model.h"
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

double idle_read_seconds(const devices::StorageSpec& spec, const std::vector<ReadRun>& runs) {
  // Storage::read and its analytic transfer, with the durations rounded to nanoseconds as they round them.
  const sim::Time ctrl = sim::from_seconds(spec.read_command_seconds());
  const sim::Time latency = sim::from_seconds(spec.access_latency_us * 1e-6);
  const double bw = spec.seq_read_gbps * 1e9;
  const double max_cmd = spec.max_transfer_kb * 1024.0;
  devices::CommandQueueModel queue(spec.queue_depth);
  sim::Time end = 0;
  for (const ReadRun& r : runs) {
    const auto bytes = static_cast<double>(r.bytes);
    if (bytes <= 0) continue;
    const auto n = static_cast<std::size_t>(std::ceil(bytes / max_cmd));
    const sim::Time xfer = sim::from_seconds(bytes / static_cast<double>(n) / bw);
    sim::Time done = queue.admit(0, n, ctrl, latency, xfer).end;
    if (spec.load_ns_per_byte > 0) done += sim::from_seconds(bytes * spec.load_ns_per_byte * 1e-9);
    end = std::max(end, done);
  }
  return sim::to_seconds(end);
}

double effective_bandwidth_bps(std::int64_t wanted_bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(wanted_bytes) / seconds : 0.0;
}

}  // namespace mobisim::policies::kvcluster
