#pragma once
// The phone's DRAM ledger of one DynaKV run (issue 34): what seed 003's pipeline keeps in DRAM
// while a session decodes, held in a devices::Dram (the same ledger a Device keeps) on the run's
// phone, at simulated time. The driver runs each decode step as events on the run's Device
// (experiments/dynakv_step_events.h), and the ledger holds its bytes in that Device's DRAM: a step
// holds them from its start for as long as its events take, and the ledger's time-weighted mean is
// over the session's decode time. Standalone (its own simulator and Dram), the clock is advanced
// by hand instead: each hold_for holds a step's bytes for a given latency.
//
// What is held (bytes of the whole model, the replayed layers scaled to the model's):
//   weights                the model's weights at the run's precision, for the whole run;
//   kv/dram_cache          the DRAM cluster cache of the running layer and of the one being
//                          prefetched (section 6.1's layer-wise virtualization: the cached clusters
//                          of the other layers wait on flash), as the cache fills and evicts;
//   kv/representatives     the running and the prefetched layer's cluster representatives (one key
//                          each: centroids for DynaKV, PQCache and ClusterKV, every key for
//                          no_cluster), loaded beside the Q projection;
//   kv/retrieved           the running layer's K/V read for its attention (pages read from flash,
//                          forced split loads and cache hits);
//   kv/dram_only           K/V that is on no flash page and stays in DRAM for every layer: DynaKV's
//                          split buffers Buf_j, ClusterKV's not-yet-clustered local window, and
//                          the entries in the flash layout's page buffers (written once a page fills).
// Each is an integer byte count per step; only the owners whose bytes changed touch the ledger.
// Anything that does not fit the usable DRAM (capacity_gb - reserved_gb) throws
// devices::DramOverflow naming DRAM, the owner and the sizes. The cache's own budget is cache_ratio x
// the session's KV, which its replacement policy keeps it to, give or take the clusters it keeps
// while they grow (ClusterCache: an append to a cached cluster, a hit on a grown one); the ledger
// holds what the cache holds, never a clamped figure.
#include <cstdint>
#include <memory>
#include <string>

#include "devices/device.h"
#include "devices/dram.h"
#include "sim/simulator.h"
#include "sim/stats.h"
#include "sim/time.h"

namespace mobisim::experiments {

// What one decode step holds in DRAM beside the weights, in bytes.
struct DynaKvDramUse {
  std::int64_t cache = 0;
  std::int64_t representatives = 0;
  std::int64_t retrieved = 0;
  std::int64_t dram_only = 0;
  std::int64_t total() const { return cache + representatives + retrieved + dram_only; }
};

class DynaKvDramLedger {
 public:
  // In a Device's DRAM (Device::dram()), on that Device's clock: reserves the weights now
  // (DramOverflow when they do not fit). The statistic is the Device's dram/used_bytes.
  explicit DynaKvDramLedger(devices::Dram& dram, std::int64_t weight_bytes);
  // Standalone, on a clock of its own: reserves the weights at time 0. The ledger's statistic is
  // `device_stats`/dram/used_bytes (max: peak, mean: time-weighted), as a Device writes it.
  DynaKvDramLedger(const devices::DeviceProfile& device, std::int64_t weight_bytes, sim::StatGroup& device_stats);
  ~DynaKvDramLedger();
  DynaKvDramLedger(const DynaKvDramLedger&) = delete;
  DynaKvDramLedger& operator=(const DynaKvDramLedger&) = delete;

  // Holds `use` (beside the weights) from now on.
  void hold(const DynaKvDramUse& use);
  // Standalone only: holds `use` from now for `duration_ns` of the ledger's own simulated time.
  void hold_for(const DynaKvDramUse& use, sim::Time duration_ns);
  // Gives everything back (the ledger ends empty); standalone, also closes the statistic at the current time.
  void finish();

  double used_bytes() const { return dram_->used_bytes(); }
  double peak_bytes() const { return dram_->peak_bytes(); }
  double mean_bytes() const { return dram_->mean_used_bytes(); }
  sim::Time now() const;

 private:
  void set(const std::string& owner, std::int64_t& held, std::int64_t bytes);
  // The owners' names, made once (a step passes them by reference: no string per step).
  const std::string weights_owner_{"weights"}, cache_owner_{"kv/dram_cache"},
      representatives_owner_{"kv/representatives"}, retrieved_owner_{"kv/retrieved"}, dram_only_owner_{"kv/dram_only"};
  // Standalone: the ledger's own clock and DRAM (the simulator declared first: destroyed last, it
  // closes the statistic).
  std::unique_ptr<sim::Simulator> own_sim_;
  std::unique_ptr<devices::Dram> own_dram_;
  devices::Dram* dram_;
  std::int64_t weights_ = 0;
  DynaKvDramUse held_;
};

}  // namespace mobisim::experiments
