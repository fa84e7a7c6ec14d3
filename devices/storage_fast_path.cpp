// Storage's analytic command path (StorageCommandModel::kAnalytic): a request's commands are
// admitted to the CommandQueueModel, and one process stands for the request's last command, with
// the same two waits that command's process has in the per-command model (until it takes the bus,
// then its transfer) and the same completion (all_of over its done event). Kept apart from
// storage.cpp (the profile parameters and curves) so either can change alone.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "devices/storage.h"
#include "sim/error.h"
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

void Storage::require_admission(const char* what, sim::Time at) const {
  if (model_ != StorageCommandModel::kAnalytic || keep_latencies_ || timeline_)
    throw Error(fmt::format("{}: {} needs the analytic command model, no kept request latencies and no "
                                 "timeline (each needs a process per request)",
                                 name_, what));
  if (at < sim_.now())
    throw Error(fmt::format("{}: {} at {} ns, before now ({} ns)", name_, what, at, sim_.now()));
}

Storage::ReadCosts Storage::read_costs(bool load) const {
  ReadCosts c;
  c.ctrl = sim::from_seconds(spec_.read_command_seconds());
  c.latency = sim::from_seconds(spec_.access_latency_us * 1e-6);
  c.bw_bps = spec_.seq_read_gbps * 1e9;
  c.max_cmd_bytes = spec_.max_transfer_kb * 1024.0;
  c.load_ns_per_byte = load ? spec_.load_ns_per_byte : 0.0;
  return c;
}

sim::Time Storage::admit_one_read(sim::Time at, double bytes, const ReadCosts& c, double& commands) {
  // Storage::read's durations, to the same doubles and roundings (analytic_read_batch, read_commands).
  const double n = std::ceil(bytes / c.max_cmd_bytes);
  sim::Time end = queue_.admit(at, static_cast<std::size_t>(n), c.ctrl, c.latency, sim::from_seconds(bytes / n / c.bw_bps)).end;
  if (c.load_ns_per_byte > 0) end += sim::from_seconds(bytes * c.load_ns_per_byte * 1e-9);
  commands += n;
  return end;
}

Storage::Admitted Storage::admitted_reads(sim::Time at, std::span<const std::int64_t> bytes, Load load) {
  const ReadCosts c = read_costs(load == Load::kPerRequest && spec_.load_ns_per_byte > 0);
  Admitted a;
  a.end = at;
  std::int64_t read = 0;  // whole bytes: exact, and so is their double
  for (std::int64_t b : bytes)
    if (b > 0) {
      a.end = std::max(a.end, admit_one_read(at, static_cast<double>(b), c, a.commands));
      read += b;
    }
  a.bytes_read = static_cast<double>(read);
  return a;
}

Storage::Admitted Storage::admitted_read(sim::Time at, double bytes, Load load) {
  Admitted a;
  a.end = at;
  if (bytes <= 0) return a;
  a.end = admit_one_read(at, bytes, read_costs(load == Load::kPerRequest && spec_.load_ns_per_byte > 0), a.commands);
  a.bytes_read = bytes;
  return a;
}

Storage::Admitted Storage::admitted_write(sim::Time at, double bytes) {
  Admitted a;
  a.end = at;
  if (bytes <= 0) return a;
  // Storage::write's commands (whole pages, at most max_transfer_kb each), timed as analytic_transfer times them.
  const double programmed = spec_.written_bytes(bytes);
  const auto n = static_cast<std::size_t>(std::ceil(programmed / (spec_.max_transfer_kb * 1024.0)));
  const sim::Time ctrl = sim::from_seconds(1.0 / spec_.random_write_iops);
  const sim::Time latency = sim::from_seconds(spec_.access_latency_us * 1e-6);
  const sim::Time xfer = sim::from_seconds(programmed / static_cast<double>(n) / (spec_.seq_write_gbps * 1e9));
  a.end = queue_.admit(at, n, ctrl, latency, xfer).end;
  a.commands = static_cast<double>(n);
  a.bytes_written = bytes;
  a.flash_bytes_written = programmed;
  return a;
}

sim::Time Storage::count(const Admitted& a) {
  // What the requests add, one add per counter (the sums are whole numbers, exact in any grouping).
  if (a.commands > 0) commands_.add(a.commands);
  if (a.bytes_read > 0) bytes_read_.add(a.bytes_read);
  if (a.bytes_written > 0) {
    bytes_written_.add(a.bytes_written);
    flash_bytes_written_.add(a.flash_bytes_written);
  }
  return a.end;
}

sim::Time Storage::admit_reads(sim::Time at, std::span<const std::int64_t> bytes, Load load) {
  require_admission("admit_reads", at);
  return count(admitted_reads(at, bytes, load));
}

sim::Time Storage::admit_read(sim::Time at, double bytes, Load load) {
  require_admission("admit_read", at);
  return count(admitted_read(at, bytes, load));
}

sim::Time Storage::admit_write(sim::Time at, double bytes) {
  require_admission("admit_write", at);
  return count(admitted_write(at, bytes));
}

template <class Admit>
sim::Time Storage::admit_repeated(sim::Time at, Repeated& same, Admit admit) {
  if (!queue_.idle_at(at)) return count(admit(at));  // the recording holds only from idle
  if (same.recorded_ && same.owner_ == this) {
    queue_.replay(at, same.burst_);
    Admitted a;
    a.end = at + same.duration_;
    a.commands = same.commands_;
    a.bytes_read = same.bytes_read_;
    a.bytes_written = same.bytes_written_;
    a.flash_bytes_written = same.flash_bytes_written_;
    return count(a);
  }
  queue_.begin_idle(at);
  const Admitted a = admit(at);
  if (a.commands == 0) return a.end;  // nothing admitted, nothing to record
  // The burst the queue may still hold from the last replay is over (begin_idle): reuse its buffers.
  if (!same.burst_ || same.burst_.use_count() > 1) same.burst_ = std::make_shared<IdleBurst>();
  queue_.record_since_idle(at, *same.burst_);
  same.owner_ = this;
  same.recorded_ = true;
  same.duration_ = a.end - at;
  same.commands_ = a.commands;
  same.bytes_read_ = a.bytes_read;
  same.bytes_written_ = a.bytes_written;
  same.flash_bytes_written_ = a.flash_bytes_written;
  return count(a);
}

sim::Time Storage::admit_reads(sim::Time at, std::span<const std::int64_t> bytes, Load load, Repeated& same) {
  require_admission("admit_reads", at);
  return admit_repeated(at, same, [&](sim::Time t) { return admitted_reads(t, bytes, load); });
}

sim::Time Storage::admit_read(sim::Time at, double bytes, Load load, Repeated& same) {
  require_admission("admit_read", at);
  return admit_repeated(at, same, [&](sim::Time t) { return admitted_read(t, bytes, load); });
}

sim::Time Storage::admit_write(sim::Time at, double bytes, Repeated& same) {
  require_admission("admit_write", at);
  return admit_repeated(at, same, [&](sim::Time t) { return admitted_write(t, bytes); });
}

}  // namespace mobisim::devices
