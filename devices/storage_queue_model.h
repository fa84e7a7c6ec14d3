#pragma once
// The analytic twin of Storage's queued-command model (devices/storage.h): the same three FIFO
// stages (queue_depth command slots held until a command completes, a serial controller, the
// flash access latency, a serial bus), evaluated by recurrence instead of one process and a
// dozen events per command. Commands pass every stage in arrival order (each stage is FIFO, a
// command's slot is taken in arrival order and freed in bus order, which is arrival order), so
// the k-th command overall, arriving at a_k, runs
//   slot_k = max(a_k, bus_end_{k - queue_depth})
//   ctrl_end_k = max(slot_k, ctrl_end_{k-1}) + ctrl_k
//   bus_end_k = max(ctrl_end_k + latency, bus_end_{k-1}) + xfer_k
// in integer nanoseconds with the per-command durations the event model rounds, so concurrent
// requests contend exactly as the per-command processes would (tests/test_storage_fast_path.cpp
// compares both on random request mixes). A request of n commands costs O(n) arithmetic and
// O(1) simulator events.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>

#include "sim/time.h"

namespace mobisim::devices {

class CommandQueueModel {
 public:
  explicit CommandQueueModel(int queue_depth) : queue_depth_(static_cast<std::size_t>(queue_depth)) {}

  struct Burst {
    sim::Time last_bus_start = 0;  // when the request's last command takes the bus
    sim::Time end = 0;             // when it leaves it: the request is complete
  };
  // Admits `n` identical commands arriving at `now` (after every command admitted before).
  Burst admit(sim::Time now, std::size_t n, sim::Time ctrl_ns, sim::Time latency_ns, sim::Time xfer_ns);
  // Bus busy time (ns) up to `now`, counting the parts of transfers already under way (what the
  // bus Resource's busy_slot_seconds integrates in the per-command model).
  double bus_busy_ns(sim::Time now) const;

 private:
  // Moves transfers over by `now` into finished_bus_ns_ (amortised O(1): each is moved once).
  void forget_finished(sim::Time now) const;
  std::size_t queue_depth_;
  std::deque<sim::Time> recent_bus_end_;  // bus ends of the last queue_depth commands
  sim::Time ctrl_end_ = 0, bus_end_ = 0;
  // Book-keeping of what the bus has done, advanced lazily by const readers.
  mutable std::int64_t finished_bus_ns_ = 0;
  mutable std::deque<std::pair<sim::Time, sim::Time>> pending_bus_;  // [start, end) of transfers not yet over
};

}  // namespace mobisim::devices
