#pragma once
// Shared resources with queues (SimPy's Resource / PriorityResource /
// PreemptiveResource in one class) and a FIFO Store.
//
//   auto lease = co_await npu.acquire();                  // FIFO
//   auto lease = co_await cpu.acquire(/*priority=*/1);     // lower value = served first
//   auto lease = co_await cpu.acquire(0, /*preempt=*/true);
//
// A request with `preempt` takes the slot of the holder with the worst
// (numerically largest) priority if that is worse than its own and the holder
// acquired with `preemptible`; the holder receives sim::Interrupt("preempted")
// at its current (or next) timeout and has lost the slot. Background work that
// must yield to user queries acquires with a low priority and `preemptible`.
// The lease releases the slot when destroyed (RAII), also on exceptions.
#include <coroutine>
#include <cstdint>
#include <string_view>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/simulator.h"

namespace mobisim::sim {

class Resource;

// The cause of the sim::Interrupt a `yields` holder receives when a better-priority request waits.
inline constexpr std::string_view kYieldRequest = "yield to a better-priority request";

class Lease {
 public:
  Lease() = default;
  Lease(Resource* r, std::uint64_t id, std::weak_ptr<bool> alive) : res_(r), id_(id), alive_(std::move(alive)) {}
  Lease(Lease&& o) noexcept : res_(std::exchange(o.res_, nullptr)), id_(o.id_), alive_(std::move(o.alive_)) {}
  Lease& operator=(Lease&& o) noexcept;
  Lease(const Lease&) = delete;
  ~Lease() { release(); }
  void release();
  bool held() const;

 private:
  Resource* res_ = nullptr;
  std::uint64_t id_ = 0;
  std::weak_ptr<bool> alive_;
};

class Resource {
 public:
  Resource(Simulator& sim, std::string name, int capacity = 1);
  ~Resource() = default;

  struct AcquireAwaiter {
    Resource* res;
    int priority;
    bool preempt;
    bool preemptible;
    bool yields;
    std::uint64_t granted = 0;
    bool await_ready();
    void await_suspend(std::coroutine_handle<> h);
    Lease await_resume();
  };
  AcquireAwaiter acquire(int priority = 0, bool preempt = false, bool preemptible = false, bool yields = false) {
    return AcquireAwaiter{this, priority, preempt, preemptible, yields};
  }

  int capacity() const { return capacity_; }
  int in_use() const { return static_cast<int>(holders_.size()); }
  std::size_t queue_length() const { return waiters_.size(); }
  const std::string& name() const { return name_; }
  // Time-integrated number of busy slots since creation (for utilisation statistics).
  double busy_slot_seconds() const;
  std::uint64_t preemptions() const { return preemptions_; }
  // Yield requests sent to `yields` holders (one per holder at most).
  std::uint64_t yield_requests() const { return yield_requests_; }
  // True when a request with priority better than `priority` is waiting (lets
  // chunked background work yield at its next chunk boundary).
  bool has_waiter_better_than(int priority) const;

 private:
  friend class Lease;
  struct Holder {
    std::uint64_t id;
    int priority;
    bool preemptible;
    bool yields;
    bool asked_to_yield;
    ProcessState* process;
  };
  struct Waiter {
    int priority;
    std::uint64_t seq;
    bool preemptible;
    bool yields;
    std::coroutine_handle<> handle;
    ProcessState* process;
    std::uint64_t* grant_slot;  // where to write the granted holder id
  };
  std::uint64_t grant(int priority, bool preemptible, bool yields, ProcessState* p);
  void release(std::uint64_t id);
  bool try_preempt(int priority);
  void ask_to_yield(int priority);
  void account();

  Simulator& sim_;
  std::string name_;
  int capacity_;
  std::vector<Holder> holders_;
  std::deque<Waiter> waiters_;  // sorted by (priority, seq)
  std::uint64_t next_id_ = 1, next_seq_ = 0, preemptions_ = 0, yield_requests_ = 0;
  Time last_change_ = 0;
  double busy_area_ns_ = 0.0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// An unbounded FIFO store of items; `co_await store.get()` waits for an item.
template <class T>
class Store {
 public:
  explicit Store(Simulator& sim) : sim_(sim) {}
  void put(T item) {
    if (!getters_.empty()) {
      Getter g = getters_.front();
      getters_.pop_front();
      *g.slot = std::move(item);
      sim_.schedule_resume_for(g.process, sim_.now(), g.handle);
      return;
    }
    items_.push_back(std::move(item));
  }
  struct GetAwaiter {
    Store* store;
    std::optional<T> value;
    bool await_ready() {
      if (store->items_.empty()) return false;
      value = std::move(store->items_.front());
      store->items_.pop_front();
      return true;
    }
    void await_suspend(std::coroutine_handle<> h) {
      store->getters_.push_back({h, store->sim_.current_process(), &value});
    }
    T await_resume() { return std::move(*value); }
  };
  GetAwaiter get() { return GetAwaiter{this, std::nullopt}; }
  std::size_t size() const { return items_.size(); }

 private:
  struct Getter {
    std::coroutine_handle<> handle;
    ProcessState* process;
    std::optional<T>* slot;
  };
  Simulator& sim_;
  std::deque<T> items_;
  std::deque<Getter> getters_;
};

}  // namespace mobisim::sim
