#include "devices/storage_queue_model.h"

#include <algorithm>

namespace mobisim::devices {

CommandQueueModel::Burst CommandQueueModel::admit(sim::Time now, std::size_t n, sim::Time ctrl_ns,
                                                  sim::Time latency_ns, sim::Time xfer_ns) {
  forget_finished(now);
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
    pending_bus_.emplace_back(bus_start, bus_end_);
    b.last_bus_start = bus_start;
  }
  b.end = bus_end_;
  return b;
}

void CommandQueueModel::forget_finished(sim::Time now) const {
  while (!pending_bus_.empty() && pending_bus_.front().second <= now) {
    finished_bus_ns_ += pending_bus_.front().second - pending_bus_.front().first;
    pending_bus_.pop_front();
  }
}

double CommandQueueModel::bus_busy_ns(sim::Time now) const {
  forget_finished(now);
  // Transfers run one after another: only the first pending one can be under way.
  std::int64_t ns = finished_bus_ns_;
  if (!pending_bus_.empty() && pending_bus_.front().first < now) ns += now - pending_bus_.front().first;
  return static_cast<double>(ns);
}

}  // namespace mobisim::devices
