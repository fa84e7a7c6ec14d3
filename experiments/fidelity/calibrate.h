#pragma once
// `mobisim calibrate`: fits the named free parameters of device (and engine) profiles to the
// registry's calibration points only, by nonlinear least squares (GSL gsl_multifit_nlinear,
// trust region, finite-difference Jacobian), and writes the fitted profiles with each value's
// source in its comment.
//
// experiments/published/calibration.yaml lists the free parameters:
//
//   parameters:
//     - key: device.compute.cpu.compute_efficiency   # device.* / engine.* path inside the profile
//       profile: pixel7                              # the profile it belongs to
//       initial: 0.031
//       bounds: [0.001, 1.0]
//       points: [percache.table1.prefill_s]          # calibration points that constrain it
//
// A candidate value reaches a point's experiment as `-p <device_at>.compute.cpu.compute_efficiency=V`
// (registry.h: device_at, default experiment.device) and a probe as ProbeContext override
// "device.compute.cpu.compute_efficiency=V". Only the points a parameter lists see its candidates.
// Residual of a point: ln(simulated / published) (a range: its midpoint), so points of different
// units weigh alike; parameters are searched in ln space inside their bounds.
//
// Rules (check_calibration): every listed point exists, is a calibration point and names the key
// in its `fitted`; every calibration point is listed by a parameter (except points fitted only by
// workload generator keys, `workload.<section>.<key>`, which their workload script fits); no
// validation point is used.
#include <string>
#include <vector>

#include "experiments/fidelity/fidelity.h"
#include "experiments/fidelity/registry.h"

namespace mobisim::experiments::fidelity {

struct FreeParameter {
  std::string key, profile;
  double initial = 0, lo = 0, hi = 0;
  std::vector<std::string> points;
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
  std::size_t iterations = 0, evaluations = 0;
  double cost_before = 0, cost_after = 0;   // 0.5 * sum of squared log residuals
  std::string status;                       // GSL's stopping reason
};

struct CalibrateOptions {
  EvaluateOptions evaluate;        // runs go to evaluate.runs.dir
  std::size_t max_iterations = 25;
  std::vector<std::string> only;   // fit only these parameter keys (profile:key or key); others stay initial
};

FitResult calibrate(const CalibrationSpec& spec, const std::vector<Point>& registry, const CalibrateOptions& o);

// Writes one overlay profile per profile into `dir` (<profile>.yaml: `base: NAME` + the fitted
// fields, each commented with the points it was fitted to); returns the paths.
std::vector<std::string> write_fitted_profiles(const CalibrationSpec& spec, const FitResult& fit, const std::string& dir);

// The `-p`-style candidates of each point for parameter values `values`.
PointOverrides candidates_for(const CalibrationSpec& spec, const std::vector<double>& values);

}  // namespace mobisim::experiments::fidelity
