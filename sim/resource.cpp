#include "sim/resource.h"

#include <algorithm>

namespace mobisim::sim {

Lease& Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    release();
    res_ = std::exchange(o.res_, nullptr);
    id_ = o.id_;
    alive_ = std::move(o.alive_);
  }
  return *this;
}

void Lease::release() {
  if (res_ && !alive_.expired()) res_->release(id_);
  res_ = nullptr;
}

bool Lease::held() const {
  if (!res_ || alive_.expired()) return false;
  for (const auto& h : res_->holders_)
    if (h.id == id_) return true;
  return false;
}

Resource::Resource(Simulator& sim, std::string name, int capacity)
    : sim_(sim), name_(std::move(name)), capacity_(capacity), last_change_(sim.now()) {}

void Resource::account() {
  busy_area_ns_ += static_cast<double>(sim_.now() - last_change_) * static_cast<double>(holders_.size());
  last_change_ = sim_.now();
}

double Resource::busy_slot_seconds() const {
  const double area = busy_area_ns_ + static_cast<double>(sim_.now() - last_change_) * holders_.size();
  return area * 1e-9;
}

std::uint64_t Resource::grant(int priority, bool preemptible, bool yields, ProcessState* p) {
  account();
  const std::uint64_t id = next_id_++;
  holders_.push_back({id, priority, preemptible, yields, false, p});
  return id;
}

bool Resource::try_preempt(int priority) {
  // The victim: the preemptible holder with the worst priority, latest-acquired among equals.
  auto victim = holders_.end();
  for (auto it = holders_.begin(); it != holders_.end(); ++it) {
    if (!it->preemptible || it->priority <= priority) continue;
    if (victim == holders_.end() || it->priority >= victim->priority) victim = it;
  }
  if (victim == holders_.end()) return false;
  account();
  ProcessState* p = victim->process;
  holders_.erase(victim);
  ++preemptions_;
  sim_.interrupt(p, "preempted from " + name_);
  return true;
}

bool Resource::AcquireAwaiter::await_ready() {
  Resource& r = *res;
  const bool free_slot = r.in_use() < r.capacity_ && r.waiters_.empty();
  if (free_slot || (preempt && r.in_use() >= r.capacity_ && r.try_preempt(priority))) {
    granted = r.grant(priority, preemptible, yields, r.sim_.current_process());
    return true;
  }
  return false;
}

void Resource::AcquireAwaiter::await_suspend(std::coroutine_handle<> h) {
  Resource& r = *res;
  Waiter w{priority, r.next_seq_++, preemptible, yields, h, r.sim_.current_process(), &granted};
  auto pos = std::upper_bound(r.waiters_.begin(), r.waiters_.end(), w, [](const Waiter& a, const Waiter& b) {
    return a.priority != b.priority ? a.priority < b.priority : a.seq < b.seq;
  });
  r.waiters_.insert(pos, w);
  r.ask_to_yield(priority);
}

void Resource::ask_to_yield(int priority) {
  for (Holder& h : holders_) {
    // Only a holder asleep in its work: one granted but not yet resumed looks for better waiters
    // itself before it starts (an interrupt it has not started sleeping for would hit a later timeout).
    if (!h.yields || h.asked_to_yield || h.priority <= priority || !h.process || !h.process->sleeping_on.valid())
      continue;
    h.asked_to_yield = true;
    ++yield_requests_;
    sim_.interrupt(h.process, std::string(kYieldRequest));
  }
}

Lease Resource::AcquireAwaiter::await_resume() { return Lease(res, granted, res->alive_); }

void Resource::release(std::uint64_t id) {
  auto it = std::find_if(holders_.begin(), holders_.end(), [&](const Holder& h) { return h.id == id; });
  if (it == holders_.end()) return;  // already lost to preemption
  account();
  holders_.erase(it);
  while (!waiters_.empty() && in_use() < capacity_) {
    Waiter w = waiters_.front();
    waiters_.pop_front();
    *w.grant_slot = grant(w.priority, w.preemptible, w.yields, w.process);
    sim_.schedule_resume_for(w.process, sim_.now(), w.handle);
  }
}

bool Resource::has_waiter_better_than(int priority) const {
  return !waiters_.empty() && waiters_.front().priority < priority;
}

}  // namespace mobisim::sim
