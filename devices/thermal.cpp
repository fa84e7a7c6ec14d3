#include "devices/thermal.h"

#include <fmt/format.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_roots.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "devices/device.h"
#include "sim/error.h"

namespace mobisim::devices {

std::optional<std::size_t> OperatingPoints::highest_at_most(double mhz_limit) const {
  std::optional<std::size_t> best;
  for (std::size_t k = 0; k < mhz.size(); ++k)
    if (mhz[k] <= mhz_limit * (1 + 1e-12)) best = k;
  return best;
}

std::string to_string(Sensor s) { return s == Sensor::junction ? "junction" : "skin"; }

const OperatingPoints* ThermalSpec::points_of(const std::string& unit) const {
  for (const auto& [name, points] : units)
    if (name == unit) return &points;
  return nullptr;
}

ParamSchema ThermalSpec::schema() {
  ParamSchema s;
  s.text("base", std::string(""), "inherit every field of configs/thermal/<name>.yaml, then override");
  s.real("junction_capacity_j_per_k", std::nullopt, "heat capacity of die, package and spreader").positive().with_unit(
      "J/K");
  s.real("junction_to_skin_k_per_w", std::nullopt, "thermal resistance from the junction to the skin node")
      .positive()
      .with_unit("K/W");
  s.real("skin_capacity_j_per_k", std::nullopt, "heat capacity of board, frame and back glass").positive().with_unit(
      "J/K");
  s.real("skin_to_ambient_k_per_w", std::nullopt, "thermal resistance from the skin to still ambient air")
      .positive()
      .with_unit("K/W");
  s.real("passive_polling_ms", std::nullopt, "step-wise governor period while a trip is engaged")
      .positive()
      .with_unit("ms");
  s.real("schedutil_rate_limit_us", std::nullopt, "shortest time between two frequency changes of one unit")
      .non_negative()
      .with_unit("us");
  s.real("pelt_half_life_ms", std::nullopt, "half-life of the utilisation signal schedutil reads")
      .positive()
      .with_unit("ms");
  s.real("charging_efficiency", std::nullopt, "fraction of charger power stored in the cell (the rest heats the skin)")
      .range(0.01, 1.0);
  s.node("trips", "trip points: [{sensor: junction|skin, temp_c, hysteresis_c, units: [..]}]");
  s.node("units", "operating points per unit: {cpu: {opp_mhz: [..], opp_power_w: [..]}, ...}");
  s.text("source", std::string(""), "where these numbers come from");
  return s;
}

static ParamSchema trip_schema() {
  ParamSchema s;
  s.text("sensor", std::nullopt, "the temperature the trip watches").in({"junction", "skin"});
  s.real("temp_c", std::nullopt, "temperature above which the units' caps step down").with_unit("C");
  s.real("hysteresis_c", std::nullopt, "caps step back up below temp_c - hysteresis_c").non_negative().with_unit("C");
  s.text_list("units", std::nullopt, "units (cooling devices) this trip caps").non_empty();
  s.text("source", std::string(""), "where this trip comes from");
  return s;
}

static ParamSchema opp_schema() {
  ParamSchema s;
  s.real_list("opp_mhz", std::nullopt, "clock of each operating point, ascending; the last is the peaks' clock")
      .non_empty();
  s.real_list("opp_power_w", std::nullopt, "active power at each operating point (its shape scales the unit's "
              "active_power_w)").non_empty();
  s.text("source", std::string(""), "where the table comes from");
  return s;
}

static OperatingPoints parse_points(const Params& p) {
  OperatingPoints o{p.real_list("opp_mhz"), p.real_list("opp_power_w")};
  if (o.mhz.size() != o.power_w.size())
    p.fail("opp_power_w", fmt::format("has {} entries, opp_mhz has {}: one power per operating point",
                                      o.power_w.size(), o.mhz.size()));
  for (std::size_t k = 0; k < o.mhz.size(); ++k) {
    if (!(o.mhz[k] > 0)) p.fail("opp_mhz", fmt::format("entry {} is {}: clocks must be > 0 MHz", k, o.mhz[k]));
    if (!(o.power_w[k] > 0)) p.fail("opp_power_w", fmt::format("entry {} is {}: powers must be > 0 W", k, o.power_w[k]));
    if (k > 0 && o.power_w[k] < o.power_w[k - 1])
      p.fail("opp_power_w", fmt::format("must not fall as the clock rises (entry {} = {} after {})", k, o.power_w[k],
                                        o.power_w[k - 1]));
    if (k > 0 && !(o.mhz[k] > o.mhz[k - 1]))
      p.fail("opp_mhz", fmt::format("must be strictly ascending (entry {} = {} after {})", k, o.mhz[k], o.mhz[k - 1]));
  }
  return o;
}

ThermalSpec ThermalSpec::from_yaml(const YAML::Node& given, const ConfigSource& source) {
  const YAML::Node root = expand_profile_bases(given, source, "thermal");
  const ParamSchema ps = schema();
  const Params p(root, ps, source, {});
  ThermalSpec t;
  t.junction_capacity_j_per_k = p.real("junction_capacity_j_per_k");
  t.junction_to_skin_k_per_w = p.real("junction_to_skin_k_per_w");
  t.skin_capacity_j_per_k = p.real("skin_capacity_j_per_k");
  t.skin_to_ambient_k_per_w = p.real("skin_to_ambient_k_per_w");
  t.passive_polling_ms = p.real("passive_polling_ms");
  t.schedutil_rate_limit_us = p.real("schedutil_rate_limit_us");
  t.pelt_half_life_ms = p.real("pelt_half_life_ms");
  t.charging_efficiency = p.real("charging_efficiency");
  t.resolved = p.resolved();
  t.resolved.remove("base");

  const YAML::Node units = p.node("units");
  if (units.IsDefined() && !units.IsNull()) {
    if (!units.IsMap()) p.fail("units", "expected a mapping of unit name -> {opp_mhz, opp_power_w}");
    const ParamSchema os = opp_schema();
    for (const auto& kv : units) {
      const std::string name = kv.first.as<std::string>();
      const Params up(kv.second, os, source.child("units").child(name), {});
      t.units.emplace_back(name, parse_points(up));
      t.resolved["units"][name] = up.resolved();
    }
  }
  const YAML::Node trips = p.node("trips");
  if (!trips.IsDefined() || trips.IsNull() || !trips.IsSequence())
    p.fail("trips", "expected a list of trip points [{sensor, temp_c, hysteresis_c, units}] (an empty list: no trip)");
  const ParamSchema ts = trip_schema();
  YAML::Node resolved_trips(YAML::NodeType::Sequence);
  for (std::size_t i = 0; i < trips.size(); ++i) {
    const Params tp(trips[i], ts, source.child("trips").element(i), {});
    TripPoint trip{tp.text("sensor") == "junction" ? Sensor::junction : Sensor::skin, tp.real("temp_c"),
                   tp.real("hysteresis_c"), tp.text_list("units")};
    for (const std::string& u : trip.units)
      if (!t.points_of(u))
        tp.fail("units", fmt::format("unit '{}' has no operating points under thermal.units: a trip can only cap a "
                                     "unit whose clock can change",
                                     u));
    t.trips.push_back(std::move(trip));
    resolved_trips.push_back(tp.resolved());
  }
  t.resolved["trips"] = resolved_trips;
  return t;
}

// ---------------------------------------------------------------------------
// Closed-form RC ladder
// ---------------------------------------------------------------------------
ThermalNetwork::ThermalNetwork(const ThermalSpec& spec)
    : r_js_(spec.junction_to_skin_k_per_w), r_sa_(spec.skin_to_ambient_k_per_w) {
  const double cj = spec.junction_capacity_j_per_k, cs = spec.skin_capacity_j_per_k;
  // dT/dt = A T + b: A's eigenvalues are real and negative (A is similar to a symmetric matrix
  // through the capacities), so the homogeneous part is a sum of two decaying exponentials.
  const double a11 = -1.0 / (cj * r_js_), a12 = 1.0 / (cj * r_js_);
  const double a21 = 1.0 / (cs * r_js_), a22 = -1.0 / (cs * r_js_) - 1.0 / (cs * r_sa_);
  const double tr = a11 + a22, det = a11 * a22 - a12 * a21;
  const double disc = std::sqrt(std::max(0.0, tr * tr / 4 - det));
  lambda_[0] = tr / 2 + disc;  // slower (closer to zero)
  lambda_[1] = tr / 2 - disc;
  for (int c = 0; c < 2; ++c) {  // (A - l I) v = 0 with v = (a12, l - a11): a12 > 0 always
    vec_[0][c] = a12;
    vec_[1][c] = lambda_[c] - a11;
  }
  const double d = vec_[0][0] * vec_[1][1] - vec_[0][1] * vec_[1][0];
  inv_[0][0] = vec_[1][1] / d;
  inv_[0][1] = -vec_[0][1] / d;
  inv_[1][0] = -vec_[1][0] / d;
  inv_[1][1] = vec_[0][0] / d;
}

ThermalNetwork::State ThermalNetwork::steady(const Input& in) const {
  const double skin = in.ambient_c + (in.soc_w + in.skin_w) * r_sa_;
  return State{skin + in.soc_w * r_js_, skin};
}

ThermalNetwork::State ThermalNetwork::advance(const State& s, const Input& in, double seconds) const {
  const State ss = steady(in);
  const double d0 = s.junction_c - ss.junction_c, d1 = s.skin_c - ss.skin_c;
  const double m0 = (inv_[0][0] * d0 + inv_[0][1] * d1) * std::exp(lambda_[0] * seconds);
  const double m1 = (inv_[1][0] * d0 + inv_[1][1] * d1) * std::exp(lambda_[1] * seconds);
  return State{ss.junction_c + vec_[0][0] * m0 + vec_[0][1] * m1, ss.skin_c + vec_[1][0] * m0 + vec_[1][1] * m1};
}

namespace {
struct CrossingProblem {
  const ThermalNetwork* net;
  ThermalNetwork::State start;
  ThermalNetwork::Input in;
  Sensor sensor;
  double temp_c;
};
double excess_at(double t, void* params) {
  const auto* c = static_cast<const CrossingProblem*>(params);
  return ThermalNetwork::sensor_c(c->net->advance(c->start, c->in, t), c->sensor) - c->temp_c;
}
}  // namespace

std::optional<double> ThermalNetwork::first_rise_to(const State& s, const Input& in, Sensor sensor, double temp_c,
                                                    double horizon_s) const {
  if (sensor_c(s, sensor) >= temp_c) return 0.0;
  // Bound: the sensor is its steady value plus two decaying modes; if even their full amplitudes
  // cannot reach the trip, it is never reached (the common case: no search at all).
  const State ss = steady(in);
  const double d0 = s.junction_c - ss.junction_c, d1 = s.skin_c - ss.skin_c;
  const int row = sensor == Sensor::junction ? 0 : 1;
  const double amp0 = vec_[row][0] * (inv_[0][0] * d0 + inv_[0][1] * d1);
  const double amp1 = vec_[row][1] * (inv_[1][0] * d0 + inv_[1][1] * d1);
  if (sensor_c(ss, sensor) + std::max(0.0, amp0) + std::max(0.0, amp1) < temp_c) return std::nullopt;
  // Bracket the first crossing on a geometric grid from the fast mode's scale to the horizon (a
  // sum of two exponentials has at most one extremum, so a 1.2x grid cannot step over a crossing
  // and the return below it), then refine with Brent's method.
  CrossingProblem problem{this, s, in, sensor, temp_c};
  double lo = 0, t = std::min(horizon_s, 1e-3 / std::max(1.0, -lambda_[1]));
  std::optional<double> hi;
  while (true) {
    if (excess_at(t, &problem) >= 0) {
      hi = t;
      break;
    }
    if (t >= horizon_s) break;
    lo = t;
    t = std::min(horizon_s, t * 1.2);
  }
  if (!hi) return std::nullopt;
  gsl_function f{&excess_at, &problem};
  std::unique_ptr<gsl_root_fsolver, void (*)(gsl_root_fsolver*)> solver(gsl_root_fsolver_alloc(gsl_root_fsolver_brent),
                                                                         &gsl_root_fsolver_free);
  if (excess_at(lo, &problem) >= 0) return lo;
  gsl_root_fsolver_set(solver.get(), &f, lo, *hi);
  for (int i = 0; i < 100; ++i) {
    gsl_root_fsolver_iterate(solver.get());
    const double a = gsl_root_fsolver_x_lower(solver.get()), b = gsl_root_fsolver_x_upper(solver.get());
    if (gsl_root_test_interval(a, b, 1e-9, 0) == GSL_SUCCESS) break;
  }
  // The upper end of the bracket: at or just past the crossing, never before it.
  return gsl_root_fsolver_x_upper(solver.get());
}

}  // namespace mobisim::devices
