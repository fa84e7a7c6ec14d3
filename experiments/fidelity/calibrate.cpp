#include "experiments/fidelity/calibrate.h"
#include "experiments/fidelity/sustained_probe.h"
#include "sim/builtin_configs.h"

#include <fmt/format.h>
#include <gsl/gsl_blas.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <gsl/gsl_vector.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <unistd.h>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/experiment.h"
#include "sim/atomic_file.h"
#include "sim/error.h"
#include "sim/params.h"
#include "sim/version.h"

namespace mobisim::experiments::fidelity {
namespace {
// A device.thermal.* key whose profile is a thermal preset (configs/thermal/), not a device profile.
bool thermal_preset_field(const FreeParameter& f) {
  if (!f.key.starts_with("device.thermal.")) return false;
  std::string text, origin;
  return !find_config("devices", f.profile, text, origin) && find_config("thermal", f.profile, text, origin);
}
}  // namespace

namespace {

namespace fs = std::filesystem;

std::string value_text(double v) { return fmt::format("{:.6g}", v); }

// One fit in progress: what GSL's callback needs.
struct Problem {
  const CalibrationSpec* spec = nullptr;
  std::vector<Point> points;            // the calibration points (copies, so evaluations own them)
  const CalibrateOptions* options = nullptr;
  std::vector<std::size_t> free;        // indices of the parameters being fitted
  std::vector<double> fixed;            // every parameter's value (the free ones overwritten per call)
  std::size_t evaluations = 0;
  std::string failure;                  // a run failure stops the fit
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  std::vector<double> values_of(const gsl_vector* u) {
    std::vector<double> v = fixed;
    for (std::size_t j = 0; j < free.size(); ++j) {
      const FreeParameter& p = spec->parameters[free[j]];
      v[free[j]] = std::clamp(std::exp(gsl_vector_get(u, j)), p.lo, p.hi);
    }
    return v;
  }

