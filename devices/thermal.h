#pragma once
// What a phone does under sustained use: how hot it gets, which clocks its governors allow, and
// the profile section (`thermal:`) that says so. The runtime side (power, governors, battery over
// simulated time) is devices/power_manager.h.
//
// Thermal network. A lumped RC ladder from the SoC junction to the air:
//
//   P_soc -> [junction: C_j] --R_js--> [skin: C_s] --R_sa--> ambient T_a
//                                           ^ P_skin (charging losses)
//   C_j dT_j/dt = P_soc - (T_j - T_s) / R_js
//   C_s dT_s/dt = (T_j - T_s) / R_js - (T_s - T_a) / R_sa + P_skin
//
// The junction node is the die, package and the spreader under it; the skin node is the board,
// frame and back glass a hand touches. Power is constant between simulation events (a unit starting
// or finishing work, a clock change), so the state advances in closed form: the 2x2 system's
// eigenvalues and eigenvectors are computed once, and a step is two exponentials. There is no
// fixed integration step; a trip's crossing time is the root of the closed form (GSL Brent).
//
// Operating points. A unit listed under `units:` has ascending (MHz, W) points; the top one is the
// clock its peaks in the profile are quoted at. At point k it runs at f_k / f_top of its speed:
// the compute peaks and, because Android's memory-latency governor votes the DDR clock up with the
// CPU clock (the SM8650 OPP tables carry a DDR vote per CPU point), the bandwidth it streams at (one
// factor for the whole roofline time). It draws idle + (active - idle) * P_k / P_top: the table's
// powers give the shape (a vendor's per-state power table, or C V^2 f where voltages are public),
// the unit's active_power_w the level.
//
// Trips. A trip watches a sensor (junction or skin). Above its temperature a step-wise governor
// lowers the cap of its units by one operating point per polling period while the temperature still
// rises, and raises it one point per period once it is below temp - hysteresis, as Linux's
// step_wise thermal governor does with passive polling. Units not listed run at a fixed clock.
//
// Profile section (configs/devices/*.yaml), or `thermal: none` (a profile that declares it does
// not throttle: a server with forced-air cooling):
//   thermal:
//     base: phone-passive             # configs/thermal/<name>.yaml (RC values, trips, polling)
//     units:
//       cpu: {opp_mhz: [1000, 2000, 2850], opp_power_w: [0.8, 2.4, 4.5]}
//     trips: [{sensor: skin, temp_c: 41, hysteresis_c: 2, units: [cpu, gpu, npu]}]
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "sim/params.h"

namespace mobisim::devices {

struct OperatingPoints {
  std::vector<double> mhz, power_w;  // ascending; the last is the clock the unit's peaks are quoted at
  std::size_t top() const { return mhz.size() - 1; }
  double speed(std::size_t k) const { return mhz[k] / mhz.back(); }
  // Active power at point k over active power at the top point.
  double dynamic_scale(std::size_t k) const { return power_w[k] / power_w.back(); }
  // The highest point at or below `mhz_limit`; nullopt when even the lowest is above it.
  std::optional<std::size_t> highest_at_most(double mhz_limit) const;
};

enum class Sensor { junction, skin };
std::string to_string(Sensor s);

struct TripPoint {
  Sensor sensor = Sensor::skin;
  double temp_c = 0;
  double hysteresis_c = 0;
  std::vector<std::string> units;  // cooling devices: their caps step down together
};

struct ThermalSpec {
  double junction_capacity_j_per_k = 0;
  double junction_to_skin_k_per_w = 0;
  double skin_capacity_j_per_k = 0;
  double skin_to_ambient_k_per_w = 0;
  double passive_polling_ms = 0;       // step-wise governor period while a trip is engaged (or exceeded)
  double schedutil_rate_limit_us = 0;  // shortest time between two frequency changes of a unit
  double pelt_half_life_ms = 0;        // utilisation signal's half-life (schedutil reads it)
  double charging_efficiency = 0;      // fraction of charger power stored; the rest heats the skin
  std::vector<TripPoint> trips;
  std::vector<std::pair<std::string, OperatingPoints>> units;  // in profile order
  YAML::Node resolved;

  const OperatingPoints* points_of(const std::string& unit) const;
  static ParamSchema schema();
  // `node` is the profile's `thermal:` mapping (with `base:` naming configs/thermal/<name>.yaml).
  static ThermalSpec from_yaml(const YAML::Node& node, const ConfigSource& source);
};

// The closed-form RC ladder above.
class ThermalNetwork {
 public:
  struct State {
    double junction_c = 0, skin_c = 0;
  };
  struct Input {
    double soc_w = 0;     // into the junction
    double skin_w = 0;    // straight into the skin (charging losses)
    double ambient_c = 25;
  };
  explicit ThermalNetwork(const ThermalSpec& spec);

  State steady(const Input& in) const;
  State advance(const State& s, const Input& in, double seconds) const;
  static double sensor_c(const State& s, Sensor sensor) { return sensor == Sensor::junction ? s.junction_c : s.skin_c; }
  // The first time in (0, horizon_s] at which `sensor` reaches `temp_c` from below, or nullopt.
  std::optional<double> first_rise_to(const State& s, const Input& in, Sensor sensor, double temp_c,
                                      double horizon_s) const;
  double slowest_time_constant_s() const { return -1.0 / lambda_[0]; }

 private:
  double r_js_, r_sa_;     // K/W (copied: the network outlives no spec, refers to none)
  double lambda_[2];       // eigenvalues, lambda_[0] the slower (closer to 0)
  double vec_[2][2];       // eigenvectors as columns: vec_[row][col]
  double inv_[2][2];       // inverse of the eigenvector matrix
};

}  // namespace mobisim::devices
