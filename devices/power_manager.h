#pragma once
// A phone's power, heat, clocks and charge over one simulation (sustained use). The Device owns one
// when the experiment's `thermal:` is not `none`; with `thermal: none` the device runs every unit at
// its peak clock and constant power, as the five documents' short-burst measurements did.
//
//   Power    base_power_w + per unit: idle, or while busy idle + (active - idle) x the operating
//            point's C V^2 f scale (devices/thermal.h). Flash I/O energy is counted in the device's
//            energy but not as heat in the SoC (UFS sits apart on the board).
//   Heat     the RC ladder of devices/thermal.h, advanced in closed form between events.
//   Clocks   a frequency governor per unit (schedutil, performance, powersave, fixed) under the caps
//            of the thermal trips' step-wise governor and, in sustained-performance mode, a static cap
//            (the highest point whose steady state stays below every trip). A unit's work runs on a
//            sim::SharedBandwidth clock, so a change of point re-plans the work in progress.
//   Battery  stored energy falls with the device's power and rises in charging windows by
//            charging_efficiency x charger power (the rest heats the skin); low below low_percent.
//
// Everything changes at events only: a unit starting or finishing work, a trip crossing (the root of
// the closed form), a governor poll while a trip is engaged, a schedutil ramp step (when the PELT
// signal reaches the next point's threshold), a charging window's edge. The manager's own events are
// daemon calls: a finished run is not kept going by a phone that is still cooling down.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "devices/thermal.h"
#include "sim/params.h"
#include "sim/shared_bandwidth.h"
#include "sim/simulator.h"
#include "sim/stats.h"
#include "sim/timeline.h"

namespace mobisim::devices {

struct DeviceProfile;

struct ChargingWindow {
  double start_s = 0, end_s = 0, power_w = 0;
};

// The experiment's `thermal:` key: `none` (also when absent: every unit at its peak clock and
// constant power, recorded as none in the resolved config), `profile` (the phone's own model, all
// defaults), or a mapping (every key optional):
//   thermal:
//     ambient_c: 25                 # still air around the phone
//     start: cold                   # cold (everything at ambient) | warm (junction and skin at warm_c)
//     warm_c: 40
//     governor: schedutil           # schedutil | performance | powersave | fixed
//     fixed_mhz: {cpu: 1800}        # governor: fixed, one clock per unit with operating points
//     sustained_performance: false  # Android's sustained-performance mode (a static cap)
//     background_headroom_c: 5      # idle-time work waits until every sensor is this far below its trip
//     series_interval_s: 1          # shortest time between two samples of the series (changes always sampled)
//     battery: {start_percent: 100, low_percent: 15, charging: [{start_s: 0, end_s: 600, power_w: 15}]}
//     (or battery: {trace_charging_w: 15}: the workload trace's charging idle windows, at 15 W)
struct SustainedOptions {
  bool enabled = false;
  double ambient_c = 25;
  std::string start = "cold";
  double warm_c = 40;
  std::string governor = "schedutil";
  std::map<std::string, double> fixed_mhz;
  bool sustained_performance = false;
  double background_headroom_c = 5;
  double series_interval_s = 1;
  double battery_start_percent = 100, battery_low_percent = 15;
  std::vector<ChargingWindow> charging;
  double trace_charging_w = 0;  // > 0: charge in the workload trace's charging windows at this power
  YAML::Node resolved;  // what the result files record ("none" when disabled)

  static ParamSchema schema();
  static SustainedOptions from_yaml(const YAML::Node& node, const ConfigSource& source);
  // ConfigErrors a run would meet: a phone without a thermal model, a fixed clock for a unit the
  // profile has no operating points for, a charging window without a battery.
  void check_against(const DeviceProfile& profile, const std::string& where) const;
};

// For a driver that keeps every unit at its peak clock (the five documents' drivers: their numbers
// are short-burst measurements): accepts an absent key or `thermal: none`, fails on anything else
// naming the key and where sustained use does run (impl: phone).
void require_thermal_none(const Params& p, const std::string& driver);
constexpr const char* kThermalNoneDoc =
    "sustained use: only none here (this driver keeps every unit at its peak clock; impl: phone runs the thermal "
    "model)";

struct SustainedSample {
  double t_s = 0, junction_c = 0, skin_c = 0, power_w = 0, battery_percent = 0;
  bool throttled = false, charging = false;
  std::vector<double> mhz;  // per governed unit, in PowerManager::unit_names() order
};

struct SustainedSummary {
  double peak_junction_c = 0, peak_skin_c = 0, time_throttled_s = 0, energy_j = 0;
  double battery_end_percent = 0, battery_min_percent = 0;
  std::vector<std::pair<std::string, double>> mean_busy_mhz;  // per governed unit, time-weighted while busy
};

class PowerManager {
 public:
  PowerManager(sim::Simulator& sim, const DeviceProfile& profile, const SustainedOptions& options,
               sim::SharedBandwidth& bus, sim::StatGroup& stats, sim::TimelineProcess* timeline);
  PowerManager(const PowerManager&) = delete;
  PowerManager& operator=(const PowerManager&) = delete;