  std::vector<double> simulate(const std::vector<double>& values) {
    ++evaluations;
    EvaluateOptions eo = options->evaluate;
    eo.candidates = candidates_for(*spec, values, points);
    eo.runs.quiet = true;
    const auto ev = evaluate(points, eo);
    std::vector<double> out;
    for (const auto& e : ev) {
      if (e.status != "ok") throw Error(fmt::format("calibration point {}: {}", e.point->id, e.error));
      out.push_back(e.simulated);
    }
    return out;
  }
};

double log_residual(double simulated, double reference) {
  // A non-positive simulated value is far from any positive published value, not a NaN.
  return simulated > 0 ? std::log(simulated / reference) : 50.0;
}

int residuals_cb(const gsl_vector* u, void* data, gsl_vector* f) {
  auto* pb = static_cast<Problem*>(data);
  try {
    const auto sim = pb->simulate(pb->values_of(u));
    for (std::size_t i = 0; i < sim.size(); ++i) gsl_vector_set(f, i, log_residual(sim[i], pb->points[i].reference()));
    return GSL_SUCCESS;
  } catch (const Error& e) {
    pb->failure = e.what();
    return GSL_EBADFUNC;
  }
}

void progress_cb(const std::size_t iter, void* data, const gsl_multifit_nlinear_workspace* w) {
  auto* pb = static_cast<Problem*>(data);
  const gsl_vector* f = gsl_multifit_nlinear_residual(w);
  const gsl_vector* x = gsl_multifit_nlinear_position(w);
  double chi = 0;
  gsl_blas_ddot(f, f, &chi);
  std::vector<std::string> vals;
  std::string state = fmt::format("# mobisim calibrate: the fit in progress (a rerun with the same --runs folder reuses\n"
                                  "# every candidate run already made, so an interrupted fit resumes where it stopped)\n"
                                  "iteration: {}\ncost: {:.6g}\nevaluations: {}\nvalues:\n",
                                  iter, 0.5 * chi, pb->evaluations);
  for (std::size_t j = 0; j < pb->free.size(); ++j) {
    const FreeParameter& f = pb->spec->parameters[pb->free[j]];
    const std::string name = f.profile.empty() ? f.key : f.profile + ":" + f.key;
    const std::string value = value_text(std::exp(gsl_vector_get(x, j)));
    vals.push_back(name + "=" + value);
    state += fmt::format("  \"{}\": {}\n", name, value);
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - pb->started).count();
  const std::size_t max_iter = pb->options->max_iterations;
  const double left = iter + 1 < max_iter ? elapsed / static_cast<double>(iter + 1) * static_cast<double>(max_iter - iter - 1) : 0.0;
  std::cerr << fmt::format("[calibrate] iteration {} of at most {}: cost {:.4g} ({} runs, {:.0f} s; at most about {:.0f} s "
                           "left): {}\n",
                           iter + 1, max_iter, 0.5 * chi, pb->evaluations, elapsed, left, fmt::join(vals, ", "));
  if (!pb->options->state_file.empty()) {
    try {
      create_dirs(fs::path(pb->options->state_file).parent_path().string());
      write_file_atomic(pb->options->state_file, state);
    } catch (const Error& e) {
      std::cerr << "[calibrate] warning: state not written: " << e.what() << "\n";
    }
  }
}

bool selected(const FreeParameter& p, const std::vector<std::string>& only) {
  if (only.empty()) return true;
  for (const auto& o : only)
    if (o == p.key || o == p.profile + ":" + p.key) return true;
  return false;
}

}  // namespace

CalibrationSpec CalibrationSpec::load(const std::string& path) {
  const YAML::Node root = load_yaml_file(path);
  ConfigSource src{std::make_shared<std::string>(path), "", nullptr};
  ParamSchema s;
  s.node("parameters", "the free parameters");
  s.text("notes", std::string(), "free text");
  Params p(root, s, src, {});
  const YAML::Node list = p.node("parameters");
  if (!list.IsDefined() || !list.IsSequence() || list.size() == 0) p.fail("parameters", "expected a non-empty list");
  ParamSchema ps;
  ps.text("key", std::nullopt,
          "device.* or engine.* path inside the profile, or a `-p` path of the points' experiments (experiment.*)");
  ps.text("profile", std::string(), "the device (or engine) profile a device.*/engine.* key belongs to");
  ps.real("initial", std::nullopt, "starting value (grid: one of values)");
  ps.real_list("bounds", std::vector<double>{}, "[low, high] (positive; GSL parameters)");
  ps.real_list("values", std::vector<double>{}, "the values a grid search tries, in order");
  ps.text("method", std::string(), "gsl (continuous, the default) or grid (the default with values)").in({"", "gsl", "grid"});
  ps.text_list("points", std::nullopt, "the calibration points constraining it").non_empty();
  ps.text("why", std::string(), "free text: what the parameter stands for");
  CalibrationSpec spec;
  spec.file = path;
  std::set<std::string> seen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    Params q(list[i], ps, p.source_of("parameters").element(i), {});
    FreeParameter f;
    f.key = q.text("key");
    f.profile = q.text("profile");
    if (f.profile_field() && f.profile.empty()) q.fail("profile", "a device.* or engine.* key needs the profile it belongs to");
    if (!f.profile_field() && !f.profile.empty())
      q.fail("profile", "an experiment key (a `-p` path of the points' experiments) belongs to no profile: drop 'profile'");
    if (!f.profile_field() && f.key.find('.') == std::string::npos)
      q.fail("key", "expected device.*, engine.* or a `-p` path such as experiment.workload.generate.queries.paraphrase_prob");
    f.initial = q.real("initial");
    f.values = q.real_list("values");
    const std::string method = q.text("method");
    f.grid = method == "grid" || (method.empty() && !f.values.empty());
    const auto b = q.real_list("bounds");
    if (f.grid) {
      if (f.values.empty()) q.fail("values", "method grid needs the values to try");
      if (std::find(f.values.begin(), f.values.end(), f.initial) == f.values.end())
        q.fail("initial", "a grid parameter starts at one of its values");
      if (!b.empty() && (b.size() != 2 || !(b[0] < b[1]) ||
                         std::any_of(f.values.begin(), f.values.end(), [&](double v) { return v < b[0] || v > b[1]; })))
        q.fail("bounds", "expected [low, high] holding every value");
      f.lo = *std::min_element(f.values.begin(), f.values.end());
      f.hi = *std::max_element(f.values.begin(), f.values.end());
    } else {
      if (!f.values.empty()) q.fail("values", "method gsl searches inside bounds: drop values or say method: grid");
      if (b.size() != 2 || !(b[0] > 0) || !(b[0] < b[1])) q.fail("bounds", "expected [low, high] with 0 < low < high");
      f.lo = b[0];
      f.hi = b[1];
      if (f.initial < f.lo || f.initial > f.hi) q.fail("initial", "must lie within bounds");
    }
    f.points = q.text_list("points");
    // An experiment key may be listed once per experiment it is fitted in (check_calibration: the
    // experiments of its points differ), e.g. one workload key per named workload config.
    if (!seen.insert(f.profile + ":" + f.key + (f.profile_field() ? "" : ":" + fmt::format("{}", fmt::join(f.points, ",")))).second)
      q.fail("key", f.profile.empty() ? fmt::format("{} is listed twice", f.key)
                                      : fmt::format("{} of {} is listed twice", f.key, f.profile));
    spec.parameters.push_back(std::move(f));
  }
  return spec;
}

