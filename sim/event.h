#pragma once
// A one-shot event that processes can wait on (`co_await ev`), triggered once
// with `succeed(value)`. Waiters resume in the order they started waiting, at
// the time of the trigger. `any_of` / `all_of` combine events.
#include <coroutine>
#include <functional>
#include <memory>
#include <vector>

#include "sim/simulator.h"

namespace mobisim::sim {

struct EventState {
  Simulator* sim = nullptr;
  bool triggered = false;
  int value = 0;
  struct Waiter {
    std::coroutine_handle<> handle;        // a waiting process, or
    std::function<void(int)> callback;     // a combinator callback
    ProcessState* process = nullptr;       // the process the handle belongs to
  };
  std::vector<Waiter> waiters;
};

class Event {
 public:
  explicit Event(Simulator& sim) : state_(std::make_shared<EventState>()) { state_->sim = &sim; }
  explicit Event(std::shared_ptr<EventState> s) : state_(std::move(s)) {}

  bool triggered() const { return state_->triggered; }
  int value() const { return state_->value; }
  // Triggers the event now; waiting processes resume at the current time, in wait order.
  void succeed(int value = 0);
  // Runs `fn(value)` when the event triggers (immediately if it already has).
  void on_trigger(std::function<void(int)> fn);

  bool await_ready() const noexcept { return state_->triggered; }
  void await_suspend(std::coroutine_handle<> h) {
    state_->waiters.push_back({h, {}, state_->sim->current_process()});
  }
  int await_resume() const noexcept { return state_->value; }

 private:
  std::shared_ptr<EventState> state_;
};

// Triggers with the index of the first event of `events` to trigger.
Event any_of(Simulator& sim, const std::vector<Event>& events);
// Triggers once every event of `events` has triggered (value: number of events).
Event all_of(Simulator& sim, const std::vector<Event>& events);

}  // namespace mobisim::sim
