#include "sim/shared_bandwidth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/error.h"

namespace mobisim::sim {

SharedBandwidth::SharedBandwidth(Simulator& sim, std::string name, double capacity_per_s)
    : sim_(sim), name_(std::move(name)), capacity_(capacity_per_s) {
  if (!(capacity_per_s > 0) || !std::isfinite(capacity_per_s))
    throw Error(fmt::format("internal: shared bandwidth '{}' needs a positive finite capacity, got {}", name_,
                            capacity_per_s));
}

SharedBandwidth::FlowAwaiter SharedBandwidth::flow(double amount, Time uncontended, int clock,
                                                   double* remaining_on_interrupt) {
  if (!(amount >= 0) || uncontended < 0)
    throw Error(fmt::format("internal: flow of {} over {} ns on '{}'", amount, uncontended, name_));
  if (clock >= static_cast<int>(clocks_.size()))
    throw Error(fmt::format("internal: flow on unknown clock {} of '{}'", clock, name_));
  return FlowAwaiter(*this, amount, uncontended, clock, remaining_on_interrupt);
}

int SharedBandwidth::add_clock() {
  clocks_.push_back(1.0);
  return static_cast<int>(clocks_.size() - 1);
}

void SharedBandwidth::set_clock_speed(int clock, double speed) {
  if (!(speed > 0) || clock < 0 || clock >= static_cast<int>(clocks_.size()))
    throw Error(fmt::format("internal: clock {} of '{}' set to speed {}", clock, name_, speed));
  if (clocks_[static_cast<std::size_t>(clock)] == speed) return;
  advance_to_now();
  clocks_[static_cast<std::size_t>(clock)] = speed;
  replan();
}

void SharedBandwidth::FlowAwaiter::await_suspend(std::coroutine_handle<> h) {
  proc_ = bus_.sim_.current_process();
  id_ = bus_.next_id_++;
  // A flow that moves nothing (or in no time) wants no rate: it never slows another.
  const bool moves = amount_ > 0 && uncontended_ > 0;
  bus_.add(Flow{id_, moves ? amount_ / sim::to_seconds(uncontended_) : 0.0, static_cast<double>(uncontended_), 1.0,
                bus_.sim_.now(), bus_.sim_.now(), uncontended_, h, proc_, EventId{}, clock_});
}

void SharedBandwidth::FlowAwaiter::await_resume() {
  if (proc_) {
    proc_->sleeping_on = EventId{};
    proc_->sleeping_handle = {};
  }
  if (proc_ && proc_->interrupt_cause) {
    const double remaining = bus_.remove(id_);
    if (remaining_out_) *remaining_out_ = remaining;
    std::string cause = std::move(*proc_->interrupt_cause);
    proc_->interrupt_cause.reset();
    throw Interrupt(std::move(cause));
  }
  bus_.complete(id_);
}

void SharedBandwidth::add(Flow flow) {
  advance_to_now();
  flows_.push_back(flow);
  replan();
}

double SharedBandwidth::remove(std::uint64_t id) {
  advance_to_now();
  auto it = std::find_if(flows_.begin(), flows_.end(), [&](const Flow& f) { return f.id == id; });
  if (it == flows_.end()) return 0.0;
  const double remaining = it->remaining_ns;
  sim_.cancel(it->completion);
  flows_.erase(it);
  replan();
  return remaining;
}

void SharedBandwidth::complete(std::uint64_t id) {
  auto it = std::find_if(flows_.begin(), flows_.end(), [&](const Flow& f) { return f.id == id; });
  if (it == flows_.end()) return;
  delay_s_ += to_seconds(std::max<Time>(0, sim_.now() - it->started - it->uncontended));
  advance_to_now();
  flows_.erase(it);
  replan();
}

void SharedBandwidth::advance_to_now() {
  const Time now = sim_.now();
  for (Flow& f : flows_) {
    if (now > f.since) f.remaining_ns = std::max(0.0, f.remaining_ns - static_cast<double>(now - f.since) * f.speed);
    f.since = now;
  }
}

void SharedBandwidth::max_min_speeds(std::vector<double>& speed) {
  // A flow's share of what it wants, then times its clock: its progress per ns.
  speed.assign(flows_.size(), 1.0);
  double wanted = 0;
  for (const Flow& f : flows_) wanted += f.wanted_rate * clock_speed(f.clock);
  if (wanted <= capacity_) {  // room for everyone: the common case, no sorting
    if (!clocks_.empty())
      for (std::size_t i = 0; i < flows_.size(); ++i) speed[i] = clock_speed(flows_[i].clock);
    return;
  }
  wanted_.resize(flows_.size());
  for (std::size_t i = 0; i < flows_.size(); ++i) wanted_[i] = flows_[i].wanted_rate * clock_speed(flows_[i].clock);
  // Water-filling in order of wanted rate (ties in start order): each flow gets what it wants or an
  // equal share of what the cheaper flows left, whichever is less.
  order_.resize(flows_.size());
  std::iota(order_.begin(), order_.end(), 0);
  std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) { return wanted_[a] < wanted_[b]; });
  double left = capacity_;
  std::size_t flows_left = 0;
  for (double w : wanted_) flows_left += w > 0 ? 1 : 0;
  for (std::size_t i : order_) {
    const double w = wanted_[i];
    if (w <= 0) {
      speed[i] = clock_speed(flows_[i].clock);
      continue;
    }
    const double share = left / static_cast<double>(flows_left);
    const double given = std::min(w, share);
    speed[i] = given / w * clock_speed(flows_[i].clock);
    left -= given;
    --flows_left;
  }
}

void SharedBandwidth::replan() {
  std::vector<double>& speed = speeds_;
  max_min_speeds(speed);
  for (std::size_t i = 0; i < flows_.size(); ++i) {
    Flow& f = flows_[i];
    const Time at = f.since + static_cast<Time>(std::llround(f.remaining_ns / speed[i]));
    const bool unchanged = f.completion.valid() && speed[i] == f.speed;
    f.speed = speed[i];
    if (unchanged) continue;  // its planned end still holds: keep the event (and its order)
    if (f.completion.valid()) sim_.cancel(f.completion);
    f.completion = f.process ? sim_.schedule_resume_for(f.process, at, f.handle) : sim_.schedule_resume(at, f.handle);
    if (f.process) {
      f.process->sleeping_on = f.completion;
      f.process->sleeping_handle = f.handle;
    }
  }
}

}  // namespace mobisim::sim