std::vector<std::string> parameters_of_profiles(const CalibrationSpec& spec, const std::vector<std::string>& profiles) {
  std::vector<std::string> only;
  for (const auto& name : profiles) {
    const std::size_t before = only.size();
    for (const auto& f : spec.parameters)
      if (!f.profile.empty() && f.profile == name) only.push_back(f.profile + ":" + f.key);
    if (only.size() == before)
      throw UsageError(fmt::format("{}: no free parameter belongs to profile '{}' (expected the `profile:` of one of its "
                                   "parameters)", spec.file, name));
  }
  return only;
}

CalibrationSpec CalibrationSpec::restricted_to(const std::vector<Point>& registry) const {
  std::set<std::string> ids;
  for (const auto& p : registry) ids.insert(p.id);
  CalibrationSpec out;
  out.file = file;
  for (FreeParameter f : parameters) {
    std::erase_if(f.points, [&](const std::string& id) { return !ids.count(id); });
    if (!f.points.empty()) out.parameters.push_back(std::move(f));
  }
  return out;
}

std::vector<std::string> check_calibration(const CalibrationSpec& spec, const std::vector<Point>& registry) {
  std::vector<std::string> problems;
  std::map<std::string, const Point*> by_id;
  for (const auto& p : registry) by_id[p.id] = &p;
  std::set<std::string> covered;
  for (const auto& f : spec.parameters) {
    for (const auto& id : f.points) {
      auto it = by_id.find(id);
      if (it == by_id.end()) {
        problems.push_back(fmt::format("{}{}: no registry point '{}'", f.key, f.profile.empty() ? "" : " (" + f.profile + ")", id));
        continue;
      }
      const Point& p = *it->second;
      if (!p.calibration()) {
        problems.push_back(fmt::format("{}{} would be fitted to validation point {}", f.key,
                                       f.profile.empty() ? "" : " (" + f.profile + ")", id));
        continue;
      }
      if (std::find(p.fitted.begin(), p.fitted.end(), f.key) == p.fitted.end())
        problems.push_back(fmt::format("calibration point {} does not list {} in fitted", id, f.key));
      covered.insert(id);
    }
  }
  for (const auto& p : registry)
    if (p.calibration() && !covered.count(p.id))
      problems.push_back(fmt::format("calibration point {} is fitted by no parameter of {}", p.id, spec.file));
  // The reverse: every parameter a calibration point names in `fitted` lists that point in the spec, so
  // the fitted-parameter -> cells map (registry.h fitted_parameter_cells, read from the points' `fitted`)
  // is the fit the spec performs, not a label that outlived it.
  std::set<std::pair<std::string, std::string>> listed;  // (key, point)
  for (const auto& f : spec.parameters)
    for (const auto& id : f.points) listed.emplace(f.key, id);
  for (const auto& p : registry)
    if (p.calibration())
      for (const auto& key : p.fitted)
        if (!listed.count({key, p.id}))
          problems.push_back(fmt::format("calibration point {} names {} in fitted, but no parameter {} of {} lists it",
                                         p.id, key, key, spec.file));
  // One experiment key listed twice must be fitted in different experiments: in one run the two
  // candidates would both be applied to the same key.
  std::map<std::string, std::string> key_experiment_owner;  // key + experiment -> first point
  for (const auto& f : spec.parameters) {
    if (f.profile_field()) continue;
    std::set<std::string> experiments;
    for (const auto& id : f.points)
      if (by_id.count(id)) experiments.insert(by_id.at(id)->experiment);
    for (const auto& e : experiments) {
      const auto [it, fresh] = key_experiment_owner.emplace(f.key + "\n" + e, f.points.front());
      if (!fresh && it->second != f.points.front())
        problems.push_back(fmt::format("{} is listed twice for experiment {} (points {} and {})", f.key, e, it->second,
                                       f.points.front()));
    }
  }
  return problems;
}

