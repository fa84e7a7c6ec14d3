#pragma once
// `mobisim fidelity`: every registry point beside mobisim's value.
//
// Runs are keyed by what they simulate: a point's experiment with its overrides is resolved
// (resolve_experiment_config) and hashed with mobisim's version like sweep runs; the result file
// OUT/runs/<experiment>-<hash>.h5 is reused when present (unless forced) and otherwise run as a
// `mobisim run` process (sweep::execute_local, N at a time). Values then come from the extractors
// (fidelity/extract.h) or the probes (fidelity/probe.h).
//
// Relative error: (simulated - published) / published; for a published range, 0 inside it and
// the distance to the nearer end over that end outside; trends pass or fail.
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "experiments/fidelity/registry.h"
#include "sim/h5.h"

namespace mobisim::experiments::fidelity {

// Distinct experiment runs of a set of points, resolved, hashed, reused or executed.
class RunCache {
 public:
  struct Options {
    std::string dir = "results/fidelity";  // runs go to DIR/runs, logs to DIR/logs
    int threads = 1;
    bool force = false;   // rerun even when a result file for the same configuration exists
    bool quiet = false;
    std::string shared;   // --shared (QMSum import), "" = default
  };
  explicit RunCache(Options o) : o_(std::move(o)) {}
  // Plans the run of `experiment` (a path relative to the source root, or absolute) with
  // `overrides`; returns its key. A configuration error is recorded, not thrown.
  std::string request(const std::string& experiment, const std::vector<std::string>& overrides);
  // Executes every planned run not yet done or reused. Returns the number that failed.
  std::size_t execute();
  struct Outcome {
    std::string result;  // the HDF5 result file
    std::string status;  // planned, reused, ran, failed
    std::string error;
  };
  const Outcome& outcome(const std::string& key) const;

