#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/error.h"
#include "sim/event.h"
#include "sim/stats.h"

namespace mobisim::sim {

Simulator::Simulator() { queue_.reserve(1024); }

Simulator::~Simulator() { shutdown(); }

void Simulator::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Destroy the frames of processes that never finished (their locals, e.g. leases, run their destructors).
  for (auto& p : processes_) {
    if (p->frame) {
      auto f = std::exchange(p->frame, {});
      f.destroy();
    }
  }
  queue_.clear();  // their pending resumptions would refer to destroyed frames
  // Close what reads our clock, so nothing reads it after we are gone.
  for (TimeWeighted* stat : std::exchange(clocked_, {})) stat->close(now_);
}

void Simulator::clock(TimeWeighted* stat) {
  if (shut_down_) throw Error("internal: a statistic was bound to a simulator that has shut down");
  clocked_.push_back(stat);
}

void Simulator::unclock(TimeWeighted* stat) { std::erase(clocked_, stat); }

std::uint32_t Simulator::alloc_slot() {
  if (!free_slots_.empty()) {
    std::uint32_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  slots_.emplace_back();
  tags_.push_back(0);
  calls_.emplace_back();
  daemon_.push_back(0);
  return static_cast<std::uint32_t>(slots_.size() - 1);
}

EventId Simulator::push(Time at, int priority, std::uint32_t slot) {
  if (at < now_) throw Error(fmt::format("internal: event scheduled in the past ({} < {})", at, now_));
  if (priority < 0 || priority > 3) throw Error(fmt::format("internal: event priority {} outside [0, 3]", priority));
  if (slot > kSlotMask) throw Error("internal: more than 16.7 million events pending at once");
  if (seq_ >= kSequenceLimit) throw Error("internal: more than 2.7e11 events scheduled in one simulation");
  const std::uint64_t key = (static_cast<std::uint64_t>(priority) << (kSequenceBits + kSlotBits)) |
                            (seq_++ << kSlotBits) | slot;
  queue_.push(Entry{at, key});
  return EventId{slot, tags_[slot] >> 1};
}

EventId Simulator::schedule_resume(Time at, std::coroutine_handle<> h, int priority) {
  return schedule_resume_for(current_, at, h, priority);
}

EventId Simulator::schedule_resume_for(ProcessState* owner, Time at, std::coroutine_handle<> h, int priority) {
  const std::uint32_t s = alloc_slot();
  slots_[s] = Slot{h, owner};
  return push(at, priority, s);
}

EventId Simulator::schedule_call(Time at, std::function<void()> fn, int priority) {
  const std::uint32_t s = alloc_slot();
  slots_[s] = Slot{{}, current_};
  calls_[s] = std::move(fn);
  return push(at, priority, s);
}

EventId Simulator::schedule_daemon_call(Time at, std::function<void()> fn, int priority) {
  const std::uint32_t s = alloc_slot();
  slots_[s] = Slot{{}, nullptr};
  calls_[s] = std::move(fn);
  daemon_[s] = 1;
  ++daemon_pending_;
  return push(at, priority, s);
}

void Simulator::cancel(EventId id) {
  if (!id.valid() || id.slot >= slots_.size()) return;
  std::uint32_t& tag = tags_[id.slot];
  if (tag >> 1 == id.generation) tag |= 1;
}

bool Simulator::step() {
  while (!queue_.empty()) {
    // Only daemon calls left (cancelled entries included): nothing keeps the run going.
    if (daemon_pending_ != 0 && queue_.size() <= daemon_pending_) return false;
    const Entry e = queue_.pop();
    const std::uint32_t s = slot_of(e);
    if (daemon_[s]) {
      daemon_[s] = 0;
      --daemon_pending_;
    }
    const Slot slot = slots_[s];
    std::uint32_t& tag = tags_[s];
    const bool cancelled = (tag & 1) != 0;
    tag = (tag | 1) + 1;  // next generation, not cancelled: invalidates outstanding EventIds
    // Resumptions (the hot path) carry no callable; only schedule_call() slots move one out.
    std::function<void()> fn;
    if (!slot.handle) fn = std::exchange(calls_[s], nullptr);
    free_slots_.push_back(s);
    // At 100,000 pending events the next events are cold processes: their slots, coroutine
    // frames and ProcessStates miss the cache. Fetch them while this event runs, in two stages:
    // the slots of the entries due soonest (the heap's two levels below the top) now, and the
    // frames and ProcessStates of the next event and the one after it, whose slots were fetched a
    // step or more ago (the event after next was then in those two levels). Reading a slot
    // fetched only now would stall here. Written out here: as a separate function GCC judged it
    // free of side effects and dropped it. Below a few thousand slots (the most events ever
    // pending) all of it stays cached: skip.
    if (slots_.size() > kPrefetchAboveSlots && !queue_.empty()) {
      for (const Entry& soon : queue_.soon()) __builtin_prefetch(&slots_[slot_of(soon)]);
      for (const Entry* upcoming : {&queue_.top(), queue_.runner_up()}) {
        if (!upcoming) continue;
        __builtin_prefetch(&tags_[slot_of(*upcoming)]);
        const Slot& next = slots_[slot_of(*upcoming)];
        if (void* frame = next.handle.address()) {
          __builtin_prefetch(frame);  // resume pointer, promise, first locals
          __builtin_prefetch(static_cast<const char*>(frame) + 64);
        }
        if (next.process) __builtin_prefetch(next.process);
      }
    }
    if (cancelled) continue;
    now_ = e.time;
    ++events_processed_;
    current_ = slot.process;
    if (slot.handle)
      slot.handle.resume();
    else if (fn)
      fn();
    current_ = nullptr;
    return true;
  }
  return false;
}

void Simulator::rethrow_failures() {
  if (failure_) {
    auto f = std::exchange(failure_, nullptr);
    try {
      std::rethrow_exception(f);
    } catch (const Error& e) {
      throw Error(fmt::format("process '{}' failed: {}", failure_process_, e.what()), e.exit_code());
    } catch (const std::exception& e) {
      throw Error(fmt::format("process '{}' failed: {}", failure_process_, e.what()));
    }
  }
}

void Simulator::run() {
  while (step()) {
    if (failure_) break;
  }
  rethrow_failures();
}

void Simulator::run_until(Time until) {
  while (!queue_.empty() && queue_.top().time <= until) {
    if (!step()) break;
    if (failure_) break;
  }
  rethrow_failures();
  if (now_ < until) now_ = until;
}

ProcessHandle Simulator::start(Task<void> task, std::string name) {
  if (shut_down_) throw Error("internal: a process was started on a simulator that has shut down");
  auto state = std::make_shared<ProcessState>();
  state->given_name = std::move(name);
  state->number = processes_.size();
  state->sim = this;
  auto h = task.release();
  h.promise().process = state.get();
  h.promise().sim = this;
  state->frame = h;
  state->index = processes_.size();
  processes_.push_back(state);
  schedule_resume_for(state.get(), now_, h);
  return ProcessHandle(state);
}

const std::string& ProcessState::name() {
  if (given_name.empty()) given_name = fmt::format("process-{}", number);
  return given_name;
}

void detail::finish_process(Simulator& sim, ProcessState& p, std::exception_ptr error) {
  p.done = true;
  p.frame = {};
  p.error = error;
  if (error && !sim.failure_) {
    sim.failure_ = error;
    sim.failure_process_ = p.name();
  }
  if (p.done_event) Event(p.done_event).succeed();
  // Drop finished processes so long runs do not accumulate state (swap-remove: O(1)).
  auto& v = sim.processes_;
  const std::size_t i = p.index;
  if (i < v.size() && v[i].get() == &p) {
    std::shared_ptr<ProcessState> keep = std::move(v[i]);  // `p` must outlive this function
    if (i + 1 != v.size()) {
      v[i] = std::move(v.back());
      v[i]->index = i;
    }
    v.pop_back();
  }
}

Event ProcessHandle::done_event() const {
  if (!state_->done_event) {
    auto ev = std::make_shared<EventState>();
    ev->sim = state_->sim;
    ev->triggered = state_->done;  // a process joined after it finished: already triggered (value 0)
    state_->done_event = std::move(ev);
  }
  return Event(state_->done_event);
}

Simulator::TimeoutAwaiter Simulator::timeout(Time delay) {
  if (delay < 0) throw Error(fmt::format("internal: negative timeout {}", delay));
  return TimeoutAwaiter{this, delay, current_};
}

void Simulator::TimeoutAwaiter::await_suspend(std::coroutine_handle<> h) {
  EventId id = sim->schedule_resume(sim->now() + delay, h);
  if (proc) {
    proc->sleeping_on = id;
    proc->sleeping_handle = h;
  }
}

void Simulator::TimeoutAwaiter::await_resume() {
  if (!proc) return;
  proc->sleeping_on = EventId{};
  proc->sleeping_handle = {};
  if (proc->interrupt_cause) {
    std::string cause = std::move(*proc->interrupt_cause);
    proc->interrupt_cause.reset();
    throw Interrupt(std::move(cause));
  }
}

Event Simulator::timeout_event(Time delay) {
  Event ev(*this);
  schedule_call(now_ + delay, [ev]() mutable { ev.succeed(); });
  return ev;
}

void Simulator::interrupt(ProcessState* process, std::string cause) {
  if (!process || process->done) return;
  process->interrupt_cause = std::move(cause);
  if (process->sleeping_on.valid() && process->sleeping_handle) {
    cancel(process->sleeping_on);
    auto h = process->sleeping_handle;
    process->sleeping_on = EventId{};
    schedule_resume_for(process, now_, h, kPriorityUrgent);
  }
}

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------
void Event::succeed(int value) {
  if (state_->triggered) return;
  state_->triggered = true;
  state_->value = value;
  auto waiters = std::move(state_->waiters);
  state_->waiters.clear();
  Simulator& sim = *state_->sim;
  for (auto& w : waiters) {
    if (w.handle)
      sim.schedule_resume_for(w.process, sim.now(), w.handle);
    else
      w.callback(value);
  }
}

void Event::on_trigger(std::function<void(int)> fn) {
  if (state_->triggered)
    fn(state_->value);
  else
    state_->waiters.push_back({{}, std::move(fn), nullptr});
}

Event any_of(Simulator& sim, const std::vector<Event>& events) {
  Event out(sim);
  for (std::size_t i = 0; i < events.size(); ++i) {
    Event e = events[i];
    e.on_trigger([out, i](int) mutable { out.succeed(static_cast<int>(i)); });
  }
  return out;
}

Event all_of(Simulator& sim, const std::vector<Event>& events) {
  Event out(sim);
  if (events.empty()) {
    out.succeed(0);
    return out;
  }
  auto remaining = std::make_shared<std::size_t>(events.size());
  const int n = static_cast<int>(events.size());
  for (const auto& ev : events) {
    Event e = ev;
    e.on_trigger([out, remaining, n](int) mutable {
      if (--*remaining == 0) out.succeed(n);
    });
  }
  return out;
}

}  // namespace mobisim::sim