namespace {
// The fitted points a parameter's candidates reach: its own points, and every other point of the same
// experiments (a profile value or an experiment key changes that whole run), each with the `-p` text
// that carries the candidate there. A profile field goes where the profile sits in the run of its own
// point of that experiment (device_at / engine_at), not where the receiving point's own profile sits:
// one run can hold several devices.
std::string without_value(const std::string& assignment) { return assignment.substr(0, assignment.rfind('=')); }
struct Receiver {
  std::string id;
  std::string key;  // the candidate's key, as written for that point
};
// True when `p` is an on-device probe that reads the profile `f` belongs to: a probe has no
// experiment, so it receives the candidate through its own device / engine profile.
bool probe_reads_profile(const Point& p, const FreeParameter& f) {
  if (!f.profile_field() || !p.probe.IsMap() || !p.experiment.empty()) return false;
  const bool device = f.key.starts_with("device.");
  const YAML::Node name = p.probe[device ? "device" : "engine"];
  // A field of a thermal preset (configs/thermal/<profile>.yaml, key device.thermal.*): every probe whose
  // phone takes its thermal: section from that preset reads it.
  // (Only a probe that runs the thermal model: the others read no thermal: field.)
  if (thermal_preset_field(f))
    return p.probe["impl"].IsDefined() && p.probe["impl"].Scalar() == "sustained" && name.IsDefined() &&
           name.IsScalar() && ::mobisim::fidelity::device_thermal_inherits_from(name.Scalar(), f.profile);
  if (!device && !name.IsDefined()) return devices::profile_inherits_from("engines", devices::kDefaultEngine, f.profile);
  if (!name.IsDefined() || !name.IsScalar()) return false;
  return devices::profile_inherits_from(device ? "devices" : "engines", name.as<std::string>(), f.profile);
}
std::vector<Receiver> receivers_of(const FreeParameter& f, const std::vector<Point>& points) {
  std::vector<Receiver> out;
  for (const auto& id : f.points) out.push_back({id, f.key});
  const auto own = [&](const Point& p) { return std::find(f.points.begin(), f.points.end(), p.id) != f.points.end(); };
  for (const auto& p : points)
    if (!own(p) && probe_reads_profile(p, f)) out.push_back({p.id, f.key});
  std::map<std::string, std::string> key_in_experiment;  // experiment -> key resolved in it
  for (const auto& p : points)
    if (own(p) && !p.experiment.empty() && !key_in_experiment.count(p.experiment))
      key_in_experiment[p.experiment] = f.profile_field() ? without_value(experiment_overrides(p, {f.key + "=0"}).front()) : f.key;
  for (const auto& p : points)
    if (!own(p) && key_in_experiment.count(p.experiment)) out.push_back({p.id, key_in_experiment.at(p.experiment)});
  return out;
}
std::vector<std::string> receivers(const FreeParameter& f, const std::vector<Point>& points) {
  std::vector<std::string> ids;
  for (const auto& r : receivers_of(f, points)) ids.push_back(r.id);
  return ids;
}
}  // namespace

