#include "devices/storage.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/event.h"

namespace mobisim::devices {

ParamSchema StorageSpec::schema() {
  ParamSchema s;
  s.text("kind", std::nullopt, "storage standard").in({"ufs2.1", "ufs2.2", "ufs3.0", "ufs3.1", "ufs4.0", "nvme", "emmc"});
  s.real("seq_read_gbps", std::nullopt, "sequential read bandwidth").positive().with_unit("GB/s");
  s.real("seq_write_gbps", std::nullopt, "sequential write bandwidth").positive().with_unit("GB/s");
  s.real("random_read_iops", std::nullopt, "4 KB random read IOPS at full queue depth").positive();
  s.real("random_write_iops", std::nullopt, "4 KB random write IOPS at full queue depth").positive();
  s.integer("queue_depth", std::nullopt, "command queue depth (UFS: 32)").range(1, 1024);
  s.real("access_latency_us", std::nullopt, "flash access latency per command").non_negative().with_unit("us");
  s.real("max_transfer_kb", 512.0, "largest single command; bigger requests are split").positive().with_unit("KB");
  s.real("page_size_kb", std::nullopt, "flash program page; partial-page writes program a whole page")
      .positive()
      .with_unit("KB");
  s.real("active_power_w", 0.0, "power while transferring (on top of the per-byte energies)").non_negative().with_unit("W");
  s.real("idle_power_w", std::nullopt, "power while idle").non_negative().with_unit("W");
  s.real("read_energy_nj_per_byte", std::nullopt, "energy per byte read").non_negative().with_unit("nJ/B");
  s.real("write_energy_nj_per_byte", std::nullopt, "energy per byte programmed (whole pages)")
      .non_negative()
      .with_unit("nJ/B");
  s.real("capacity_gb", 128.0, "capacity").positive().with_unit("GB");
  s.real("load_ns_per_byte", 0.0,
         "runtime cost per byte read, after the I/O (deserialisation, conversion, copies); 0 = none")
      .non_negative()
      .with_unit("ns/B")
      .zero_means_not_modelled();
  s.real("read_command_overhead_us", 0.0,
         "host time per read command on the serial submission path (the runtime's loader); 0 = none")
      .non_negative()
      .with_unit("us")
      .zero_means_not_modelled();
  s.integer("lanes", 1, "interface lanes (UFS 2.x-4.0: 2)").range(1, 16);
  s.real("lane_gbps", 0.0, "payload rate per lane (UFS 4.0 HS-G5: 2.9; 0: unchecked)").non_negative().with_unit("GB/s");
  s.text("source", std::string(""), "where these numbers come from");
  return s;
}

StorageSpec StorageSpec::from_params(const Params& p) {
  StorageSpec s;
  s.kind = p.text("kind");
  s.seq_read_gbps = p.real("seq_read_gbps");
  s.seq_write_gbps = p.real("seq_write_gbps");
  s.random_read_iops = p.real("random_read_iops");
  s.random_write_iops = p.real("random_write_iops");
  s.queue_depth = static_cast<int>(p.integer("queue_depth"));
  s.access_latency_us = p.real("access_latency_us");
  s.max_transfer_kb = p.real("max_transfer_kb");
  s.page_size_kb = p.real("page_size_kb");
  s.active_power_w = p.real("active_power_w");
  s.idle_power_w = p.real("idle_power_w");
  s.read_energy_nj_per_byte = p.real("read_energy_nj_per_byte");
  s.write_energy_nj_per_byte = p.real("write_energy_nj_per_byte");
  s.capacity_gb = p.real("capacity_gb");
  s.load_ns_per_byte = p.real("load_ns_per_byte");
  s.read_command_overhead_us = p.real("read_command_overhead_us");
  s.lanes = static_cast<int>(p.integer("lanes"));
  s.lane_gbps = p.real("lane_gbps");
  if (s.interface_gbps() > 0 && s.seq_read_gbps > s.interface_gbps() * (1 + 1e-9))
    p.fail("seq_read_gbps", fmt::format("{} GB/s exceeds the interface ({} lanes x {} GB/s)", s.seq_read_gbps, s.lanes,
                                        s.lane_gbps));
  // Whatever the lanes say, no device moves more than its standard's link carries: a value above
  // it is a unit slip (MB/s typed as GB/s), not a fast phone.
  const double standard_max = standard_max_gbps(s.kind);
  for (const auto& [key, value] : {std::pair{"seq_read_gbps", s.seq_read_gbps}, {"seq_write_gbps", s.seq_write_gbps}})
    if (value > standard_max)
      p.fail(key, fmt::format("{} GB/s is beyond what {} can carry ({} GB/s: {}); a MB/s value typed as GB/s?", value,
                              s.kind, standard_max, standard_link(s.kind)));
  return s;
}

// Payload ceilings of the links (JEDEC / NVMe specifications, after line coding): UFS 2.x
// HS-G3 x2 with 8b/10b 2 x 0.583 GB/s; UFS 3.x HS-G4 x2 2 x 1.166 GB/s; UFS 4.0 HS-G5 x2 with
// 128b/130b 2 x 2.9 GB/s; eMMC 5.1 HS400 0.4 GB/s; NVMe up to PCIe 4.0 x4, 7.9 GB/s.
double StorageSpec::standard_max_gbps(const std::string& kind) {
  if (kind == "ufs2.1" || kind == "ufs2.2") return 1.17;
  if (kind == "ufs3.0" || kind == "ufs3.1") return 2.34;
  if (kind == "ufs4.0") return 5.8;
  if (kind == "emmc") return 0.4;
  return 7.9;  // nvme
}

std::string StorageSpec::standard_link(const std::string& kind) {
  if (kind == "ufs2.1" || kind == "ufs2.2") return "2 lanes of HS-Gear3";
  if (kind == "ufs3.0" || kind == "ufs3.1") return "2 lanes of HS-Gear4";
  if (kind == "ufs4.0") return "2 lanes of HS-Gear5";
  if (kind == "emmc") return "eMMC 5.1 HS400";
  return "PCIe 4.0 x4";
}

double StorageSpec::written_bytes(double bytes) const {
  const double page = page_size_kb * 1024.0;
  return std::ceil(bytes / page) * page;
}

// Idle-device time: commands pipeline through controller, flash and bus; the
// slowest stage paces them, the first command pays every stage once.
static double pipeline_seconds(double bytes, double ctrl, double latency_s, double bw_bps, double max_cmd,
                               int queue_depth) {
  if (bytes <= 0) return 0.0;
  const double n_cmd = std::ceil(bytes / max_cmd);
  const double cmd_bytes = bytes / n_cmd;
  const double xfer = cmd_bytes / bw_bps;
  // With queue_depth slots, a slot turns over every (ctrl + latency + xfer) at best.
  const double slot_pace = (ctrl + latency_s + xfer) / queue_depth;
  const double pace = std::max({ctrl, xfer, slot_pace});
  return ctrl + latency_s + xfer + (n_cmd - 1) * pace;
}

double StorageSpec::read_seconds(double bytes) const {
  return pipeline_seconds(bytes, read_command_seconds(), access_latency_us * 1e-6, seq_read_gbps * 1e9,
                          max_transfer_kb * 1024.0, queue_depth) +
         bytes * load_ns_per_byte * 1e-9;
}

double StorageSpec::write_seconds(double bytes) const {
  return pipeline_seconds(written_bytes(bytes), 1.0 / random_write_iops, access_latency_us * 1e-6, seq_write_gbps * 1e9,
                          max_transfer_kb * 1024.0, queue_depth);
}

double StorageSpec::sustained_read_bps(double request_bytes) const {
  const double cmd = std::min(request_bytes, max_transfer_kb * 1024.0);
  const double ctrl = read_command_seconds(), xfer = cmd / (seq_read_gbps * 1e9);
  const double slot_pace = (ctrl + access_latency_us * 1e-6 + xfer) / queue_depth;
  return cmd / std::max({ctrl, xfer, slot_pace});
}

double StorageSpec::read_bps(double request_bytes, int qd) const {
  if (request_bytes <= 0 || qd <= 0) return 0.0;
  const double max_cmd = max_transfer_kb * 1024.0;
  const double n_cmd = std::ceil(request_bytes / max_cmd);
  const double cmd = request_bytes / n_cmd;
  const double in_flight = std::min<double>(queue_depth, qd * n_cmd);
  const double ctrl = read_command_seconds(), xfer = cmd / (seq_read_gbps * 1e9);
  const double slot_pace = (ctrl + access_latency_us * 1e-6 + xfer) / in_flight;
  return cmd / std::max({ctrl, xfer, slot_pace});
}

Storage::Storage(sim::Simulator& sim, StorageSpec spec, std::string name, sim::StatGroup& stats,
                 sim::TimelineProcess* timeline)
    : sim_(sim),
      spec_(std::move(spec)),
      name_(std::move(name)),
      slots_(sim, name_ + "/slots", spec_.queue_depth),
      controller_(sim, name_ + "/controller", 1),
      bus_(sim, name_ + "/bus", 1),
      bytes_read_(stats.counter("bytes_read", "bytes", "bytes read by requests")),
      bytes_written_(stats.counter("bytes_written", "bytes", "bytes written by requests")),
      flash_bytes_written_(stats.counter("flash_bytes_written", "bytes", "bytes programmed (whole pages)")),
      commands_(stats.counter("commands", "count", "device commands issued")),
      request_ms_(stats.histogram("request_latency_ms", "ms", "latency of each read/write request")),
      timeline_(timeline),
      queue_(spec_.queue_depth) {}

double Storage::busy_seconds() const {
  return model_ == StorageCommandModel::kAnalytic ? queue_.bus_busy_ns(sim_.now()) * 1e-9 : bus_.busy_slot_seconds();
}

double Storage::io_energy_j() const {
  return 1e-9 * (spec_.read_energy_nj_per_byte * bytes_read() + spec_.write_energy_nj_per_byte * flash_bytes_written()) +
         spec_.active_power_w * busy_seconds();
}

sim::Task<void> Storage::command(double bytes, bool is_write) {
  auto slot = co_await slots_.acquire();
  {
    auto ctrl = co_await controller_.acquire();
    co_await sim_.timeout(sim::from_seconds(is_write ? 1.0 / spec_.random_write_iops : spec_.read_command_seconds()));
  }
  co_await sim_.timeout(sim::from_seconds(spec_.access_latency_us * 1e-6));
  auto bus = co_await bus_.acquire();
  const double bw = (is_write ? spec_.seq_write_gbps : spec_.seq_read_gbps) * 1e9;
  co_await sim_.timeout(sim::from_seconds(bytes / bw));
  commands_.add();
}

// Commands of one request are issued concurrently (as an io_uring batch would) and the
// request completes when the last finishes.
static sim::Task<void> run_request(sim::Simulator& sim, std::vector<sim::Task<void>> cmds) {
  std::vector<sim::Event> done;
  for (auto& c : cmds) done.push_back(sim.start(std::move(c), "storage-command").done_event());
  co_await sim::all_of(sim, done);
}

sim::Task<void> Storage::transfer(std::size_t n, double cmd_bytes, bool is_write) {
  if (model_ == StorageCommandModel::kAnalytic) {
    co_await analytic_transfer(n, cmd_bytes, is_write);
    co_return;
  }
  std::vector<sim::Task<void>> cmds;
  for (std::size_t i = 0; i < n; ++i) cmds.push_back(command(cmd_bytes, is_write));
  co_await run_request(sim_, std::move(cmds));
}

std::size_t Storage::read_commands(double bytes) const {
  return static_cast<std::size_t>(std::ceil(bytes / (spec_.max_transfer_kb * 1024.0)));
}

sim::Task<void> Storage::read(double bytes, std::string label) { return read_request(bytes, std::move(label), Load::kPerRequest); }

sim::Task<void> Storage::read_batch(std::vector<double> bytes, std::string label, Load load) {
  if (model_ == StorageCommandModel::kAnalytic) {
    co_await analytic_read_batch(std::move(bytes), std::move(label), load);
    co_return;
  }
  std::vector<sim::Event> done;
  for (double b : bytes)
    if (b > 0) done.push_back(sim_.start(read_request(b, label, load), "storage-request").done_event());
  if (!done.empty()) co_await sim::all_of(sim_, done);
}

sim::Task<void> Storage::read_request(double bytes, std::string label, Load load) {
  if (bytes <= 0) co_return;
  const sim::Time t0 = sim_.now();
  const auto n = read_commands(bytes);
  co_await transfer(n, bytes / static_cast<double>(n), false);
  if (load == Load::kPerRequest && spec_.load_ns_per_byte > 0)
    co_await sim_.timeout(sim::from_seconds(bytes * spec_.load_ns_per_byte * 1e-9));
  bytes_read_.add(bytes);
  if (keep_latencies_) request_ms_.add(sim::to_ms(sim_.now() - t0));
  if (timeline_) timeline_->span(name_, label, t0, sim_.now(), "io");
}

sim::Task<void> Storage::write(double bytes, std::string label) {
  if (bytes <= 0) co_return;
  const sim::Time t0 = sim_.now();
  const double programmed = spec_.written_bytes(bytes);
  const double max_cmd = spec_.max_transfer_kb * 1024.0;
  const auto n = static_cast<std::size_t>(std::ceil(programmed / max_cmd));
  co_await transfer(n, programmed / static_cast<double>(n), true);
  bytes_written_.add(bytes);
  flash_bytes_written_.add(programmed);
  if (keep_latencies_) request_ms_.add(sim::to_ms(sim_.now() - t0));
  if (timeline_) timeline_->span(name_, label, t0, sim_.now(), "io");
}

}  // namespace mobisim::devices
