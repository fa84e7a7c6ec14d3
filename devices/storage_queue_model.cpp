#include "devices/storage_queue_model.h"

#include <algorithm>

namespace mobisim::devices {

sim::Time IdleBurst::busy_by(sim::Time rel) const {
  // Transfers run one after another: only the last one started by `rel` can be under way.
  const auto started = std::partition_point(transfers.begin(), transfers.end(),
                                            [rel](const std::pair<sim::Time, sim::Time>& t) { return t.first < rel; });
  if (started == transfers.begin()) return 0;
  const auto k = static_cast<std::size_t>(started - transfers.begin()) - 1;
  return busy_before[k] + std::min(rel, transfers[k].second) - transfers[k].first;
}

CommandQueueModel::Burst CommandQueueModel::admit(sim::Time now, std::size_t n, sim::Time ctrl_ns,
                                                  sim::Time latency_ns, sim::Time xfer_ns) {
  forget_finished(now);
  if (replayed_ && !replayed_slots_packed_) unpack_replayed_slots();
  // A slot whose command has finished is free; keep only the ends that can still delay someone.
  while (!recent_bus_end_.empty() && recent_bus_end_.front() <= now) recent_bus_end_.pop_front();
  Burst b;
  for (std::size_t i = 0; i < n; ++i) {
    sim::Time slot = now;
    if (recent_bus_end_.size() == queue_depth_) {  // every slot taken: wait for the oldest to free
      slot = std::max(now, recent_bus_end_.front());
      recent_bus_end_.pop_front();
    }
    ctrl_end_ = std::max(slot, ctrl_end_) + ctrl_ns;
    const sim::Time bus_start = std::max(ctrl_end_ + latency_ns, bus_end_);
    bus_end_ = bus_start + xfer_ns;
    recent_bus_end_.push_back(bus_end_);
    // Back-to-back transfers as one: the same busy time at every instant, fewer entries.
    if (!pending_bus_.empty() && pending_bus_.back().second == bus_start)
      pending_bus_.back().second = bus_end_;
    else
      pending_bus_.emplace_back(bus_start, bus_end_);
    b.last_bus_start = bus_start;
  }
  b.end = bus_end_;
  return b;
}

void CommandQueueModel::begin_idle(sim::Time arrival) {
  forget_finished(arrival);  // everything (a replayed burst too) is over by an idle instant
  recent_bus_end_.clear();
}

void CommandQueueModel::record_since_idle(sim::Time arrival, IdleBurst& out) const {
  out.ctrl_end = ctrl_end_ - arrival;
  out.bus_end = bus_end_ - arrival;
  out.last_bus_ends.clear();
  for (sim::Time e : recent_bus_end_) out.last_bus_ends.push_back(e - arrival);
  out.transfers.clear();
  out.busy_before.clear();
  out.busy_total = 0;
  for (const auto& [start, end] : pending_bus_) {
    out.transfers.emplace_back(start - arrival, end - arrival);
    out.busy_before.push_back(out.busy_total);
    out.busy_total += end - start;
  }
}

sim::Time CommandQueueModel::replay(sim::Time arrival, std::shared_ptr<const IdleBurst> burst) {
  begin_idle(arrival);
  ctrl_end_ = arrival + burst->ctrl_end;
  bus_end_ = arrival + burst->bus_end;
  replayed_ = std::move(burst);
  replayed_at_ = arrival;
  replayed_slots_packed_ = false;
  return bus_end_;
}

void CommandQueueModel::unpack_replayed_slots() {
  recent_bus_end_.clear();
  for (sim::Time e : replayed_->last_bus_ends) recent_bus_end_.push_back(replayed_at_ + e);
  replayed_slots_packed_ = true;
}

void CommandQueueModel::forget_finished(sim::Time now) const {
  if (replayed_) {
    if (replayed_at_ + replayed_->bus_end > now) return;  // every pending transfer comes after it
    finished_bus_ns_ += replayed_->busy_total;
    replayed_.reset();
  }
  while (!pending_bus_.empty() && pending_bus_.front().second <= now) {
    finished_bus_ns_ += pending_bus_.front().second - pending_bus_.front().first;
    pending_bus_.pop_front();
  }
}

double CommandQueueModel::bus_busy_ns(sim::Time now) const {
  forget_finished(now);
  std::int64_t ns = finished_bus_ns_;
  // Transfers run one after another: only the first pending one can be under way.
  if (replayed_)
    ns += replayed_->busy_by(now - replayed_at_);
  else if (!pending_bus_.empty() && pending_bus_.front().first < now)
    ns += now - pending_bus_.front().first;
  return static_cast<double>(ns);
}

}  // namespace mobisim::devices