PointOverrides candidates_for(const CalibrationSpec& spec, const std::vector<double>& values,
                              const std::vector<Point>& points) {
  PointOverrides out;
  for (std::size_t j = 0; j < spec.parameters.size(); ++j)
    for (const auto& r : receivers_of(spec.parameters[j], points))
      out[r.id].push_back(r.key + "=" + value_text(values[j]));
  return out;
}

namespace {

double cost_of(const std::vector<double>& simulated, const std::vector<Point>& points) {
  double c = 0;
  for (std::size_t i = 0; i < simulated.size(); ++i) c += 0.5 * std::pow(log_residual(simulated[i], points[i].reference()), 2);
  return c;
}

// One GSL fit of the continuous parameters pb.free, the others held at `start`; returns the fitted
// values (every parameter) and adds its iterations and stopping reason to `r`.
std::vector<double> fit_continuous(Problem& pb, const std::vector<double>& start, const CalibrateOptions& o, FitResult& r) {
  pb.fixed = start;
  const std::size_t n = pb.points.size(), p = pb.free.size();
  gsl_multifit_nlinear_fdf fdf{};
  fdf.f = residuals_cb;
  fdf.df = nullptr;   // finite differences
  fdf.fvv = nullptr;
  fdf.n = n;
  fdf.p = p;
  fdf.params = &pb;
  gsl_multifit_nlinear_parameters fp = gsl_multifit_nlinear_default_parameters();
  fp.h_df = 1e-3;  // simulated times are quantised (integer ns): a step well above that
  std::unique_ptr<gsl_multifit_nlinear_workspace, void (*)(gsl_multifit_nlinear_workspace*)> w(
      gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &fp, n, p), gsl_multifit_nlinear_free);
  std::unique_ptr<gsl_vector, void (*)(gsl_vector*)> u(gsl_vector_alloc(p), gsl_vector_free);
  for (std::size_t j = 0; j < p; ++j) gsl_vector_set(u.get(), j, std::log(start[pb.free[j]]));
  gsl_error_handler_t* old = gsl_set_error_handler_off();
  int info = 0;
  int status = gsl_multifit_nlinear_init(u.get(), &fdf, w.get());
  if (status == GSL_SUCCESS)
    status = gsl_multifit_nlinear_driver(o.max_iterations, 1e-4, 1e-8, 1e-8,
                                         o.evaluate.runs.quiet ? nullptr : progress_cb, &pb, &info, w.get());
  gsl_set_error_handler(old);
  if (!pb.failure.empty()) throw Error("calibration stopped: " + pb.failure);
  // GSL's driver reports a first iteration without progress as GSL_EMAXITER with info GSL_ENOPROG:
  // no trial step from the start lowered the cost, which is not running out of iterations.
  const bool stuck_at_start = status == GSL_EMAXITER && info == GSL_ENOPROG;
  r.status = status == GSL_SUCCESS ? (info == 1 ? "converged (step)" : info == 2 ? "converged (gradient)" : "converged")
             : stuck_at_start
                 ? std::string("stopped: no step from the start lowered the cost (a flat or non-smooth objective "
                               "there: a grid search (method: grid) may do better)")
                 : fmt::format("stopped: {}", gsl_strerror(status));
  r.iterations += gsl_multifit_nlinear_niter(w.get());
  return pb.values_of(gsl_multifit_nlinear_position(w.get()));
}

// The best continuous fit at grid values `values` (or just their cost when nothing is continuous).
std::pair<std::vector<double>, double> best_at(Problem& pb, const std::vector<double>& values, const CalibrateOptions& o,
                                               FitResult& r) {
  if (pb.free.empty()) return {values, cost_of(pb.simulate(values), pb.points)};
  auto fitted = fit_continuous(pb, values, o, r);
  return {fitted, cost_of(pb.simulate(fitted), pb.points)};
}

