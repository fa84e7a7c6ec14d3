// Storage's analytic command path (StorageCommandModel::kAnalytic): a request's commands are
// admitted to the CommandQueueModel, and one process stands for the request's last command, with
// the same two waits that command's process has in the per-command model (until it takes the bus,
// then its transfer) and the same completion (all_of over its done event). Kept apart from
// storage.cpp (the profile parameters and curves) so either can change alone.
#include <algorithm>
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

sim::Task<void> Storage::analytic_read_batch(std::vector<double> bytes, std::string label, Load load) {
  // Storage::read's durations, rounded as it rounds them; each request admitted in turn at this
  // instant, as the processes of concurrent reads started now would admit theirs.
  const sim::Time t0 = sim_.now();
  const sim::Time ctrl = sim::from_seconds(spec_.read_command_seconds());
  const sim::Time latency = sim::from_seconds(spec_.access_latency_us * 1e-6);
  const double bw = spec_.seq_read_gbps * 1e9;
  const bool loads = load == Load::kPerRequest && spec_.load_ns_per_byte > 0;
  // Each request's completion, for its latency statistic and span (when either is kept).
  const bool per_request = keep_latencies_ || timeline_;
  std::vector<sim::Time> ends;
  if (per_request) ends.reserve(bytes.size());
  bool any = false;
  sim::Time last = t0;
  double commands = 0;
  for (double b : bytes) {
    if (b <= 0) continue;
    const std::size_t n = read_commands(b);
    sim::Time end = queue_.admit(t0, n, ctrl, latency, sim::from_seconds(b / static_cast<double>(n) / bw)).end;
    if (loads) end += sim::from_seconds(b * spec_.load_ns_per_byte * 1e-9);
    if (per_request) ends.push_back(end);
    any = true;
    last = std::max(last, end);
    commands += static_cast<double>(n);
  }
  if (!any) co_return;
  co_await sim_.timeout(last - t0);
  // Counted at the batch's end (one read() counts its bytes at its own end): equal once it is over.
  commands_.add(commands);
  for (double b : bytes)
    if (b > 0) bytes_read_.add(b);
  for (sim::Time end : ends) {
    if (keep_latencies_) request_ms_.add(sim::to_ms(end - t0));
    if (timeline_) timeline_->span(name_, label, t0, end, "io");
  }
}

}  // namespace mobisim::devices
