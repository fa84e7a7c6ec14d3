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
//
// Commands admitted to an idle queue (every earlier command off the bus) run the same way whenever
// they arrive: the recurrence only shifts. So what they did can be recorded once (an IdleBurst,
// relative to their arrival) and replayed at a later idle instant in O(1), with the same times and
// bus busy time to the nanosecond (DynaKV's decode step admits a replayed layer's reads once per
// model layer it stands for, each time to an idle device).
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "sim/time.h"

namespace mobisim::devices {

// What some commands admitted together to an idle queue did, relative to their arrival.
struct IdleBurst {
  sim::Time ctrl_end = 0, bus_end = 0;
  std::vector<sim::Time> last_bus_ends;                   // of the last queue_depth commands, in order
  std::vector<std::pair<sim::Time, sim::Time>> transfers;  // [start, end) on the bus, back-to-back ones merged
  std::vector<sim::Time> busy_before;                     // bus time of the transfers before each
  sim::Time busy_total = 0;
  // Bus time done by `rel` ns after the arrival.
  sim::Time busy_by(sim::Time rel) const;
};

class CommandQueueModel {
 public:
  explicit CommandQueueModel(int queue_depth) : queue_depth_(static_cast<std::size_t>(queue_depth)) {}

  struct Burst {
    sim::Time last_bus_start = 0;  // when the request's last command takes the bus
    sim::Time end = 0;             // when it leaves it: the request is complete
  };
  // Admits `n` identical commands arriving at `now` (after every command admitted before).
  Burst admit(sim::Time now, std::size_t n, sim::Time ctrl_ns, sim::Time latency_ns, sim::Time xfer_ns);
  // Whether every command admitted so far is off the bus by `t` (a command arriving then waits for none).
  bool idle_at(sim::Time t) const { return bus_end_ <= t; }
  // Forgets an idle queue's past at `arrival` (idle_at(arrival) must hold), so that what is admitted
  // next can be recorded.
  void begin_idle(sim::Time arrival);
  // What was admitted since begin_idle(arrival), relative to `arrival`.
  void record_since_idle(sim::Time arrival, IdleBurst& out) const;
  // The recorded commands again, arriving at `arrival` (idle_at(arrival) must hold): their end.
  sim::Time replay(sim::Time arrival, std::shared_ptr<const IdleBurst> burst);
  // Bus busy time (ns) up to `now`, counting the parts of transfers already under way (what the
  // bus Resource's busy_slot_seconds integrates in the per-command model).
  double bus_busy_ns(sim::Time now) const;

 private:
  // Moves transfers over by `now` into finished_bus_ns_ (amortised O(1): each is moved once).
  void forget_finished(sim::Time now) const;
  // A replayed burst's last command ends, as admit() needs them when commands follow it.
  void unpack_replayed_slots();
  std::size_t queue_depth_;
  std::deque<sim::Time> recent_bus_end_;  // bus ends of the last queue_depth commands
  sim::Time ctrl_end_ = 0, bus_end_ = 0;
  // A replayed burst still on the bus (its transfers come before every pending_bus_ one), and
  // whether recent_bus_end_ still lacks its commands' ends.
  mutable std::shared_ptr<const IdleBurst> replayed_;
  mutable sim::Time replayed_at_ = 0;
  bool replayed_slots_packed_ = false;
  // Book-keeping of what the bus has done, advanced lazily by const readers.
  mutable std::int64_t finished_bus_ns_ = 0;
  mutable std::deque<std::pair<sim::Time, sim::Time>> pending_bus_;  // [start, end) of transfers not yet over
};

}  // namespace mobisim::devices