// Coordinate passes over the grid parameters (indices `grid`): each tries all its values with the
// continuous parameters refitted at each, keeps the lowest cost (ties keep the current value).
std::vector<double> coordinate_search(Problem& pb, const std::vector<std::size_t>& grid, std::vector<double> values,
                                      const CalibrateOptions& o, FitResult& r) {
  auto [current, cost] = best_at(pb, values, o, r);
  for (r.passes = 1; r.passes <= o.max_passes; ++r.passes) {
    bool changed = false;
    for (const std::size_t g : grid) {
      const FreeParameter& f = pb.spec->parameters[g];
      for (const double v : f.values) {
        if (v == current[g]) continue;
        std::vector<double> trial = current;
        trial[g] = v;
        auto [fitted, c] = best_at(pb, trial, o, r);
        if (!o.evaluate.runs.quiet)
          std::cerr << fmt::format("[calibrate] pass {}: {}={}: cost {:.4g} (best {:.4g})\n", r.passes, f.key,
                                   value_text(v), c, cost);
        if (c < cost) {
          current = std::move(fitted);
          cost = c;
          changed = true;
        }
      }
    }
    if (!changed) break;
  }
  r.passes = std::min(r.passes, o.max_passes);
  if (pb.free.empty()) r.status = fmt::format("grid: {} coordinate pass(es)", r.passes);
  else r.status = fmt::format("grid: {} coordinate pass(es); last continuous fit {}", r.passes, r.status);
  return current;
}

}  // namespace

FitResult calibrate(const CalibrationSpec& spec, const std::vector<Point>& registry, const CalibrateOptions& o) {
  if (auto problems = check_calibration(spec, registry); !problems.empty())
    throw ConfigError(fmt::format("{}: {}", spec.file, fmt::join(problems, "; ")));
  Problem pb;
  pb.spec = &spec;
  pb.options = &o;
  std::vector<std::size_t> grid;
  std::set<std::string> ids;
  for (const auto& f : spec.parameters) ids.insert(f.points.begin(), f.points.end());
  // With --only, the points the selected parameters reach (the others' points cannot move).
  std::set<std::string> reached;
  {
    std::vector<Point> all;
    for (const auto& p : registry)
      if (ids.count(p.id)) all.push_back(p);
    for (const auto& f : spec.parameters)
      if (selected(f, o.only))
        for (auto& id : receivers(f, all)) reached.insert(id);
  }
  FitResult r;
  for (const auto& p : registry)
    if (ids.count(p.id) && (o.only.empty() || reached.count(p.id))) {
      pb.points.push_back(p);
      r.points.push_back(&p);  // the caller's registry outlives the result
    }
  for (std::size_t j = 0; j < spec.parameters.size(); ++j) {
    pb.fixed.push_back(spec.parameters[j].initial);
    if (!selected(spec.parameters[j], o.only)) continue;
    (spec.parameters[j].grid ? grid : pb.free).push_back(j);
  }
  if (pb.free.empty() && grid.empty()) throw UsageError("no parameter selected to fit");
  r.free.assign(spec.parameters.size(), false);
  for (auto j : pb.free) r.free[j] = true;
  for (auto j : grid) r.free[j] = true;
  r.initial = pb.fixed;
  r.before = pb.simulate(pb.fixed);
  r.cost_before = cost_of(r.before, pb.points);

  // Parameters whose candidates reach no common point are independent fits: one per connected
  // group, so a grid search never refits unrelated parameters (and GSL fits few at a time).
  std::vector<std::size_t> chosen = pb.free;
  chosen.insert(chosen.end(), grid.begin(), grid.end());
  std::sort(chosen.begin(), chosen.end());
  std::vector<std::set<std::string>> reach;
  for (auto j : chosen) {
    const auto ids_j = receivers(spec.parameters[j], pb.points);
    reach.emplace_back(ids_j.begin(), ids_j.end());
  }
  std::vector<std::size_t> group(chosen.size());
  for (std::size_t a = 0; a < chosen.size(); ++a) group[a] = a;
  for (bool merged = true; merged;) {  // label propagation to the smallest index of each component
    merged = false;
    for (std::size_t a = 0; a < chosen.size(); ++a)
      for (std::size_t b = 0; b < chosen.size(); ++b)
        if (group[b] < group[a] &&
            std::any_of(reach[a].begin(), reach[a].end(), [&](const std::string& id) { return reach[b].count(id) > 0; })) {
          group[a] = group[b];
          merged = true;
        }
  }
  std::vector<double> values = pb.fixed;
  std::vector<std::string> statuses;
  std::size_t passes = 0;
  for (std::size_t g = 0; g < chosen.size(); ++g) {
    if (group[g] != g) continue;
    Problem sub;
    sub.spec = &spec;
    sub.options = &o;
    std::set<std::string> ids_g;
    std::vector<std::size_t> grid_g;
    for (std::size_t a = 0; a < chosen.size(); ++a)
      if (group[a] == g) {
        ids_g.insert(reach[a].begin(), reach[a].end());
        (spec.parameters[chosen[a]].grid ? grid_g : sub.free).push_back(chosen[a]);
      }
    for (const auto& pt : pb.points)
      if (ids_g.count(pt.id)) sub.points.push_back(pt);
    if (sub.points.size() < sub.free.size() + grid_g.size())
      throw ConfigError(fmt::format("{}: {} free parameters but only {} calibration points", spec.file,
                                    sub.free.size() + grid_g.size(), sub.points.size()));
    r.passes = 0;
    values = grid_g.empty() ? fit_continuous(sub, values, o, r) : coordinate_search(sub, grid_g, values, o, r);
    passes = std::max(passes, r.passes);
    pb.evaluations += sub.evaluations;
    if (std::find(statuses.begin(), statuses.end(), r.status) == statuses.end()) statuses.push_back(r.status);
  }
  r.passes = passes;
  r.status = fmt::format("{}", fmt::join(statuses, "; "));
  r.fitted = values;
  // Rounded as written to the profile, then simulated once more: the reported values are exactly
  // what the written profile gives.
  for (auto& v : r.fitted) v = std::stod(value_text(v));
  r.after = pb.simulate(r.fitted);
  r.cost_after = cost_of(r.after, pb.points);
  r.evaluations = pb.evaluations;
  return r;
}

