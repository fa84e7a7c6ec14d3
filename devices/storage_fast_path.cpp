// Storage's analytic command path (StorageCommandModel::kAnalytic): a request's commands are
// admitted to the CommandQueueModel, and one process stands for the request's last command, with
// the same two waits that command's process has in the per-command model (until it takes the bus,
// then its transfer) and the same completion (all_of over its done event). Kept apart from
// storage.cpp (the profile parameters and curves) so either can change alone.
#include <vector>

#include "devices/storage.h"
#include "sim/event.h"

namespace mobisim::devices {

namespace {

sim::Task<void> last_command(sim::Simulator& sim, sim::Time bus_start, sim::Time end) {
  if (bus_start > sim.now()) co_await sim.timeout(bus_start - sim.now());
  co_await sim.timeout(end - sim.now());
}

}  // namespace

sim::Task<void> Storage::analytic_transfer(std::size_t n, double cmd_bytes, bool is_write) {
  // The per-command model's durations, rounded to nanoseconds the same way (Storage::command).
  const sim::Time ctrl = sim::from_seconds(is_write ? 1.0 / spec_.random_write_iops : spec_.read_command_seconds());
  const sim::Time latency = sim::from_seconds(spec_.access_latency_us * 1e-6);
  const double bw = (is_write ? spec_.seq_write_gbps : spec_.seq_read_gbps) * 1e9;
  const sim::Time xfer = sim::from_seconds(cmd_bytes / bw);
  const CommandQueueModel::Burst b = queue_.admit(sim_.now(), n, ctrl, latency, xfer);
  std::vector<sim::Event> done{sim_.start(last_command(sim_, b.last_bus_start, b.end), "storage-command").done_event()};
  co_await sim::all_of(sim_, done);
  commands_.add(static_cast<double>(n));
}

}  // namespace mobisim::devices
