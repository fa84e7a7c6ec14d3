#include "devices/power_manager.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "devices/device.h"
#include "sim/error.h"

namespace mobisim::devices {

// ---------------------------------------------------------------------------
// Options (the experiment's `thermal:` key)
// ---------------------------------------------------------------------------
ParamSchema SustainedOptions::schema() {
  ParamSchema s;
  s.real("ambient_c", 25.0, "ambient (still air) temperature").with_unit("C");
  s.text("start", std::string("cold"), "starting state: cold (at ambient) or warm (junction and skin at warm_c)")
      .in({"cold", "warm"});
  s.real("warm_c", 40.0, "junction and skin temperature of a warm start (a phone just used for minutes)").with_unit(
      "C");
  s.text("governor", std::string("schedutil"), "frequency governor of every unit with operating points")
      .in({"schedutil", "performance", "powersave", "fixed"});
  s.node("fixed_mhz", "governor fixed: clock per unit, e.g. {cpu: 1800} (the highest point at or below it)");
  s.boolean("sustained_performance", false,
            "Android's sustained-performance mode: cap each unit at the highest point whose steady state, busy "
            "alone at ambient, stays below every trip");
  s.real("background_headroom_c", 5.0, "idle-time work waits until every sensor is this far below its lowest trip")
      .non_negative()
      .with_unit("C");
  s.real("series_interval_s", 1.0, "shortest time between two samples of the series (clock and trip changes are "
                                   "always sampled)")
      .positive()
      .with_unit("s");
  s.node("battery", "{start_percent, low_percent, charging: [{start_s, end_s, power_w}]}");
  return s;
}

static ParamSchema battery_options_schema() {
  ParamSchema s;
  s.real("start_percent", 100.0, "state of charge at time 0").range(0, 100).with_unit("%");
  s.real("low_percent", 15.0, "below this (and not charging) the battery is low").range(0, 100).with_unit("%");
  s.node("charging", "charging windows: [{start_s, end_s, power_w}]");
  s.real("trace_charging_w", 0.0, "charge in the workload trace's charging idle windows at this power (0: no)")
      .non_negative()
      .with_unit("W");
  return s;
}

static ParamSchema charging_schema() {
  ParamSchema s;
  s.real("start_s", std::nullopt, "window start").non_negative().with_unit("s");
  s.real("end_s", std::nullopt, "window end").non_negative().with_unit("s");
  s.real("power_w", std::nullopt, "charger power delivered to the phone").positive().with_unit("W");
  return s;
}

SustainedOptions SustainedOptions::from_yaml(const YAML::Node& node, const ConfigSource& source) {
  SustainedOptions o;
  if (!node.IsDefined() || node.IsNull()) {  // absent: constant peak clocks, recorded as such
    o.resolved = YAML::Node("none");
    return o;
  }
  if (node.IsScalar()) {
    if (node.Scalar() == "none") {
      o.resolved = YAML::Node("none");
      return o;
    }
    if (node.Scalar() != "profile")
      throw ConfigError(fmt::format("{}: unknown thermal setting '{}' (expected none, profile, or a mapping of "
                                    "{{ambient_c, start, governor, ...}})",
                                    source.where(node), node.Scalar()));
  } else if (!node.IsMap()) {
    throw ConfigError(fmt::format("{}: expected none, profile, or a mapping of thermal options", source.where(node)));
  }
  const YAML::Node given = node.IsMap() ? node : YAML::Node(YAML::NodeType::Map);
  const ParamSchema ps = schema();
  const Params p(given, ps, source, {});
  o.enabled = true;
  o.ambient_c = p.real("ambient_c");
  o.start = p.text("start");
  o.warm_c = p.real("warm_c");
  o.governor = p.text("governor");
  o.sustained_performance = p.boolean("sustained_performance");
  o.background_headroom_c = p.real("background_headroom_c");
  o.series_interval_s = p.real("series_interval_s");
  o.resolved = p.resolved();
  if (const YAML::Node f = p.node("fixed_mhz"); f.IsDefined() && !f.IsNull()) {
    if (!f.IsMap()) p.fail("fixed_mhz", "expected a mapping unit -> MHz, e.g. {cpu: 1800}");
    for (const auto& kv : f) {
      const std::string unit = kv.first.as<std::string>();
      double mhz = 0;
      try {
        mhz = kv.second.as<double>();
      } catch (const YAML::Exception&) {
        p.fail("fixed_mhz", fmt::format("'{}' is not a number of MHz", unit));
      }
      if (!(mhz > 0)) p.fail("fixed_mhz", fmt::format("'{}' must be > 0 MHz", unit));
      o.fixed_mhz[unit] = mhz;
    }
    o.resolved["fixed_mhz"] = yaml_clone(f);
  }
  if (o.governor == "fixed" && o.fixed_mhz.empty())
    p.fail("fixed_mhz", "governor: fixed needs a clock per unit, e.g. fixed_mhz: {cpu: 1800}");
  const YAML::Node b = p.node("battery");
  const ParamSchema bs = battery_options_schema();
  const Params bp(b.IsDefined() && !b.IsNull() ? b : YAML::Node(YAML::NodeType::Map), bs, source.child("battery"), {});
  o.battery_start_percent = bp.real("start_percent");
  o.battery_low_percent = bp.real("low_percent");
  o.trace_charging_w = bp.real("trace_charging_w");
  YAML::Node rb = bp.resolved();
  if (const YAML::Node c = bp.node("charging"); c.IsDefined() && !c.IsNull()) {
    if (!c.IsSequence()) bp.fail("charging", "expected a list of windows [{start_s, end_s, power_w}]");
    const ParamSchema cs = charging_schema();
    YAML::Node rc(YAML::NodeType::Sequence);
    for (std::size_t i = 0; i < c.size(); ++i) {
      const Params cp(c[i], cs, source.child("battery").child("charging").element(i), {});
      ChargingWindow w{cp.real("start_s"), cp.real("end_s"), cp.real("power_w")};
      if (!(w.end_s > w.start_s)) cp.fail("end_s", "must be after start_s");
      if (!o.charging.empty() && w.start_s < o.charging.back().end_s)
        cp.fail("start_s", "windows must be in time order and must not overlap");
      o.charging.push_back(w);
      rc.push_back(cp.resolved());
    }
    rb["charging"] = rc;
  }
  if (o.trace_charging_w > 0 && !o.charging.empty())
    bp.fail("trace_charging_w", "charge either in the trace's windows or in the listed charging windows, not both");
  o.resolved["battery"] = rb;
  return o;
}

void SustainedOptions::check_against(const DeviceProfile& profile, const std::string& where) const {
  if (!enabled) return;
  if (!profile.thermal)
    throw ConfigError(fmt::format(
        "{}: device profile '{}' ({}) has no thermal model ({}); set thermal: none to run every unit at its peak "
        "clock and constant power, or give the profile a thermal section (configs/thermal/)",
        where, profile.name, profile.origin,
        profile.thermal_declared_none ? "it declares thermal: none" : "no thermal section"));
  for (const auto& [unit, mhz] : fixed_mhz) {
    const OperatingPoints* pts = profile.thermal->points_of(unit);
    if (!pts)
      throw ConfigError(fmt::format("{}.fixed_mhz: unit '{}' of device '{}' has no operating points (thermal.units)",
                                    where, unit, profile.name));
    if (!pts->highest_at_most(mhz))
      throw ConfigError(fmt::format("{}.fixed_mhz: {} MHz is below the lowest operating point of '{}' ({} MHz)", where,
                                    mhz, unit, pts->mhz.front()));
  }
  if (governor == "fixed")
    for (const auto& [unit, pts] : profile.thermal->units)
      if (!fixed_mhz.count(unit))
        throw ConfigError(fmt::format("{}.fixed_mhz: governor fixed needs a clock for unit '{}' of device '{}'", where,
                                      unit, profile.name));
  if ((!charging.empty() || trace_charging_w > 0 || battery_start_percent != 100) && !profile.battery)
    throw ConfigError(fmt::format("{}.battery: device '{}' has no battery section", where, profile.name));
}

void require_thermal_none(const Params& p, const std::string& driver) {
  if (SustainedOptions::from_yaml(p.node("thermal"), p.source_of("thermal")).enabled)
    p.fail("thermal", fmt::format("the {} driver keeps every unit at its peak clock (the document's short-burst "
                                  "measurements): only thermal: none is accepted; sustained use runs through impl: "
                                  "phone (experiments/sustained/)",
                                  driver));
}

// ---------------------------------------------------------------------------
// Runtime
// ---------------------------------------------------------------------------
PowerManager::PowerManager(sim::Simulator& sim, const DeviceProfile& profile, const SustainedOptions& options,
                           sim::SharedBandwidth& bus, sim::StatGroup& stats, sim::TimelineProcess* timeline)
    : sim_(sim),
      spec_(*profile.thermal),
      net_(spec_),
      options_(options),
      bus_(bus),
      timeline_(timeline),
      track_(profile.name + "/thermal"),
      base_w_(profile.base_power_w) {
  options_.check_against(profile, "thermal");
  battery_capacity_j_ = profile.battery ? profile.battery->joules() : 0;
  battery_j_ = battery_capacity_j_ * options_.battery_start_percent / 100.0;
  battery_min_j_ = battery_j_;
  auto add_unit = [&](const std::string& name) {
    UnitState u;
    u.name = name;
    std::tie(u.active_w, u.idle_w) = profile.unit_power_w(name, "the power manager");
    u.points = spec_.points_of(name);
    if (u.points) {
      u.clock = bus_.add_clock();
      u.static_cap = u.points->top();
      u.cap = u.points->top();
      u.point = u.points->top();
    }
    index_[name] = units_.size();
    units_.push_back(u);
  };
  for (const auto& [name, spec] : profile.compute) add_unit(name);
  if (profile.npu && !profile.compute.count("npu")) add_unit("npu");
  for (const auto& [name, pts] : spec_.units)
    if (!index_.count(name))
      throw ConfigError(fmt::format("device profile '{}': thermal.units names '{}', which is not a unit of the device",
                                    profile.name, name));
  if (options_.start == "warm")
    state_ = {options_.warm_c, options_.warm_c};
  else
    state_ = {options_.ambient_c, options_.ambient_c};
  peak_junction_c_ = state_.junction_c;
  peak_skin_c_ = state_.skin_c;
  trip_level_.assign(spec_.trips.size(), 0);
  trip_last_c_.assign(spec_.trips.size(), 0);
  throttle_steps_ = &stats.counter("throttle_steps", "1", "times a trip lowered a unit's cap by one point");
  for (UnitState& u : units_) {
    if (!u.points) continue;
    if (options_.sustained_performance) u.static_cap = static_cap_for(u);
    u.cap = u.static_cap;
    set_point(u, wanted_point(u));
  }
  add_charging_windows(options_.charging);
  sample();
  arm_crossing();
}

int PowerManager::clock_of(const std::string& unit) const {
  auto it = index_.find(unit);
  return it == index_.end() ? -1 : units_[it->second].clock;
}

std::vector<std::string> PowerManager::unit_names() const {
  std::vector<std::string> names;
  for (const UnitState& u : units_)
    if (u.points) names.push_back(u.name);
  return names;
}

double PowerManager::unit_mhz(const std::string& unit) const {
  const UnitState& u = units_.at(index_.at(unit));
  return u.points ? u.points->mhz[u.point] : 0.0;
}

double PowerManager::soc_power_w() const {
  double p = base_w_;
  for (const UnitState& u : units_) {
    if (!u.busy) {
      p += u.idle_w;
      continue;
    }
    const double scale = u.points ? u.points->dynamic_scale(u.point) : 1.0;
    p += u.idle_w + (u.active_w - u.idle_w) * scale;
  }
  return p;
}

ThermalNetwork::Input PowerManager::input() const {
  return {soc_power_w(), charger_w_ * (1 - spec_.charging_efficiency), options_.ambient_c};
}

ThermalNetwork::State PowerManager::state_now() const {
  return net_.advance(state_, input(), sim::to_seconds(sim_.now() - since_));
}

double PowerManager::energy_j() const {
  return energy_j_ + soc_power_w() * sim::to_seconds(sim_.now() - since_);
}

double PowerManager::battery_percent() const {
  if (battery_capacity_j_ <= 0) return 0;
  const double dt = sim::to_seconds(sim_.now() - since_);
  const double j = std::clamp(battery_j_ + (charger_w_ * spec_.charging_efficiency - soc_power_w()) * dt, 0.0,
                              battery_capacity_j_);
  return 100.0 * j / battery_capacity_j_;
}

bool PowerManager::background_allowed() const {
  if (battery_low()) return false;
  const ThermalNetwork::State s = state_now();
  for (std::size_t i = 0; i < spec_.trips.size(); ++i) {
    if (trip_level_[i] > 0) return false;
    const TripPoint& t = spec_.trips[i];
    if (ThermalNetwork::sensor_c(s, t.sensor) > t.temp_c - options_.background_headroom_c) return false;
  }
  return true;
}

void PowerManager::advance_to_now() {
  const sim::Time now = sim_.now();
  if (now <= since_) return;
  const double dt = sim::to_seconds(now - since_);
  const double p = soc_power_w();
  energy_j_ += p * dt;
  battery_j_ = std::clamp(battery_j_ + (charger_w_ * spec_.charging_efficiency - p) * dt, 0.0, battery_capacity_j_);
  battery_min_j_ = std::min(battery_min_j_, battery_j_);
  state_ = net_.advance(state_, input(), dt);
  peak_junction_c_ = std::max(peak_junction_c_, state_.junction_c);
  peak_skin_c_ = std::max(peak_skin_c_, state_.skin_c);
  bool throttled = false;
  for (int level : trip_level_) throttled = throttled || level > 0;
  if (throttled) throttled_s_ += dt;
  for (UnitState& u : units_)
    if (u.busy && u.points) {
      u.busy_s += dt;
      u.busy_mhz_s += u.points->mhz[u.point] * dt;
    }
  since_ = now;
}

void PowerManager::set_busy(const std::string& unit, bool busy) {
  auto it = index_.find(unit);
  if (it == index_.end()) return;
  UnitState& u = units_[it->second];
  if (u.busy == busy) return;
  advance_to_now();
  if (u.points) decay_util(u);
  u.busy = busy;
  if (u.points && options_.governor == "schedutil") {
    if (busy) {
      schedutil_update(u);
    } else {
      sim_.cancel(u.ramp);
      u.ramp = {};
    }
  }
  after_change(false);
}

// PELT-like utilisation: rises towards 1 while busy, decays towards 0 while idle, half-life h.
void PowerManager::decay_util(UnitState& u) {
  const double dt = sim::to_seconds(sim_.now() - u.util_since);
  const double keep = std::exp(-std::log(2.0) * dt / (spec_.pelt_half_life_ms * 1e-3));
  u.util = u.busy ? 1 - (1 - u.util) * keep : u.util * keep;
  u.util_since = sim_.now();
}

std::size_t PowerManager::wanted_point(UnitState& u) {
  const OperatingPoints& pts = *u.points;
  std::size_t want = pts.top();
  if (options_.governor == "powersave") {
    want = 0;
  } else if (options_.governor == "fixed") {
    want = *pts.highest_at_most(options_.fixed_mhz.at(u.name));
  } else if (options_.governor == "schedutil") {
    // schedutil: next_freq = 1.25 x max_freq x util, rounded up to an operating point.
    const double target = 1.25 * pts.mhz.back() * u.util;
    want = pts.top();
    for (std::size_t k = 0; k < pts.mhz.size(); ++k)
      if (pts.mhz[k] >= target) {
        want = k;
        break;
      }
  }
  return std::min({want, u.cap, u.static_cap});
}

void PowerManager::set_point(UnitState& u, std::size_t point) {
  if (u.point == point && u.last_change >= 0) return;
  u.point = point;
  u.last_change = sim_.now();
  bus_.set_clock_speed(u.clock, u.points->speed(point));
}

void PowerManager::schedutil_update(UnitState& u) {
  const double rate_limit_s = spec_.schedutil_rate_limit_us * 1e-6;
  const double since_change = sim::to_seconds(sim_.now() - u.last_change);
  if (u.last_change >= 0 && since_change < rate_limit_s) {
    // Too soon after the last change: look again when the rate limit allows.
    wake_schedutil(u, sim::from_seconds(rate_limit_s - since_change));
    return;
  }
  set_point(u, wanted_point(u));
  // While busy the utilisation keeps rising: wake when it reaches the next point's threshold.
  const OperatingPoints& pts = *u.points;
  sim_.cancel(u.ramp);
  u.ramp = {};
  const std::size_t limit = std::min(u.cap, u.static_cap);
  if (u.point >= limit) return;
  const double threshold = pts.mhz[u.point + 1] / (1.25 * pts.mhz.back());
  if (threshold >= 1) return;
  const double half_life_s = spec_.pelt_half_life_ms * 1e-3;
  const double wait_s = std::max(rate_limit_s, half_life_s / std::log(2.0) * std::log((1 - u.util) / (1 - threshold)));
  wake_schedutil(u, std::max<sim::Time>(1, sim::from_seconds(wait_s)));
}

// Re-evaluates unit u's schedutil choice after `delay` while it stays busy (one pending wake per unit).
void PowerManager::wake_schedutil(UnitState& u, sim::Time delay) {
  sim_.cancel(u.ramp);
  const std::size_t i = index_.at(u.name);
  u.ramp = sim_.schedule_daemon_call(sim_.now() + delay, [this, i] {
    UnitState& v = units_[i];
    v.ramp = {};
    if (!v.busy) return;
    advance_to_now();
    decay_util(v);
    schedutil_update(v);
    after_change(false);
  });
}

// The highest point whose steady state with this unit busy alone (the rest idle) at ambient keeps
// every sensor below the lowest trip that watches it.
std::size_t PowerManager::static_cap_for(const UnitState& u) const {
  double others = base_w_;
  for (const UnitState& v : units_)
    if (&v != &u) others += v.idle_w;
  for (std::size_t k = u.points->mhz.size(); k-- > 0;) {
    const double p = others + u.idle_w + (u.active_w - u.idle_w) * u.points->dynamic_scale(k);
    const ThermalNetwork::State ss = net_.steady({p, 0, options_.ambient_c});
    bool below = true;
    for (const TripPoint& t : spec_.trips) below = below && ThermalNetwork::sensor_c(ss, t.sensor) < t.temp_c;
    if (below) return k;
  }
  return 0;
}

void PowerManager::apply_caps() {
  for (UnitState& u : units_) {
    if (!u.points) continue;
    int level = 0;
    for (std::size_t i = 0; i < spec_.trips.size(); ++i)
      if (std::find(spec_.trips[i].units.begin(), spec_.trips[i].units.end(), u.name) != spec_.trips[i].units.end())
        level = std::max(level, trip_level_[i]);
    u.cap = u.points->top() - std::min<std::size_t>(static_cast<std::size_t>(level), u.points->top());
    const std::size_t want = wanted_point(u);
    if (want != u.point) set_point(u, want);
  }
}

void PowerManager::after_change(bool sample_always) {
  if (!polling_) arm_crossing();
  const double t = sim::to_seconds(sim_.now());
  if (sample_always || last_sample_s_ < 0 || t - last_sample_s_ >= options_.series_interval_s) sample();
}

// Predicts the first trip the current power will reach and wakes then (nothing when none will).
void PowerManager::arm_crossing() {
  sim_.cancel(crossing_);
  crossing_ = {};
  if (spec_.trips.empty()) return;
  const double horizon_s = 50 * net_.slowest_time_constant_s();
  std::optional<double> first;
  for (const TripPoint& t : spec_.trips) {
    const auto at = net_.first_rise_to(state_, input(), t.sensor, t.temp_c, horizon_s);
    if (at && (!first || *at < *first)) first = at;
  }
  if (!first) return;
  const sim::Time at = since_ + std::max<sim::Time>(0, static_cast<sim::Time>(std::ceil(*first * 1e9)));
  crossing_ = sim_.schedule_daemon_call(std::max(at, sim_.now()), [this] {
    crossing_ = {};
    advance_to_now();
    for (std::size_t i = 0; i < spec_.trips.size(); ++i)
      trip_last_c_[i] = ThermalNetwork::sensor_c(state_, spec_.trips[i].sensor) - 1e-9;  // reached from below
    polling_ = true;
    poll();
  });
}

// One period of the step-wise governor: above a trip and still rising, one point lower; below
// temp - hysteresis, one point higher. Polls on while any trip is engaged or exceeded.
void PowerManager::poll() {
  poll_ = {};
  advance_to_now();
  bool keep_polling = false;
  for (std::size_t i = 0; i < spec_.trips.size(); ++i) {
    const TripPoint& t = spec_.trips[i];
    const double c = ThermalNetwork::sensor_c(state_, t.sensor);
    int max_level = 0;
    for (const std::string& name : t.units)
      max_level = std::max(max_level, static_cast<int>(units_[index_.at(name)].points->top()));
    if (c >= t.temp_c && c > trip_last_c_[i] && trip_level_[i] < max_level) {
      ++trip_level_[i];
      throttle_steps_->add(1);
    } else if (c < t.temp_c - t.hysteresis_c && trip_level_[i] > 0) {
      --trip_level_[i];
    }
    trip_last_c_[i] = c;
    keep_polling = keep_polling || trip_level_[i] > 0 || c >= t.temp_c;
  }
  apply_caps();
  polling_ = keep_polling;
  if (polling_)
    poll_ = sim_.schedule_daemon_call(sim_.now() + sim::from_seconds(spec_.passive_polling_ms * 1e-3),
                                      [this] { poll(); });
  after_change(true);
}

void PowerManager::add_charging_windows(const std::vector<ChargingWindow>& windows) {
  for (const ChargingWindow& w : windows) {
    if (w.end_s <= sim::to_seconds(sim_.now())) continue;
    sim_.schedule_daemon_call(std::max(sim_.now(), sim::from_seconds(w.start_s)),
                              [this, w] { start_charging(w.power_w); });
    sim_.schedule_daemon_call(sim::from_seconds(w.end_s), [this] { stop_charging(); });
  }
}

void PowerManager::start_charging(double power_w) {
  advance_to_now();
  charger_w_ = power_w;
  after_change(true);
}

void PowerManager::stop_charging() {
  advance_to_now();
  charger_w_ = 0;
  after_change(true);
}

void PowerManager::sample() {
  SustainedSample s;
  s.t_s = sim::to_seconds(sim_.now());
  const ThermalNetwork::State st = state_now();
  s.junction_c = st.junction_c;
  s.skin_c = st.skin_c;
  s.power_w = soc_power_w();
  s.battery_percent = battery_percent();
  s.charging = charging();
  for (int level : trip_level_) s.throttled = s.throttled || level > 0;
  for (const UnitState& u : units_)
    if (u.points) s.mhz.push_back(u.points->mhz[u.point]);
  last_sample_s_ = s.t_s;
  if (timeline_) {
    timeline_->counter(track_, "junction_c", sim_.now(), s.junction_c);
    timeline_->counter(track_, "skin_c", sim_.now(), s.skin_c);
    timeline_->counter(track_, "power_w", sim_.now(), s.power_w);
    if (battery_capacity_j_ > 0) timeline_->counter(track_, "battery_percent", sim_.now(), s.battery_percent);
    std::size_t k = 0;
    for (const UnitState& u : units_)
      if (u.points) timeline_->counter(track_, u.name + "_mhz", sim_.now(), s.mhz[k++]);
  }
  series_.push_back(std::move(s));
}

void PowerManager::finish() {
  advance_to_now();
  if (series_.empty() || series_.back().t_s < sim::to_seconds(sim_.now())) sample();
}

SustainedSummary PowerManager::summary() const {
  SustainedSummary s;
  const ThermalNetwork::State st = state_now();
  s.peak_junction_c = std::max(peak_junction_c_, st.junction_c);
  s.peak_skin_c = std::max(peak_skin_c_, st.skin_c);
  s.time_throttled_s = throttled_s_;
  s.energy_j = energy_j();
  s.battery_end_percent = battery_percent();
  s.battery_min_percent =
      battery_capacity_j_ > 0 ? std::min(100.0 * battery_min_j_ / battery_capacity_j_, s.battery_end_percent) : 0;
  for (const UnitState& u : units_)
    if (u.points) s.mean_busy_mhz.emplace_back(u.name, u.busy_s > 0 ? u.busy_mhz_s / u.busy_s : 0.0);
  return s;
}

}  // namespace mobisim::devices