namespace {

// A nested mapping written with comments on its leaves.
struct YamlTree {
  std::string key;                 // this node's name in its parent ("" at the root)
  std::vector<YamlTree> children;  // in insertion order (std::vector allows the incomplete element type)
  std::string value, comment;
  YamlTree& child(const std::string& k) {
    for (auto& t : children)
      if (t.key == k) return t;
    children.push_back(YamlTree{});
    children.back().key = k;
    return children.back();
  }
  void write(std::string& out, int indent) const {
    for (const auto& t : children) {
      out.append(static_cast<std::size_t>(indent), ' ').append(t.key).append(":");
      if (t.children.empty()) {
        out.append(" ").append(t.value);
        if (!t.comment.empty()) out.append("   # ").append(t.comment);
        out.append("\n");
      } else {
        out.append("\n");
        t.write(out, indent + 2);
      }
    }
  }
};

}  // namespace

namespace {

// Where a fitted value is written: the file (relative to the output folder), its `base:` (or ""),
// what it is for the header, and the key's steps inside it.
struct Target {
  std::string file, base, what;
  std::vector<std::string> steps;
};

Target profile_target(const FreeParameter& f) {
  if (thermal_preset_field(f))  // configs/thermal/<preset>.yaml: written as thermal-<preset>.yaml, base: <preset>
    return {"thermal-" + f.profile + ".yaml", f.profile, fmt::format("thermal preset {}", f.profile),
            override_path_steps(f.key.substr(std::string("device.thermal.").size()) + "=0")};
  const std::string kind = f.key.substr(0, f.key.find('.'));
  return {kind == "device" ? f.profile + ".yaml" : kind + "-" + f.profile + ".yaml", f.profile,
          fmt::format("{} profile {}", kind, f.profile), override_path_steps(f.key.substr(kind.size() + 1) + "=0")};
}

// An experiment key: walked through the experiment file of its first point. A named config met on
// the way (`generate: percache_doc_calibrated`) takes the rest of the path: `base: NAME` + the keys.
Target experiment_target(const FreeParameter& f, const std::string& experiment) {
  const auto steps = override_path_steps(f.key + "=0");
  const std::string path = fs::path(experiment).is_absolute() || path_exists(experiment) ? experiment
                                                                                         : source_root() + "/" + experiment;
  YAML::Node node = yaml_clone(load_yaml_file(path));
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (node.IsScalar() && i > 0) {
      const std::string section = steps[0] == "experiment" && i > 1 ? steps[1] : steps[i - 1];
      const std::string name = node.Scalar();
      return {section + "-" + fs::path(name).stem().string() + ".yaml", name,
              fmt::format("{} {} (at {} of {})", section, name, fmt::join(steps.begin(), steps.begin() + long(i), "."),
                          experiment),
              std::vector<std::string>(steps.begin() + long(i), steps.end())};
    }
    const bool index = node.IsSequence() && steps[i].size() <= 9 && steps[i].find_first_not_of("0123456789") == std::string::npos;
    if (index && std::stoul(steps[i]) < node.size()) {
      const YAML::Node next = node[std::stoul(steps[i])];
      node.reset(next);
    } else if (node.IsMap() && node[steps[i]].IsDefined()) {
      const YAML::Node next = node[steps[i]];
      node.reset(next);
    } else {
      break;  // a key the experiment leaves at its default: written at its full path
    }
  }
  return {"experiment-" + fs::path(experiment).stem().string() + ".yaml", "",
          fmt::format("experiment {} (apply each value with -p KEY=V or copy it into the file)", experiment), steps};
}

}  // namespace

