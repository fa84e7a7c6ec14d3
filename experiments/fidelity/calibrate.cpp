#include "experiments/fidelity/calibrate.h"

#include <fmt/format.h>
#include <gsl/gsl_blas.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <gsl/gsl_vector.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <unistd.h>

#include "sim/error.h"
#include "sim/params.h"
#include "sim/version.h"

namespace mobisim::experiments::fidelity {
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
    eo.candidates = candidates_for(*spec, values);
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
  for (std::size_t j = 0; j < pb->free.size(); ++j) vals.push_back(value_text(std::exp(gsl_vector_get(x, j))));
  std::cerr << fmt::format("[calibrate] iteration {}: cost {:.3g}, {}\n", iter, 0.5 * chi, fmt::join(vals, ", "));
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
  ps.text("key", std::nullopt, "device.* or engine.* path inside the profile");
  ps.text("profile", std::nullopt, "the device (or engine) profile the parameter belongs to");
  ps.real("initial", std::nullopt, "starting value").positive();
  ps.real_list("bounds", std::nullopt, "[low, high] (positive)");
  ps.text_list("points", std::nullopt, "the calibration points constraining it").non_empty();
  ps.text("why", std::string(), "free text: what the parameter stands for");
  CalibrationSpec spec;
  spec.file = path;
  std::set<std::string> seen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    Params q(list[i], ps, p.source_of("parameters").element(i), {});
    FreeParameter f;
    f.key = q.text("key");
    if (!f.key.starts_with("device.") && !f.key.starts_with("engine."))
      q.fail("key", "expected a device.* or engine.* path (the profile field being fitted)");
    f.profile = q.text("profile");
    f.initial = q.real("initial");
    const auto b = q.real_list("bounds");
    if (b.size() != 2 || !(b[0] > 0) || !(b[0] < b[1])) q.fail("bounds", "expected [low, high] with 0 < low < high");
    f.lo = b[0];
    f.hi = b[1];
    if (f.initial < f.lo || f.initial > f.hi) q.fail("initial", "must lie within bounds");
    f.points = q.text_list("points");
    if (!seen.insert(f.profile + ":" + f.key).second) q.fail("key", fmt::format("{} of {} is listed twice", f.key, f.profile));
    spec.parameters.push_back(std::move(f));
  }
  return spec;
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

// A point fitted only by workload generator keys ("workload.<section>.<key>", e.g.
// workload.queries.paraphrase_prob) is fitted by the workload's own script (calibrate fits profile
// fields only; experiments/percache/calibrate_workload.py fits configs/workloads/percache_doc_calibrated.yaml).
namespace {
bool fitted_by_workload(const Point& p) {
  return !p.fitted.empty() && std::all_of(p.fitted.begin(), p.fitted.end(),
                                          [](const std::string& k) { return k.rfind("workload.", 0) == 0; });
}
}  // namespace

std::vector<std::string> check_calibration(const CalibrationSpec& spec, const std::vector<Point>& registry) {
  std::vector<std::string> problems;
  std::map<std::string, const Point*> by_id;
  for (const auto& p : registry) by_id[p.id] = &p;
  std::set<std::string> covered;
  for (const auto& f : spec.parameters) {
    for (const auto& id : f.points) {
      auto it = by_id.find(id);
      if (it == by_id.end()) {
        problems.push_back(fmt::format("{} ({}): no registry point '{}'", f.key, f.profile, id));
        continue;
      }
      const Point& p = *it->second;
      if (!p.calibration()) {
        problems.push_back(fmt::format("{} ({}) would be fitted to validation point {}", f.key, f.profile, id));
        continue;
      }
      if (std::find(p.fitted.begin(), p.fitted.end(), f.key) == p.fitted.end())
        problems.push_back(fmt::format("calibration point {} does not list {} in fitted", id, f.key));
      covered.insert(id);
    }
  }
  for (const auto& p : registry)
    if (p.calibration() && !covered.count(p.id) && !fitted_by_workload(p))
      problems.push_back(fmt::format("calibration point {} is fitted by no parameter of {}", p.id, spec.file));
  return problems;
}

PointOverrides candidates_for(const CalibrationSpec& spec, const std::vector<double>& values) {
  PointOverrides out;
  for (std::size_t j = 0; j < spec.parameters.size(); ++j)
    for (const auto& id : spec.parameters[j].points)
      out[id].push_back(spec.parameters[j].key + "=" + value_text(values[j]));
  return out;
}

