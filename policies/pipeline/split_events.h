#pragma once
// The load-or-recompute stage's event path: a split of the reused prefix [0, s) issued on the
// phone's queues, so it waits for the unit, the flash (or a link) and the DRAM bus like any other
// work on the phone.
//
//   one split point l     (always_load, always_recompute, kvpr_*): the layer inputs of [0, l)
//                         cross the link first (K/V from hidden states only), then the unit
//                         rebuilds [0, l) (with Q of all s positions first, in the Q-aware form)
//                         while [l, s) is read.
//   Cake's blocks         the unit takes blocks from the front, the reader from the back, each its
//                         next block when it is free, until they meet: decided while the streams
//                         run, so under contention the meeting point moves (what Cake is for).
//
// Every piece lasts what the split costs (kvsplit::SplitCosts) say it lasts alone, rounded to the
// nanosecond the way the strategies' own plans round it: with nothing else on the phone the events
// take exactly the plan's time (Pipeline's split_estimate_s).
#include <cstdint>
#include <string>
#include <vector>

#include "devices/device.h"
#include "models/cost_model.h"
#include "policies/kvsplit/kv_split.h"
#include "policies/kvsplit/split_costs.h"
#include "sim/simulator.h"

namespace mobisim::policies::pipeline {

// Where the split runs and what its pieces cost.
struct SplitStreams {
  devices::Device& device;
  const models::CostModel& cost;      // the work behind a rebuild (its FLOPs and DRAM bytes)
  const kvsplit::SplitCosts& costs;   // how long each piece takes alone
  kvsplit::DeviceCostOptions options;  // unit, link (empty: flash), recompute kind, payload
  int priority = 0;                    // on the unit's queue
  bool with_q = false;                 // Q of all s positions is computed too (Q-aware form)
};

// What the split did: the rebuilt positions and each stream's busy time, every piece as the split
// costs charge it alone (the plan's busy times; waits and a crowded bus are in the split's duration).
struct SplitTally {
  std::int64_t recomputed_tokens = 0;
  sim::Time compute_busy = 0, copy_busy = 0;
  double active_energy_j = 0;  // the unit's marginal energy for the rebuilds
};

// One split point: [0, l) rebuilt, [l, s) read; of those, the `from_dram` leading ones are
// copied from DRAM (an idle stage put them there).
sim::Task<void> issue_split(const SplitStreams& st, std::int64_t s, std::int64_t l, std::int64_t from_dram,
                            SplitTally& out);

// Cake's two-pointer schedule over blocks of `opt.block_tokens` (seed 002 Algorithm 1). When
// both streams become free at once, the unit claims first (as in kvsplit::simulate_cake).
sim::Task<void> issue_blocks(const SplitStreams& st, std::int64_t s, const kvsplit::CakeOptions& opt, SplitTally& out);

}  // namespace mobisim::policies::pipeline
