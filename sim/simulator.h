#pragma once
// The discrete-event core: a clock, an event queue with deterministic order
// (time, then priority, then insertion sequence), lazy cancellation, and
// processes written as C++20 coroutines (SimPy-style; one style everywhere):
//
//     sim::Task<void> customer(sim::Simulator& s, sim::Resource& server) {
//       auto lease = co_await server.acquire();
//       co_await s.timeout(5 * sim::kMillisecond);
//     }                                    // lease released here
//     sim.start(customer(sim, server), "customer-1");
//     sim.run();
//
// Processes start in creation order at the current time. A `Task` can also be
// awaited from another task (`co_await ufs.read(bytes)`), running inline and
// returning a value. An exception escaping a started process is stored and
// rethrown from run(), never swallowed. The simulator knows nothing about LLMs.
#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/event_queue.h"
#include "sim/time.h"

namespace mobisim::sim {

class Simulator;
class Event;
class TimeWeighted;

// Event priorities: lower runs first among events at the same time.
inline constexpr int kPriorityUrgent = 0;
inline constexpr int kPriorityNormal = 1;
inline constexpr int kPriorityLate = 2;

struct EventId {
  std::uint32_t slot = UINT32_MAX;
  std::uint32_t generation = 0;
  bool valid() const { return slot != UINT32_MAX; }
};

// Thrown inside a process that was interrupted (e.g. preempted from a resource)
// while it waited on a timeout.
struct Interrupt : std::exception {
  std::string cause;
  explicit Interrupt(std::string c) : cause(std::move(c)) {}
  const char* what() const noexcept override { return cause.c_str(); }
};

// Book-keeping of one started (top-level) process. The fields a resumption touches come first
// (one cache line), so resuming one of 100,000 sleeping processes misses the cache once, not twice.
struct ProcessState {
  // Interrupt support: the timeout the process is sleeping on, if any.
  EventId sleeping_on;
  std::coroutine_handle<> sleeping_handle;
  std::optional<std::string> interrupt_cause;
  bool done = false;
  std::exception_ptr error;
  // Created on first use (most processes are never joined); see ProcessHandle::done_event().
  std::shared_ptr<struct EventState> done_event;
  Simulator* sim = nullptr;       // the simulator that ran it (for done_event; unused once done)
  std::coroutine_handle<> frame;  // owned by the simulator until the process finishes
  std::size_t index = 0;          // position in the simulator's list of running processes
  std::size_t number = 0;         // for the default name, "process-<number>"
  // The name given to start(); "process-<number>" is formatted only when asked (name()).
  std::string given_name;
  const std::string& name();
};
// ---------------------------------------------------------------------------
// Task<T>: a lazily started coroutine. Awaiting it runs it inline (symmetric
// transfer) and yields its value; Simulator::start() runs it as a process.
// ---------------------------------------------------------------------------
template <class T>
class Task;

namespace detail {

struct PromiseBase {
  std::coroutine_handle<> continuation;
  std::exception_ptr exception;
  ProcessState* process = nullptr;  // set when started as a top-level process
  Simulator* sim = nullptr;

  std::suspend_always initial_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { exception = std::current_exception(); }
};

void finish_process(Simulator& sim, ProcessState& p, std::exception_ptr error);

struct FinalAwaiter {
  bool await_ready() noexcept { return false; }
  template <class P>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
    PromiseBase& pr = h.promise();
    if (pr.continuation) return pr.continuation;
    if (pr.process) {
      // A top-level process: the simulator owns the frame and destroys it here.
      ProcessState* p = pr.process;
      Simulator* sim = pr.sim;
      std::exception_ptr err = pr.exception;
      h.destroy();
      finish_process(*sim, *p, err);
    }
    return std::noop_coroutine();
  }
  void await_resume() noexcept {}
};

template <class T>
struct Promise : PromiseBase {
  std::optional<T> value;
  Task<T> get_return_object();
  FinalAwaiter final_suspend() noexcept { return {}; }
  template <class U>
  void return_value(U&& v) { value.emplace(std::forward<U>(v)); }
};

template <>
struct Promise<void> : PromiseBase {
  Task<void> get_return_object();
  FinalAwaiter final_suspend() noexcept { return {}; }
  void return_void() {}
};

}  // namespace detail

template <class T = void>
class [[nodiscard]] Task {
 public:
  using promise_type = detail::Promise<T>;
  using Handle = std::coroutine_handle<promise_type>;

