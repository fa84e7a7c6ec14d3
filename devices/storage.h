#pragma once
// Flash storage (UFS 2.1/3.1/4.0, NVMe) as a queued device.
//
// A request is split into commands of at most `max_transfer_kb`. Each command
//   1. takes one of `queue_depth` command slots (held until it completes),
//   2. passes the controller, which issues at most `random_read_iops` commands
//      per second (serial: 1/iops each),
//   3. waits the flash access latency `access_latency_us` (overlaps across slots),
//   4. moves its bytes over the shared interface at the sequential bandwidth.
// Sustained throughput at request size s is therefore about
// min(iops * s, seq_bandwidth): IOPS-bound below s = bandwidth / iops (about
// 24 KB for UFS 4.0, as DynaKV measures) and bandwidth-bound above. Concurrent
// requests share the device through the same queue.
//
// A read may also pay `load_ns_per_byte` after its I/O: what the runtime spends turning the bytes
// into tensors (deserialisation, conversion, copies into its buffers). It is a property of the
// software stack on this phone, 0 (none) unless a profile sets it.
// A read command may also cost the host `read_command_overhead_us` on the serial submission path,
// beside the controller (a command holds it for 1/iops + the overhead): what the runtime's loader
// spends per read (system call or io_uring round trip, file-system lookup, waiting on it before
// the next). Like load_ns_per_byte it belongs to the software stack, 0 unless a profile or an
// engine (devices/engine.h `storage:`) sets it; with it the sustained command rate of one stream
// is 1 / (1/iops + overhead) however deep the queue.
// The curve as a function of request size AND queue depth (read_bps): with `qd` requests kept
// outstanding, a command slot turns over every (1/iops + latency + transfer), so shallow queues are
// latency-bound (QD1 4 KB: ~1 / (latency + 1/iops)), deep ones IOPS- or bandwidth-bound. Storage-class
// profiles (configs/storage/ufs2.1|ufs3.1|ufs4.0.yaml, public vendor figures: sequential read at QD32,
// 4 KB random read IOPS at QD32, lanes x lane rate) reproduce the public sequential and 4 KB random
// figures at QD32; a device profile may name one as `storage: ufs4.0`. `lanes` x `lane_gbps` is the
// interface ceiling (UFS 4.0: 2 lanes of HS-G5 23.2 Gb/s = 5.8 GB/s; UFS 3.1: 2 x 11.6 Gb/s);
// a sequential bandwidth above it is refused.
//
// Writes are rounded up to whole pages (a partial-page write programs the whole
// page: write amplification) and move at the sequential write bandwidth.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "devices/storage_queue_model.h"
#include "sim/params.h"
#include "sim/resource.h"
#include "sim/simulator.h"
#include "sim/stats.h"
#include "sim/timeline.h"

namespace mobisim::devices {

struct StorageSpec {
  std::string kind;                 // "ufs2.1", "ufs3.1", "ufs4.0", "nvme"
  double seq_read_gbps = 0;
  double seq_write_gbps = 0;
  double random_read_iops = 0;      // 4 KB random reads at full queue depth
  double random_write_iops = 0;
  int queue_depth = 32;
  double access_latency_us = 0;
  double max_transfer_kb = 512;
  double page_size_kb = 4;
  double active_power_w = 0;            // while the interface is busy
  double idle_power_w = 0;
  double read_energy_nj_per_byte = 0;   // energy per byte read (in addition to the powers above)
  double write_energy_nj_per_byte = 0;  // energy per byte programmed (whole pages)
  double capacity_gb = 0;
  double load_ns_per_byte = 0;          // runtime cost per byte read, after the I/O (0: none)
  double read_command_overhead_us = 0;  // host time per read command, serial with the controller (0: none)
  int lanes = 1;                    // interface lanes (UFS: 2)
  double lane_gbps = 0;             // per-lane payload rate in GB/s (0: not given, no ceiling check)

  static ParamSchema schema();
  static StorageSpec from_params(const Params& p);