  // The bus clock `unit`'s work runs on (-1: a unit without operating points, fixed clock).
  int clock_of(const std::string& unit) const;
  void set_busy(const std::string& unit, bool busy);
  // Charging windows known only once the workload is read (a trace's charging idle windows): each
  // starts charging at `power_w`. Windows must not overlap one another or the configured ones.
  void add_charging_windows(const std::vector<ChargingWindow>& windows);

  // As of the simulator's current time.
  double energy_j() const;            // integral of the SoC's power (base + units) since time 0
  double junction_c() const { return state_now().junction_c; }
  double skin_c() const { return state_now().skin_c; }
  double battery_percent() const;
  bool charging() const { return charger_w_ > 0; }
  bool battery_low() const { return !charging() && battery_percent() < options_.battery_low_percent; }
  // Idle-time work may run: not on a low battery (unless charging), and every sensor at least
  // background_headroom_c below its lowest trip with no trip engaged.
  bool background_allowed() const;
  double unit_mhz(const std::string& unit) const;

  std::vector<std::string> unit_names() const;  // governed units, in profile order
  const std::vector<SustainedSample>& series() const { return series_; }
  SustainedSummary summary() const;
  // Brings integrals and the series to the current time (call once the run is over).
  void finish();

 private:
  struct UnitState {
    std::string name;
    const OperatingPoints* points = nullptr;  // into spec_ (owned here)
    double active_w = 0, idle_w = 0;
    bool busy = false;
    std::size_t point = 0, cap = 0, static_cap = 0;
    int clock = -1;
    double util = 0;            // PELT-like utilisation in [0, 1] at util_since
    sim::Time util_since = 0;
    sim::Time last_change = -1;  // of the point (schedutil's rate limit)
    double busy_s = 0, busy_mhz_s = 0;
    sim::EventId ramp;
  };
  ThermalNetwork::Input input() const;
  double soc_power_w() const;
  ThermalNetwork::State state_now() const;
  void advance_to_now();
  void after_change(bool sample_always);
  void arm_crossing();
  void poll();
  void apply_caps();
  std::size_t wanted_point(UnitState& u);
  void set_point(UnitState& u, std::size_t point);
  void schedutil_update(UnitState& u);
  void wake_schedutil(UnitState& u, sim::Time delay);
  void decay_util(UnitState& u);
  void sample();
  void start_charging(double power_w);
  void stop_charging();
  std::size_t static_cap_for(const UnitState& u) const;

  sim::Simulator& sim_;
  ThermalSpec spec_;
  ThermalNetwork net_;
  SustainedOptions options_;
  sim::SharedBandwidth& bus_;
  sim::TimelineProcess* timeline_;
  std::string track_;
  double base_w_ = 0, battery_capacity_j_ = 0;
  std::vector<UnitState> units_;
  std::map<std::string, std::size_t> index_;
  std::vector<int> trip_level_;
  std::vector<double> trip_last_c_;
  bool polling_ = false;
  sim::EventId crossing_, poll_;
  // Integrated state at since_.
  sim::Time since_ = 0;
  ThermalNetwork::State state_;
  double energy_j_ = 0, battery_j_ = 0, charger_w_ = 0;
  double peak_junction_c_ = 0, peak_skin_c_ = 0, throttled_s_ = 0, battery_min_j_ = 0;
  std::vector<SustainedSample> series_;
  double last_sample_s_ = -1;
  sim::Counter* throttle_steps_ = nullptr;
};

}  // namespace mobisim::devices
