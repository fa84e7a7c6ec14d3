#pragma once
// The registry of published points: every number of a source document (or a public measurement)
// that mobisim claims to reproduce, with how mobisim's value is obtained and whether a parameter
// was fitted to it. One YAML file per document under experiments/published/:
//
//   document: "PerCache (seed 000)"
//   set: percache                         # the --set name (default: the file name's first word)
//   points:
//     - id: percache.table1.prefill_s     # unique over the registry, dotted
//       source: "Table 1"                 # figure/table, or a citation
//       quantity: "LLM prefilling of a 349-token query"
//       published: 62.14                  # or published_range: [lo, hi], published_over: lo ("over lo"),
//                                         # or trend: increasing|decreasing
//       unit: s
//       role: calibration                 # or validation (never both: see calibration.yaml)
//       tolerance_rel: 0.10               # verdict threshold (default 0.10; trends pass/fail)
//       experiment: experiments/percache/table1.yaml
//       set: [experiment.device=oneplus-12]          # optional -p overrides of that run
//       device_at: experiment.device      # where `device.*` calibration overrides go (the default)
//       extract: {dataset: /summary, where: {operation: prefill}, column: latency_s}
//       vary: {key: experiment.policies.0.prediction_stride, values: [1, 2, 3, 4, 5]}   # trends: one
//                                         # run per value, the extracted values in this order
//       # or extract: {function: NAME, ...its arguments}  (see extract.h)
//       # or, instead of experiment + extract, probe: {impl: ondevice, ...}  (fidelity/probe.h)
//       fitted: [device.compute.cpu.compute_efficiency]   # calibration points: what they fit, as
//                                         # calibration.yaml names it (a profile field or an experiment
//                                         # -p path such as experiment.workload.generate.queries.paraphrase_prob)
//       cause: "one line"                 # required for a validation point whose error is > 25 %
//       derived_from: [percache.table1.prefill_s]   # a validation point computed from calibrated values
//                                         # (or reading the value a calibration point is fitted to): class
//                                         # `derived`, in no median; an unmarked one is refused at load
//       interpolated_between: [a.1k, a.16k]  # a validation point between two fitted points of its series:
//                                         # class `interpolated`, reported apart, in no median
//       statement: prefix.note.speedup    # points scoring one published sentence/cell (phones, workloads):
//       representative: true              # the group counts once, through its representative (one per
//                                         # group); the others are sensitivity runs, in no median
//       headline: true                    # a number of the document's abstract, introduction or conclusion
//       cell: "51.94% (MeanCache)"        # the fragment / cell quoted, when the source states one value twice
//                                         # for different things (else two such points must share a statement)
//       cause_kind: workload              # what the cause is: workload (mobisim's inputs differ from the
//                                         # document's), mechanism (the model omits or simplifies something)
//                                         # or document (the source's own numbers disagree); required with
//                                         # a cause on a validation point
//
// A file may say `external: true` (public measurements, not a seed document): its points are reported
// as the external set, apart from the seed documents'.
//
// Loading checks every key: unknown keys, a missing value, a role outside {calibration,
// validation}, fitted on a validation point, duplicate ids are ConfigErrors naming file and key.
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace mobisim::experiments::fidelity {

enum class PublishedKind { kValue, kRange, kTrend };

// What a residual's cause is: a workload difference (not a fault of the model), a missing or simplified
// mechanism (a model gap), or a disagreement inside the source document itself.
inline const std::vector<std::string> kCauseKinds{"workload", "mechanism", "document"};

struct Extract {
  std::string dataset;                                      // "/summary", "/tables/calibration"
  std::vector<std::pair<std::string, std::string>> where;   // column = value (text or number as written)
  std::string column;
  std::string reduce;                                       // "" (exactly one row), mean, min, max, first, last
  std::string order_by;                                     // trends: sort the selected rows by this column
  std::string function;                                     // a named extractor instead (extract.h)
  YAML::Node args;                                          // the whole extract mapping (functions read it)
};

struct Point {
  std::string id, document, set_name, file;  // set_name: --set; file: the registry YAML it came from
  std::string source, quantity, unit, role, cause;
  std::string cause_kind;  // "", workload, mechanism, document (kCauseKinds)
  PublishedKind kind = PublishedKind::kValue;
  double published = 0;   // kValue
  double lo = 0, hi = 0;  // kRange
  std::string trend;      // kTrend: increasing | decreasing
  double tolerance_rel = 0.10;
  std::string experiment;              // path (relative to the source root) or ""
  std::vector<std::string> run_overrides;  // -p overrides of the run (key `set:`)
  std::string device_at = "experiment.device";
  std::string engine_at = "experiment.engine";
  // Trends over runs: one run per value of `vary_key` (a -p path), the extractor read from each.
  std::string vary_key;
  std::vector<std::string> vary_values;
  Extract extract;
  YAML::Node probe;                    // {impl: NAME, ...} or null
  std::vector<std::string> fitted;
  std::vector<std::string> derived_from;          // calibration ids a derived validation point is computed from
  std::vector<std::string> interpolated_between;  // the two fitted points of the series around it
  std::string statement;                          // statement group ("" = a group of its own)
  bool representative = false;                    // the group's member that counts
  bool headline = false;                          // abstract / introduction / conclusion number
  std::string cell;                               // the sentence fragment / table cell, when a source repeats a value
  bool external = false;                          // from an `external: true` file (on-device measurements)

  bool calibration() const { return role == "calibration"; }
  // calibration, validation, derived or interpolated.
  std::string point_class() const {
    if (calibration()) return "calibration";
    if (!derived_from.empty()) return "derived";
    if (!interpolated_between.empty()) return "interpolated";
    return "validation";
  }
  // Whether the point speaks for its statement (no group, or the group's representative).
  bool counted() const { return statement.empty() || representative; }
  // The published value a numeric comparison uses: the value, or the range's midpoint.
  // The value errors and plots refer to: a range's middle, or its low end when it is open ("over lo").
  double reference() const {
    if (kind != PublishedKind::kRange) return published;
    return std::isinf(hi) ? lo : 0.5 * (lo + hi);
  }
  std::string published_text() const;
};

// Every point of every *.yaml under `dir` (sorted by file name, then file order), optionally only
// the documents whose set is in `sets`. ConfigError on a malformed file or duplicate id.
std::vector<Point> load_registry(const std::string& dir, const std::vector<std::string>& sets = {});
// One registry file (`default_set`: the set when the file names none).
std::vector<Point> load_registry_file(const std::string& path);

// Validation points whose mobisim value is the very quantity a calibration point is fitted to (the
// same run and extractor, or the same probe): their error follows from the fit and the two published
// numbers, not from the model. Validation id -> the calibration point's id (the first, in registry order).
std::map<std::string, std::string> validation_reading_a_fitted_value(const std::vector<Point>& points);

// One table cell set a point's extractor reads: `column` of the rows of `dataset` in run `run` that
// match `where` (sorted by column; a row key a function names, e.g. {policy: percache}, is part of it).
// An empty `where` reads every row (a share's denominator, a whole-column extractor).
struct ReadCell {
  std::string run;      // the experiment, its -p overrides and its varied key: which result file
  std::string dataset, column;
  std::vector<std::pair<std::string, std::string>> where;
};
// Every cell `p` reads (none for a probe point: a probe is compared by its whole specification).
std::vector<ReadCell> cells_read(const Point& p);
// Whether two cell sets can share a row: the same run, table and column, and no `where` key that both
// name with different values (numbers compare as numbers: 1024 = 1024.0).
bool cells_overlap(const ReadCell& a, const ReadCell& b);

// What a validation point reads of a fit: the calibration point, the parameters fitted to it (its
// `fitted`, which check_calibration ties to calibration.yaml) and how (the same value, or the cell).
struct FittedRead {
  std::string calibration;
  std::vector<std::string> parameters;
  std::string how;  // "the same value" or "column C of DATASET where ..."
};
// The map issue 38 asks `mobisim calibrate` to know, derived from the calibration points (whose `fitted`
// check_calibration ties to calibration.yaml both ways): fitted parameter -> the values it is fitted to,
// i.e. the run cell a table-extractor calibration point reads, or the whole value of a probe or of a
// named extractor (a share, ratio or difference pins only its combination, not each input). A numeric
// validation point reading such a cell, directly or as an input of a ratio, share, difference or sum,
// or the same value, reads a fitted value (trends, pass/fail and in no median, are not checked).
// Not seen: a column the experiment itself computes from a fitted one (prefix.iphone.speedup reads
// speedup_median); such points stay marked by hand. Validation id -> the first such calibration point.
std::map<std::string, FittedRead> validation_reads_of_fitted_values(const std::vector<Point>& points);
// Parameter -> every cell it is fitted to, as text ("RUN: DATASET COLUMN where ..."; probes by their id).
std::map<std::string, std::vector<std::string>> fitted_parameter_cells(const std::vector<Point>& points);

// Validation points between two fitted points of the same series: validation id -> [low, high]
// (calibration ids). A series: points reading one column of one table of one run whose row filters
// differ in one numeric value (Table 6's decode_length), or columns of one row whose names differ in
// one number (Table 2's updated_retrieved_within_1 ... _16), or probes whose specifications differ in
// one numeric key (tokens); a point is between when fitted points of its series lie on both sides.
std::map<std::string, std::pair<std::string, std::string>> validation_between_fitted_points(const std::vector<Point>& points);

// The hygiene rules over `points` (a whole registry, or one file when `whole` is false): a validation
// point reading a fitted value must be marked derived_from; derived_from and interpolated_between name
// calibration points; every statement group has exactly one representative (whole registry only, as
// groups may span files). ConfigError naming the point's file and id.
void check_hygiene(const std::vector<Point>& points, bool whole);

// One statement, one point: two numeric points quoting one document's same source, unit and published
// value (or range) must share a statement group unless their `cell`s tell the two quotes apart.
// ConfigError naming the file and both points.
void check_one_statement_one_point(const std::vector<Point>& points);

// Counts by role and the disjointness rule: a point has exactly one role, at most a third of
// the numeric points calibrate. Returns the problems found (empty when the registry is sound).
std::vector<std::string> check_roles(const std::vector<Point>& points);

}  // namespace mobisim::experiments::fidelity