  // Bytes programmed for a write of `bytes` (rounded up to whole pages).
  double written_bytes(double bytes) const;
  // Analytic time of one request of `bytes` on an idle device (no queueing with other requests),
  // including the runtime's load cost per byte.
  double read_seconds(double bytes) const;
  double write_seconds(double bytes) const;
  // Sustained read throughput (bytes/s) with the queue kept full of requests of `request_bytes`.
  double sustained_read_bps(double request_bytes) const;
  // Sustained read throughput (bytes/s) with `queue_depth` requests of `request_bytes` kept outstanding
  // (each split into commands of at most max_transfer_kb; at most this->queue_depth commands in flight).
  double read_bps(double request_bytes, int queue_depth) const;
  double interface_gbps() const { return lane_gbps > 0 ? lanes * lane_gbps : 0.0; }
  // The most any device of a storage standard (`kind`) can move, in GB/s, and the link behind it.
  static double standard_max_gbps(const std::string& kind);
  static std::string standard_link(const std::string& kind);
  // Serial submission-path time of one read command: the controller's 1/iops plus the host's overhead.
  double read_command_seconds() const { return 1.0 / random_read_iops + read_command_overhead_us * 1e-6; }
};

// The simulated device instance: processes `co_await storage.read(bytes)`.
//
// Two evaluations of the same queued-command model: kPerCommand runs one process per command
// through slot/controller/bus Resources; kAnalytic (the default) computes every command's passage
// by recurrence (devices/storage_queue_model.h) and costs O(1) events per request. Both give the
// same times, statistics and energy, to the nanosecond, for any mix of concurrent requests.
enum class StorageCommandModel { kAnalytic, kPerCommand };

class Storage {
 public:
  Storage(sim::Simulator& sim, StorageSpec spec, std::string name, sim::StatGroup& stats,
          sim::TimelineProcess* timeline = nullptr);
  sim::Task<void> read(double bytes, std::string label = "read");
  // Whether a read pays the profile's load_ns_per_byte itself (after its own I/O), or the caller
  // pays it some other way (DynaKV's single loading thread: serially, after a layer's reads).
  enum class Load { kPerRequest, kByCaller };
  // Reads of `bytes[i]` each, all issued now, in order (an io_uring batch), complete when the last
  // one is: what starting one read() per request at this instant and joining them gives, to the
  // nanosecond (times, statistics, energy), with O(1) simulator events in the analytic model.
  // Requests of 0 bytes are skipped.
  sim::Task<void> read_batch(std::vector<double> bytes, std::string label = "read", Load load = Load::kPerRequest);
  sim::Task<void> write(double bytes, std::string label = "write");
  // Without a process: a caller that runs one flash branch at a time beside its own work (DynaKV's
  // decode steps) admits the branch's requests itself and gets back when they complete, then waits
  // until then (one timeout instead of a started process and its done event). A request admitted
  // `at` (now or later, after every request admitted before) takes what read_batch / write issued
  // at that instant would take, with the same statistics and energy, provided nothing reads the
  // counters before it ends (they are added on admission). Analytic command model, no timeline and
  // no kept latencies only (Error otherwise): spans and latency samples need a process.
  sim::Time admit_reads(sim::Time at, std::span<const std::int64_t> bytes, Load load);
  sim::Time admit_read(sim::Time at, double bytes, Load load = Load::kPerRequest);
  sim::Time admit_write(sim::Time at, double bytes);
  // The same requests admitted again and again, each time to an idle storage (DynaKV's decode step
  // admits a replayed layer's flash work once per model layer it stands for, every branch after the
  // one before has ended): requests arriving at an idle device take the same time whenever they
  // arrive, so the first admission records what they did (CommandQueueModel's IdleBurst) and the
  // next ones replay it in O(1), with the same completion, counters, busy time and energy. The caller
  // keeps one Repeated per request set and passes it with the same requests until it calls reset()
  // (new requests); a storage that is not idle at `at` admits the requests one by one, as without it.
  class Repeated {
   public:
    void reset() { recorded_ = false; }

