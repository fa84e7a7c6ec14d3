#pragma once
// The phone's main memory inside one simulation: a capacity ledger and a shared bus.
//
// Capacity. What the workload may hold is the profile's usable DRAM (capacity_gb - reserved_gb).
// Every component that keeps bytes in DRAM holds them under an owner name ("app/weights",
// "app/kv", "app/qa_bank", "app/npu_graphs", ...):
//   dram.reserve("assistant/weights", bytes);   // must fit: throws DramOverflow otherwise
//   if (!dram.try_allocate("assistant/kv_cache", bytes)) { evict by the cache's own policy }
//   dram.release("assistant/kv_cache", bytes);
// Weights, drafters and graph buffers are reserved (a run cannot go on without them); caches
// try and evict. Peak and time-weighted use are statistics of the run (dram/used_bytes: its
// max and time-weighted mean); each owner's peak is kept too (owner_peaks()).
//
// Bandwidth. CPU clusters, the GPU and the NPU of a phone stream from the same LPDDR channels:
// work on any of them that moves bytes is a flow on one sim::SharedBandwidth of the profile's
// bandwidth_gbps (see Device::compute). Alone, a unit runs at its own roofline; two
// bandwidth-bound units together take the sum of their bytes over the shared bandwidth.
// A unit with `dedicated_memory` (a discrete GPU's GDDR/HBM) does not use this bus.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sim/error.h"
#include "sim/shared_bandwidth.h"
#include "sim/simulator.h"
#include "sim/stats.h"

namespace mobisim::devices {

struct DramSpec {
  double capacity_gb = 0;
  double bandwidth_gbps = 0;
  double reserved_gb = 0;  // OS and other apps: not available to the simulated workload
  double available_bytes() const { return (capacity_gb - reserved_gb) * 1e9; }
};

// A reservation that does not fit: the run cannot go on. Exit code 1 (the simulated phone ran out
// of a resource, not a malformed config).
class DramOverflow : public Error {
 public:
  explicit DramOverflow(const std::string& what) : Error(what, kExitFailure) {}
};

class Dram {
 public:
  Dram(sim::Simulator& sim, const DramSpec& spec, const std::string& device_name, sim::StatGroup& stats);

  // Holds `bytes` for `owner` or throws DramOverflow naming DRAM, the owner, the bytes asked for,
  // what is free and who holds the rest.
  void reserve(const std::string& owner, double bytes);
  // Before any simulation: throws the DramOverflow that reserve() would for `bytes` held at once
  // by the owners named (e.g. a model's weights), so a run that cannot fit fails before it starts.
  static void check_fits(const DramSpec& spec, const std::string& device_name,
                         const std::vector<std::pair<std::string, double>>& holdings);
  // Holds `bytes` for `owner` when they fit; false (and nothing held) when they do not.
  bool try_allocate(const std::string& owner, double bytes);
  // Gives back up to what `owner` holds.
  void release(const std::string& owner, double bytes);

  double capacity_bytes() const { return capacity_; }
  double used_bytes() const { return used_; }
  double free_bytes() const { return capacity_ - used_; }
  double peak_bytes() const;
  double mean_used_bytes() const;  // time-weighted, since the start of the simulation
  double held_by(const std::string& owner) const;
  // The most each owner held at once, by owner name.
  std::map<std::string, double> owner_peaks() const;
  // The most each group of owners held at once: owners are grouped by their name's part before
  // the first '/' ("assistant/weights" and "assistant/kv" are the group "assistant": one app).
  std::map<std::string, double> group_peaks() const;

  sim::SharedBandwidth& bus() { return bus_; }

 private:
  struct Owner {
    double bytes = 0, peak = 0;
  };
  void hold(const std::string& name, double bytes);
  std::string holders() const;
  static std::string overflow_message(const std::string& device_name, const std::string& owner, double bytes,
                                      double free, double capacity, const std::string& holders);

  std::string device_name_;
  double capacity_;
  double used_ = 0;
  sim::TimeWeighted* use_;
  std::map<std::string, Owner> owners_;
  std::map<std::string, Owner> groups_;
  sim::SharedBandwidth bus_;
};

}  // namespace mobisim::devices
