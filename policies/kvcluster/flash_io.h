#pragma once
// Reads of KV clusters issued to the simulated flash (devices::Storage) as the
// runs of contiguous pages FlashLayout resolves them to: one storage request per
// run, all of a layer's runs in flight together, so the UFS queue depth, its
// IOPS limit (below ~24 KB, seed 003 Figure 3b) and its bandwidth decide the time.
#include <vector>

#include "devices/storage.h"
#include "policies/kvcluster/flash_layout.h"
#include "sim/simulator.h"

namespace mobisim::policies::kvcluster {

// Issues every run at once and completes when the last one has been read.
sim::Task<void> read_runs(sim::Simulator& sim, devices::Storage& storage, std::vector<ReadRun> runs);

// Time of `runs` on an otherwise idle device, simulated on a private event queue.
double simulated_read_seconds(const devices::StorageSpec& spec, const std::vector<ReadRun>& runs);

// The same time in closed form: every run is a request arriving at time 0, in order, admitted to
// the storage's own analytic queue (devices::CommandQueueModel, what Storage's default command
// model evaluates), each finishing when its last command leaves the bus (plus its load cost).
// Equal to simulated_read_seconds, to the nanosecond (tests/test_kvcluster_stream.cpp), without a
// simulator per call: the replay asks for it twice per layer and decode step.
double idle_read_seconds(const devices::StorageSpec& spec, const std::vector<ReadRun>& runs);

// Effective bandwidth (bytes of entries wanted / time): what Figure 10(c) reports.
double effective_bandwidth_bps(std::int64_t wanted_bytes, double seconds);

}  // namespace mobisim::policies::kvcluster
