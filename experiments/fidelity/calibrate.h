#pragma once
// `mobisim calibrate`: fits the named free parameters of device (and engine) profiles and of the
// points' experiments (workload generator keys, ...) to the registry's calibration points only, and
// writes the fitted profiles / configs with each value's source in its comment. The one fitter:
// continuous parameters by nonlinear least squares (GSL gsl_multifit_nlinear, trust region,
// finite-difference Jacobian), discrete ones (and continuous ones whose points are step functions of
// them) by a grid search over listed values.
//
// experiments/published/calibration.yaml lists the free parameters:
//
//   parameters:
//     - key: device.compute.cpu.compute_efficiency   # device.* / engine.* path inside the profile
//       profile: pixel7                              # the profile it belongs to
//       initial: 0.031
//       bounds: [0.001, 1.0]
//       points: [percache.table1.prefill_s]          # calibration points that constrain it
//     - key: experiment.workload.generate.knowledge.chunks_per_user   # any `-p` path of the points' experiments
//       initial: 24
//       values: [12, 16, 24, 32, 48, 100]            # a grid (method: grid); `method: grid` + values also
//       points: [percache.calibrated.kv_hit_gain_pp] # for a continuous key with a piecewise constant objective
//
// A candidate value reaches a point's experiment as `-p <device_at>.compute.cpu.compute_efficiency=V`
// (registry.h: device_at, default experiment.device), a probe as ProbeContext override
// "device.compute.cpu.compute_efficiency=V", and an experiment key as `-p KEY=V`. A candidate reaches
// the points its parameter lists and every other fitted point of the same experiments (it changes that
// run: e.g. two workload keys both shape every hit rate of it); a profile field's also reaches every
// probe that reads its profile, by name or through `base:` (a joint fit of two values of one NPU to two
// probes moves both probes with both values).
// On a named config, `-p experiment.workload.generate.queries.x=V` turns `generate: NAME` into
// `{base: NAME, queries: {x: V}}` (sim/params.h apply_override; the rag_qa driver expands `base:`).
// Residual of a point: ln(simulated / published) (a range: its midpoint), so points of different
// units weigh alike; continuous parameters are searched in ln space inside their bounds.
// Parameters whose candidates reach no common point are fitted as independent groups. Within a
// group: with grid parameters, coordinate passes (each grid parameter in turn tries every
// value, the continuous ones refitted by GSL at each, the lowest cost kept; ties keep the current
// value) until a pass changes nothing (at most max_passes); without, one GSL fit of them all.
//
// Rules (check_calibration): every listed point exists, is a calibration point and names the key
// in its `fitted`; every calibration point is listed by a parameter; no validation point is used.
#include <string>
#include <vector>

#include "experiments/fidelity/fidelity.h"
#include "experiments/fidelity/registry.h"

namespace mobisim::experiments::fidelity {

struct FreeParameter {
  std::string key, profile;      // profile: "" for an experiment key
  double initial = 0, lo = 0, hi = 0;
  std::vector<double> values;    // method grid: the values tried, in order
  bool grid = false;             // grid search over `values` (else GSL inside [lo, hi])
  std::vector<std::string> points;
  // A device.* / engine.* field of a profile (else a `-p` path of the points' experiments).
  bool profile_field() const { return key.starts_with("device.") || key.starts_with("engine."); }
};

struct CalibrationSpec {
  std::string file;
  std::vector<FreeParameter> parameters;
  static CalibrationSpec load(const std::string& path);
  // The parameters with points in `registry` (e.g. the on-device set), each keeping only those points.
  CalibrationSpec restricted_to(const std::vector<Point>& registry) const;
};

// Problems with a spec against the registry (empty when sound).
std::vector<std::string> check_calibration(const CalibrationSpec& spec, const std::vector<Point>& registry);

struct FitResult {
  std::vector<double> initial, fitted;      // per parameter
  std::vector<bool> free;                   // per parameter: fitted (else held at its initial value)
  std::vector<const Point*> points;         // the calibration points used
  std::vector<double> before, after;        // simulated values at initial / fitted parameters
  std::size_t iterations = 0, evaluations = 0;  // iterations: GSL's, summed over the continuous fits
  std::size_t passes = 0;                       // coordinate passes over the grid parameters (0: none)
  double cost_before = 0, cost_after = 0;   // 0.5 * sum of squared log residuals
  std::string status;                       // GSL's stopping reason
};

struct CalibrateOptions {
  EvaluateOptions evaluate;        // runs go to evaluate.runs.dir
  std::size_t max_iterations = 25;
  std::size_t max_passes = 4;      // coordinate passes over grid parameters at most
  std::vector<std::string> only;   // fit only these parameter keys (profile:key or key); others stay initial
  std::string state_file;          // rewritten after each iteration: the values, the cost (empty: none)
};

FitResult calibrate(const CalibrationSpec& spec, const std::vector<Point>& registry, const CalibrateOptions& o);

// `CalibrateOptions::only` entries (PROFILE:KEY) selecting every parameter of `spec` that belongs to one of
// `profiles` (e.g. every on-device engine but one, whose calibration points then stay out of the fit). A
// profile no parameter of `spec` belongs to is a UsageError naming it and the spec file.
std::vector<std::string> parameters_of_profiles(const CalibrationSpec& spec, const std::vector<std::string>& profiles);

// Writes one overlay profile per profile into `dir` (<profile>.yaml: `base: NAME` + the fitted
// fields, each commented with the points it was fitted to); returns the paths. An experiment key that
// passes through a named config (`generate: percache_doc_calibrated`) goes to <section>-<NAME>.yaml
// (`workload-percache_doc_calibrated.yaml`: `base: NAME` + the fitted keys, usable in place of NAME);
// one inside the experiment itself to experiment-<stem>.yaml (the fitted keys at their paths).
std::vector<std::string> write_fitted_profiles(const CalibrationSpec& spec, const FitResult& fit, const std::string& dir);

// The `-p`-style candidates of each of `points` (the fitted points) for parameter values `values`.
PointOverrides candidates_for(const CalibrationSpec& spec, const std::vector<double>& values,
                              const std::vector<Point>& points);

}  // namespace mobisim::experiments::fidelity
