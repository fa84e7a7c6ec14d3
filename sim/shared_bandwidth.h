#pragma once
// A fluid resource: a channel of fixed capacity (units per second, e.g. bytes/s of a memory bus)
// shared by flows that each move an amount at no more than their own rate.
//
//   co_await bus.flow(bytes, uncontended_duration);   // takes that long when the bus has room
//
// A flow wants rate = amount / uncontended_duration. While the wanted rates of the flows in
// progress sum to no more than the capacity, every flow runs at its own rate and ends exactly
// `uncontended_duration` after it started (to the nanosecond: a lone flow is a plain timeout).
// Beyond that, the capacity is split max-min fairly (water-filling: flows that want less than
// an equal share get what they want, the rest share what is left equally), and every flow's
// progress is re-planned whenever a flow starts or ends. Two flows that each want the whole
// capacity therefore finish together after (amount1 + amount2) / capacity, as two streams on
// one bus do.
//
// A process waiting on a flow can be interrupted (Simulator::interrupt): the flow leaves the
// channel, the others are re-planned, and the process resumes with sim::Interrupt. With
// `remaining_on_interrupt`, the flow writes there how much of its uncontended time (ns at the
// nominal clock) it had still to run: what a caller resuming the work later has left.
// Clocks. A flow may run on a clock (a unit's DVFS domain) of speed s (1: nominal): at speed s it
// wants s times its rate and progresses s times as fast, so alone it takes uncontended / s. A
// change of speed re-plans the flows in progress (work started at one clock finishes at another).
//
// The simulator knows nothing about what flows: a DRAM bus, a link, a shared cache.
#include <coroutine>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/simulator.h"
#include "sim/time.h"

namespace mobisim::sim {

class SharedBandwidth {
 public:
  // `capacity_per_s` > 0 (units per second).
  SharedBandwidth(Simulator& sim, std::string name, double capacity_per_s);
  SharedBandwidth(const SharedBandwidth&) = delete;
  SharedBandwidth& operator=(const SharedBandwidth&) = delete;

  class FlowAwaiter;
  // Moves `amount` (>= 0) in `uncontended` (> 0 when amount > 0) or longer when the channel is
  // oversubscribed. amount == 0 is a plain timeout of `uncontended`.
  FlowAwaiter flow(double amount, Time uncontended, int clock = -1, double* remaining_on_interrupt = nullptr);
  // A new clock of speed 1; its index is what flow() takes.
  int add_clock();
  void set_clock_speed(int clock, double speed);  // speed > 0
  double clock_speed(int clock) const { return clock < 0 ? 1.0 : clocks_.at(static_cast<std::size_t>(clock)); }

  const std::string& name() const { return name_; }
  double capacity_per_s() const { return capacity_; }
  std::size_t active_flows() const { return flows_.size(); }
  // Time flows spent longer than they would have alone (summed over flows), in seconds.
  double contention_delay_s() const { return delay_s_; }

  class FlowAwaiter {
   public:
    FlowAwaiter(SharedBandwidth& bus, double amount, Time uncontended, int clock, double* remaining_on_interrupt)
        : bus_(bus), amount_(amount), uncontended_(uncontended), clock_(clock), remaining_out_(remaining_on_interrupt) {}
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h);
    void await_resume();

   private:
    SharedBandwidth& bus_;
    double amount_;
    Time uncontended_;
    int clock_;
    double* remaining_out_;
    std::uint64_t id_ = 0;
    ProcessState* proc_ = nullptr;
  };

 private:
  struct Flow {
    std::uint64_t id;
    double wanted_rate;      // units per second, at nominal clock
    double remaining_ns;     // of uncontended time (at nominal clock) still to run
    double speed = 1.0;      // progress per ns: allocated share x clock speed (1: unhindered, nominal)
    Time since = 0;          // when remaining_ns was last brought up to date
    Time started = 0;
    Time uncontended = 0;
    std::coroutine_handle<> handle;
    ProcessState* process = nullptr;
    EventId completion;
    int clock = -1;
  };
  void add(Flow flow);
  double remove(std::uint64_t id);  // an interrupted flow: leaves without completing; its remaining_ns
  void complete(std::uint64_t id);
  void advance_to_now();
  void replan();
  void max_min_speeds(std::vector<double>& speed);

  Simulator& sim_;
  std::string name_;
  double capacity_;
  std::vector<Flow> flows_;  // in start order (deterministic re-planning)
  std::vector<double> clocks_;        // speed of each clock
  std::vector<double> speeds_;        // scratch of replan(), kept to avoid an allocation per flow
  std::vector<std::size_t> order_;    // scratch of max_min_speeds()
  std::vector<double> wanted_;        // scratch of max_min_speeds(): wanted rates at the clocks' speeds
  std::uint64_t next_id_ = 1;
  double delay_s_ = 0;
};

}  // namespace mobisim::sim