  explicit Task(Handle h) : h_(h) {}
  Task(Task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Task& operator=(Task&& o) noexcept {
    if (this != &o) {
      if (h_) h_.destroy();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  ~Task() {
    if (h_) h_.destroy();
  }

  // Awaiting a task runs it now, inside the awaiting process.
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> parent) noexcept {
    h_.promise().continuation = parent;
    return h_;
  }
  T await_resume() {
    if (h_.promise().exception) std::rethrow_exception(h_.promise().exception);
    if constexpr (!std::is_void_v<T>) return std::move(*h_.promise().value);
  }

  Handle release() { return std::exchange(h_, {}); }

 private:
  Handle h_;
};

namespace detail {
template <class T>
Task<T> Promise<T>::get_return_object() {
  return Task<T>(std::coroutine_handle<Promise<T>>::from_promise(*this));
}
inline Task<void> Promise<void>::get_return_object() {
  return Task<void>(std::coroutine_handle<Promise<void>>::from_promise(*this));
}
}  // namespace detail

// A handle to a started process: join it with `co_await handle.done()`.
class ProcessHandle {
 public:
  ProcessHandle() = default;
  explicit ProcessHandle(std::shared_ptr<ProcessState> s) : state_(std::move(s)) {}
  bool done() const { return state_ && state_->done; }
  Event done_event() const;
  const std::string& name() const { return state_->name(); }
  ProcessState* state() const { return state_.get(); }

 private:
  std::shared_ptr<ProcessState> state_;
};

class Simulator {
 public:
  Simulator();
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  Time now() const { return now_; }

  // Starts `task` as a process at the current time (after already-scheduled events at this time).
  ProcessHandle start(Task<void> task, std::string name = "");

  // `co_await sim.timeout(d)`: resume after d nanoseconds. Throws Interrupt if interrupted meanwhile.
  struct TimeoutAwaiter {
    Simulator* sim;
    Time delay;
    ProcessState* proc = nullptr;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h);
    void await_resume();
  };
  TimeoutAwaiter timeout(Time delay);
  // An Event that triggers after `delay` (for any_of / all_of).
  Event timeout_event(Time delay);

  // Low-level scheduling (used by awaiters and the callback-free parts of devices).
  EventId schedule_resume(Time at, std::coroutine_handle<> h, int priority = kPriorityNormal);
  // Same, for a coroutine that belongs to `owner` (a process waiting on an event or resource).
  EventId schedule_resume_for(ProcessState* owner, Time at, std::coroutine_handle<> h,
                              int priority = kPriorityNormal);
  EventId schedule_call(Time at, std::function<void()> fn, int priority = kPriorityNormal);
  // A call that does not keep the simulation going: run() ends when only such events remain
  // (a temperature sensor's next trip, a governor's next poll: the phone keeps cooling after the
  // last request, but the run is over). Cancel it like any other event.
  EventId schedule_daemon_call(Time at, std::function<void()> fn, int priority = kPriorityNormal);
  void cancel(EventId id);  // lazy: the entry stays queued and is skipped when popped

  // Interrupts a process sleeping on a timeout: its timeout is cancelled and it resumes now with
  // sim::Interrupt(cause). A process not sleeping on a timeout is interrupted at its next timeout.
  void interrupt(ProcessState* process, std::string cause);

  // Runs until no events remain (or until time `until`, leaving later events queued).
  void run();
  void run_until(Time until);
  bool step();  // processes one event; false when the queue is empty

  // Ends the simulation for good: destroys the frames of processes that never finished (their
  // locals, e.g. leases, run their destructors while the components they refer to still exist)
  // and closes every statistic this simulator clocks at the current time. Idempotent; the
  // destructor runs it too. Drivers call it before the components the processes use go away.
  void shutdown();
  bool shut_down() const { return shut_down_; }
  // Statistics that read this simulator's clock register here so shutdown() can close them.
  void clock(TimeWeighted* stat);
  void unclock(TimeWeighted* stat);

  std::uint64_t events_processed() const { return events_processed_; }
  std::size_t pending_events() const { return queue_.size(); }
  ProcessState* current_process() const { return current_; }

 private:
  friend void detail::finish_process(Simulator&, ProcessState&, std::exception_ptr);
  using Entry = EventQueue::Entry;
  // What a pending event resumes: 16 bytes, four to a cache line. The generation/cancelled tag and
  // the callable of schedule_call() live in their own arrays, off the resumption path.
  struct Slot {
    std::coroutine_handle<> handle;  // null: the event runs calls_[slot]
    ProcessState* process = nullptr;
  };
  // An entry's key orders events at the same time by priority (2 bits), then insertion sequence
  // (38 bits), and names its slot (24 bits). Keys are unique, so the pop order is fully determined.
  static constexpr int kSlotBits = 24, kSequenceBits = 38;
  static constexpr std::uint64_t kSlotMask = (1ULL << kSlotBits) - 1;
  static constexpr std::uint64_t kSequenceLimit = 1ULL << kSequenceBits;
  static constexpr std::size_t kPrefetchAboveSlots = 4096;
  static std::uint32_t slot_of(const Entry& e) { return static_cast<std::uint32_t>(e.key & kSlotMask); }
  std::uint32_t alloc_slot();
  EventId push(Time at, int priority, std::uint32_t slot);
  void rethrow_failures();

  Time now_ = 0;
  std::uint64_t seq_ = 0;
  std::uint64_t events_processed_ = 0;
  EventQueue queue_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> tags_;              // per slot: generation << 1 | cancelled
  std::vector<std::function<void()>> calls_;     // per slot: what a schedule_call() event runs
  std::vector<std::uint8_t> daemon_;             // per slot: 1 for a schedule_daemon_call() event
  std::size_t daemon_pending_ = 0;               // queued entries (cancelled or not) that are daemon calls
  std::vector<std::uint32_t> free_slots_;
  ProcessState* current_ = nullptr;
  std::vector<std::shared_ptr<ProcessState>> processes_;   // started, not yet finished
  std::exception_ptr failure_;
  std::string failure_process_;
  std::vector<TimeWeighted*> clocked_;  // open statistics reading now(); closed by shutdown()
  bool shut_down_ = false;
};

}  // namespace mobisim::sim