   private:
    friend class Storage;
    const Storage* owner_ = nullptr;
    bool recorded_ = false;
    std::shared_ptr<IdleBurst> burst_;
    sim::Time duration_ = 0;  // arrival to completion (with any load after the I/O)
    double commands_ = 0, bytes_read_ = 0, bytes_written_ = 0, flash_bytes_written_ = 0;
  };
  sim::Time admit_reads(sim::Time at, std::span<const std::int64_t> bytes, Load load, Repeated& same);
  sim::Time admit_read(sim::Time at, double bytes, Load load, Repeated& same);
  sim::Time admit_write(sim::Time at, double bytes, Repeated& same);
  const StorageSpec& spec() const { return spec_; }
  double busy_seconds() const;
  void set_command_model(StorageCommandModel m) { model_ = m; }
  // Whether every request's latency is kept (the request_latency_ms histogram, every sample written
  // with the results; the default). A run of millions of requests whose latencies nobody reads
  // (DynaKV's decode steps: every layer's reads of every step) turns it off: the histogram stays empty.
  void keep_request_latencies(bool keep) { keep_latencies_ = keep; }
  double bytes_read() const { return bytes_read_.value(); }
  double bytes_written() const { return bytes_written_.value(); }
  double flash_bytes_written() const { return flash_bytes_written_.value(); }
  // Energy of the I/O done so far: per-byte read/program energy plus active power while busy.
  double io_energy_j() const;

 private:
  sim::Task<void> command(double bytes, bool is_write);
  sim::Task<void> read_request(double bytes, std::string label, Load load);
  // The analytic path of read_batch: every request admitted now, one wait for the last.
  sim::Task<void> analytic_read_batch(std::vector<double> bytes, std::string label, Load load);
  // admit_reads / admit_write may run here (the analytic model, nothing per request kept).
  void require_admission(const char* what, sim::Time at) const;
  // A read's per-command costs, rounded to nanoseconds as Storage::read rounds them, worked out once
  // per batch (a DynaKV step admits thousands of runs).
  struct ReadCosts {
    sim::Time ctrl = 0, latency = 0;
    double bw_bps = 0, max_cmd_bytes = 0, load_ns_per_byte = 0;  // load 0: the caller pays it
  };
  ReadCosts read_costs(bool load) const;
  // Admits one read of `bytes` at `at` to the analytic queue: its completion (with its load if any).
  // Adds its commands to `commands` (the caller counts them).
  sim::Time admit_one_read(sim::Time at, double bytes, const ReadCosts& c, double& commands);
  // What admit_reads / admit_read / admit_write add to the counters (whole numbers of commands and,
  // for runs, bytes: their sums are exact in any grouping).
  struct Admitted {
    sim::Time end = 0;
    double commands = 0, bytes_read = 0, bytes_written = 0, flash_bytes_written = 0;
  };
  Admitted admitted_reads(sim::Time at, std::span<const std::int64_t> bytes, Load load);
  Admitted admitted_read(sim::Time at, double bytes, Load load);
  Admitted admitted_write(sim::Time at, double bytes);
  sim::Time count(const Admitted& a);
  // Replays `same` at `at` if it holds a recording and the storage is idle, else admits the requests
  // (`admit(at)` gives what they add) and, on an idle storage, records them into `same`.
  template <class Admit>
  sim::Time admit_repeated(sim::Time at, Repeated& same, Admit admit);
  // Commands of a request of `bytes` (at most max_transfer_kb each).
  std::size_t read_commands(double bytes) const;
  // Moves `n` commands of `cmd_bytes` each through the device (either model).
  sim::Task<void> transfer(std::size_t n, double cmd_bytes, bool is_write);
  sim::Task<void> analytic_transfer(std::size_t n, double cmd_bytes, bool is_write);
  sim::Simulator& sim_;
  StorageSpec spec_;
  std::string name_;
  sim::Resource slots_, controller_, bus_;
  sim::Counter &bytes_read_, &bytes_written_, &flash_bytes_written_, &commands_;
  sim::Histogram& request_ms_;
  sim::TimelineProcess* timeline_;
  StorageCommandModel model_ = StorageCommandModel::kAnalytic;
  bool keep_latencies_ = true;
  CommandQueueModel queue_;
};

}  // namespace mobisim::devices