std::vector<std::string> write_fitted_profiles(const CalibrationSpec& spec, const FitResult& fit, const std::string& dir) {
  create_dirs(dir);
  struct Output {
    std::string base, what;
    YamlTree tree;
  };
  std::map<std::string, Output> outputs;  // file name -> fields
  std::map<std::string, const Point*> by_id;
  for (const auto* p : fit.points) by_id[p->id] = p;
  for (std::size_t j = 0; j < spec.parameters.size(); ++j) {
    if (!fit.free[j]) continue;  // held at its initial value: nothing was fitted
    const FreeParameter& f = spec.parameters[j];
    std::string experiment;
    for (const auto& id : f.points)
      if (by_id.count(id) && experiment.empty()) experiment = by_id.at(id)->experiment;
    const Target t = f.profile_field() || experiment.empty() ? profile_target(f) : experiment_target(f, experiment);
    Output& out = outputs[t.file];
    out.base = t.base;
    out.what = t.what;
    YamlTree* node = &out.tree;
    for (const auto& step : t.steps) node = &node->child(step);
    node->value = value_text(fit.fitted[j]);
    std::vector<std::string> srcs;
    for (const auto& id : f.points) {
      const Point* p = by_id.count(id) ? by_id.at(id) : nullptr;
      std::size_t i = 0;
      while (i < fit.points.size() && fit.points[i] != p) ++i;
      if (p && i < fit.points.size())
        srcs.push_back(fmt::format("{} ({}, {}: {} {}; simulated {:.4g})", id, p->document, p->source,
                                   p->published_text(), p->unit, fit.after[i]));
    }
    node->comment = fmt::format("fitted by mobisim calibrate ({}, was {}) to {}",
                                f.grid ? fmt::format("grid of {} values", f.values.size()) : std::string("GSL"),
                                value_text(f.initial), fmt::join(srcs, "; "));
  }
  std::vector<std::string> paths;
  for (const auto& [file, out] : outputs) {
    const std::string path = (fs::path(dir) / file).string();
    std::string text = fmt::format(
        "# {} with the parameters fitted by `mobisim calibrate` (mobisim {}, {}): {} iterations, {} grid passes, "
        "cost {:.4g} -> {:.4g}.\n",
        out.what, kVersion, spec.file, fit.iterations, fit.passes, fit.cost_before, fit.cost_after);
    if (!out.base.empty())
      text += fmt::format("# Use it in place of {} (give this file's path) or copy the values into {}.\nbase: {}\n", out.base,
                          out.base, out.base);
    out.tree.write(text, 0);
    const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
    {
      std::ofstream o(tmp, std::ios::trunc);
      o << text;
      if (!o) throw Error(fmt::format("cannot write {}", tmp));
    }
    fs::rename(tmp, path);
    paths.push_back(path);
  }
  return paths;
}

}  // namespace mobisim::experiments::fidelity