 private:
  struct Entry {
    std::string base;  // absolute experiment path
    std::vector<std::string> overrides;
    std::string hash;
    Outcome outcome;
  };
  Options o_;
  std::map<std::string, Entry> entries_;  // key: base + overrides
};

struct Evaluation {
  const Point* point = nullptr;
  std::string status = "ok";        // ok, failed, unavailable (probe not built)
  std::string error;
  double simulated = 0;             // numeric points
  std::vector<double> series;       // trends
  bool trend_pass = false;
  double rel_error = 0;             // signed; a range: the distance to it (0 inside)
  double mid_error = 0;             // signed; a range: against its midpoint (= rel_error for a value)
  std::string verdict;              // ok, off, pass, FAIL, error, n/a
  std::string run_file;
};

// Relative error of `simulated` against a point's published value or range.
double relative_error(const Point& p, double simulated);
// Relative error against the point's reference (a range's midpoint; an open range "over lo": the
// distance to lo, as the document gives no middle). The honest medians use this one, so a range
// cannot score 0 everywhere inside it.
double midpoint_error(const Point& p, double simulated);

// Probe override lists for the points of `points` (calibration passes candidates here).
using PointOverrides = std::map<std::string, std::vector<std::string>>;  // point id -> overrides

struct EvaluateOptions {
  RunCache::Options runs;
  std::string shared;  // for probes
  // Extra overrides per point id: `device.KEY=V` / `engine.KEY=V` (calibration candidates).
  PointOverrides candidates;
};
// Evaluates `points` (runs what is needed). Run failures are recorded per point.
std::vector<Evaluation> evaluate(const std::vector<Point>& points, const EvaluateOptions& o);

// The experiment overrides of a point for calibration candidates `device.X=V` / `engine.X=V`.
std::vector<std::string> experiment_overrides(const Point& p, const std::vector<std::string>& candidates);

struct Summary {
  std::size_t calibration = 0, validation = 0, trends = 0, trends_passed = 0, failed = 0, unavailable = 0;
  std::size_t validation_numeric = 0, within_tolerance = 0, over_25 = 0, over_25_unexplained = 0;
  double median_validation = 0, p90_validation = 0, median_calibration = 0;
  // Validation points by the kind of their residual's cause (registry.h kCauseKinds; "none": no cause),
  // and the error over the numeric validation points whose residual is not put down to a workload
  // difference (model gaps and document disagreements stay in): what the model itself gets wrong.
  std::map<std::string, std::size_t> cause_kinds;
  std::size_t not_workload = 0;
  double median_not_workload = 0, p90_not_workload = 0;
  std::string line() const;
  std::string causes_line() const;
};
Summary summarize(const std::vector<Evaluation>& ev);
// The honest accounting (issue 38). Medians use the midpoint error and count only points of class
// validation that speak for their statement (Point::counted); derived, interpolated and the other members
// of a statement group are reported apart. Seed documents and external measurements never pool.
struct ErrorStats {
  std::size_t n = 0;
  double median = std::numeric_limits<double>::quiet_NaN(), p90 = std::numeric_limits<double>::quiet_NaN();
  std::size_t within_10 = 0;
  std::string text() const;  // "median 9.1% over 12 (p90 30.2%, 7 within 10%)"
};
ErrorStats error_stats(const std::vector<double>& abs_errors);
// Whether a point's error enters the seed/headline/external medians.
bool in_medians(const Evaluation& e);
struct HonestSummary {
  std::vector<std::string> documents;        // seed sets in first-appearance order
  std::map<std::string, ErrorStats> headline;  // per seed set
  std::map<std::string, ErrorStats> seed_by_document;  // per seed set
  ErrorStats headline_all, seed, external;
  ErrorStats sustained;  // the sustained-use set (external, set `sustained`): reported apart from the on-device one
  std::map<std::string, ErrorStats> sustained_by_phone;  // its validation points per probed device profile
  ErrorStats derived, interpolated, sensitivity;   // reported apart, never in the medians above
  std::size_t headline_tagged = 0, headline_not_counted = 0;  // tagged; of them calibration/derived/...
  std::vector<std::string> lines() const;
};
HonestSummary honest_summary(const std::vector<Evaluation>& ev);

// The on-device section (points probed with impl: ondevice): points, phones, runtimes, units and the
// validation error; "" when there are none.
struct OnDeviceCoverage {
  std::size_t points = 0, calibration = 0, validation = 0;
  std::vector<std::string> phones, runtimes, units;
  double median_validation = 0, p90_validation = 0;
  std::size_t within_25 = 0, over_50 = 0, over_50_unexplained = 0;
  std::string line() const;
};
OnDeviceCoverage ondevice_coverage(const std::vector<Evaluation>& ev);

// The on-device validation error per runtime (engine) x compute unit, the transfer targets of issue 37:
// one row per engine x unit with its point counts and the median / p90 |error| of its validation points
// (status ok, numeric), sorted by engine then unit; `all` pools every on-device validation point. Points of
// class derived or interpolated, and the non-representative members of a statement group, are counted in
// `other` and enter no median (as in the fidelity report's medians).
struct OnDeviceGroup {
  std::string engine, unit;
  std::size_t points = 0, calibration = 0, validation = 0, other = 0;
  ErrorStats error;          // over the validation points that evaluated (n may be below `validation`)
  std::size_t within_25 = 0;
};
struct OnDeviceGroups {
  std::vector<OnDeviceGroup> rows;
  OnDeviceGroup all;  // engine "all", unit ""
  std::vector<std::string> lines() const;  // a table: header, one line per row, the `all` line; {} when empty
};
OnDeviceGroups ondevice_groups(const std::vector<Evaluation>& ev);

// The validation points among `ev` that read the value a calibration point is fitted to (registry.h
// validation_reading_a_fitted_value): one line naming each with its calibration point ("" when none).
std::string fitted_value_line(const std::vector<Evaluation>& ev);

// One summary per document set, in first-appearance order ("percache: validation: ...").
std::vector<std::string> per_set_lines(const std::vector<Evaluation>& ev);

// The report: a terminal table, and OUT/fidelity.{h5,csv,md} (+ .png unless no_plot).
std::string format_report(const std::vector<Evaluation>& ev);
h5::Table report_table(const std::vector<Evaluation>& ev);
void write_report(const std::vector<Evaluation>& ev, const std::string& out_dir, bool no_plot, bool quiet);

}  // namespace mobisim::experiments::fidelity