FitResult calibrate(const CalibrationSpec& spec, const std::vector<Point>& registry, const CalibrateOptions& o) {
  if (auto problems = check_calibration(spec, registry); !problems.empty())
    throw ConfigError(fmt::format("{}: {}", spec.file, fmt::join(problems, "; ")));
  Problem pb;
  pb.spec = &spec;
  pb.options = &o;
  std::set<std::string> ids;
  for (const auto& f : spec.parameters) ids.insert(f.points.begin(), f.points.end());
  FitResult r;
  for (const auto& p : registry)
    if (ids.count(p.id)) {
      pb.points.push_back(p);
      r.points.push_back(&p);  // the caller's registry outlives the result
    }
  for (std::size_t j = 0; j < spec.parameters.size(); ++j) {
    pb.fixed.push_back(spec.parameters[j].initial);
    if (selected(spec.parameters[j], o.only)) pb.free.push_back(j);
  }
  if (pb.free.empty()) throw UsageError("no parameter selected to fit");
  r.free.assign(spec.parameters.size(), false);
  for (auto j : pb.free) r.free[j] = true;
  r.initial = pb.fixed;
  r.before = pb.simulate(pb.fixed);
  for (std::size_t i = 0; i < r.before.size(); ++i)
    r.cost_before += 0.5 * std::pow(log_residual(r.before[i], pb.points[i].reference()), 2);

  const std::size_t n = pb.points.size(), p = pb.free.size();
  if (n < p)
    throw ConfigError(fmt::format("{}: {} free parameters but only {} calibration points", spec.file, p, n));
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
  for (std::size_t j = 0; j < p; ++j) gsl_vector_set(u.get(), j, std::log(spec.parameters[pb.free[j]].initial));
  gsl_error_handler_t* old = gsl_set_error_handler_off();
  int info = 0;
  int status = gsl_multifit_nlinear_init(u.get(), &fdf, w.get());
  if (status == GSL_SUCCESS)
    status = gsl_multifit_nlinear_driver(o.max_iterations, 1e-4, 1e-8, 1e-8,
                                         o.evaluate.runs.quiet ? nullptr : progress_cb, &pb, &info, w.get());
  gsl_set_error_handler(old);
  if (!pb.failure.empty()) throw Error("calibration stopped: " + pb.failure);
  r.status = status == GSL_SUCCESS ? (info == 1 ? "converged (step)" : info == 2 ? "converged (gradient)" : "converged")
                                   : fmt::format("stopped: {}", gsl_strerror(status));
  r.iterations = gsl_multifit_nlinear_niter(w.get());
  r.fitted = pb.values_of(gsl_multifit_nlinear_position(w.get()));
  // Rounded as written to the profile, then simulated once more: the reported values are exactly
  // what the written profile gives.
  for (auto& v : r.fitted) v = std::stod(value_text(v));
  r.after = pb.simulate(r.fitted);
  for (std::size_t i = 0; i < r.after.size(); ++i)
    r.cost_after += 0.5 * std::pow(log_residual(r.after[i], pb.points[i].reference()), 2);
  r.evaluations = pb.evaluations;
  return r;
}

namespace {

// A nested mapping written with comments on its leaves.
struct YamlTree {
  std::vector<std::pair<std::string, YamlTree>> children;
  std::string value, comment;
  YamlTree& child(const std::string& k) {
    for (auto& [name, t] : children)
      if (name == k) return t;
    children.emplace_back(k, YamlTree{});
    return children.back().second;
  }
  void write(std::string& out, int indent) const {
    for (const auto& [k, t] : children) {
      out += std::string(static_cast<std::size_t>(indent), ' ') + k + ":";
      if (t.children.empty()) {
        out += " " + t.value + (t.comment.empty() ? "" : "   # " + t.comment) + "\n";
      } else {
        out += "\n";
        t.write(out, indent + 2);
      }
    }
  }
};

}  // namespace

std::vector<std::string> write_fitted_profiles(const CalibrationSpec& spec, const FitResult& fit, const std::string& dir) {
  fs::create_directories(dir);
  std::map<std::string, YamlTree> trees;  // "device:pixel7" -> fields
  std::map<std::string, const Point*> by_id;
  for (const auto* p : fit.points) by_id[p->id] = p;
  for (std::size_t j = 0; j < spec.parameters.size(); ++j) {
    if (!fit.free[j]) continue;  // held at its initial value: nothing was fitted
    const FreeParameter& f = spec.parameters[j];
    const std::string kind = f.key.substr(0, f.key.find('.'));
    YamlTree* node = &trees[kind + ":" + f.profile];
    for (const auto& step : override_path_steps(f.key.substr(kind.size() + 1) + "=0")) node = &node->child(step);
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
    node->comment = fmt::format("fitted by mobisim calibrate (was {}) to {}", value_text(f.initial), fmt::join(srcs, "; "));
  }
  std::vector<std::string> paths;
  for (const auto& [name, tree] : trees) {
    const std::string kind = name.substr(0, name.find(':')), profile = name.substr(name.find(':') + 1);
    const std::string path = (fs::path(dir) / (kind == "device" ? profile + ".yaml" : kind + "-" + profile + ".yaml")).string();
    std::string text = fmt::format(
        "# {} profile {} with the parameters fitted by `mobisim calibrate` (mobisim {}, {}): {} iterations, "
        "cost {:.4g} -> {:.4g}.\n# Use it as a profile ({}: {}) or copy the values into the built-in one.\n",
        kind, profile, kVersion, spec.file, fit.iterations, fit.cost_before, fit.cost_after, kind, path);
    text += "base: " + profile + "\n";
    tree.write(text, 0);
    const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << text;
      if (!out) throw Error(fmt::format("cannot write {}", tmp));
    }
    fs::rename(tmp, path);
    paths.push_back(path);
  }
  return paths;
}

}  // namespace mobisim::experiments::fidelity
