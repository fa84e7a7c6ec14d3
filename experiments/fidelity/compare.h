#pragma once
// What moved between two fidelity reports: `mobisim fidelity --compare OLD/fidelity.h5`.
//
// A change that moves validation points has to say which and by how much (issue 38, "evidence
// before mechanism"); this makes that list from the reports themselves instead of by hand. Both
// sides are fidelity reports' `points` tables (report_table in fidelity.h; an earlier run's
// OUT/fidelity.h5): rows are matched by point id, and a point has moved when its simulated value,
// its status, its verdict, its error (a published value or range changed), its class, its place in
// the medians or its headline tag differs (values compared exactly: a report is deterministic). Points
// only in one report are listed as new or removed. The honest medians (headline, seed, external,
// as fidelity.h's HonestSummary counts them) are recomputed from each table, so both sides are
// counted by the same rule.
#include <cstddef>
#include <string>
#include <vector>

#include "experiments/fidelity/fidelity.h"
#include "sim/h5.h"

namespace mobisim::experiments::fidelity {

struct MovedPoint {
  std::string id, point_class, change;  // change: moved, new, removed
  bool in_medians = false;              // in the medians in the newer report (removed: in the older)
  double simulated_before = 0, simulated_after = 0;  // NaN where absent or not evaluated
  double error_before = 0, error_after = 0;          // signed error against the value or a range's midpoint
  std::string verdict_before, verdict_after;
};

struct ReportMedians {
  ErrorStats headline, seed, external;
};

struct ReportComparison {
  std::vector<MovedPoint> moved;  // in the newer report's order, then the removed ones
  std::size_t unchanged = 0;
  ReportMedians before, after;
  std::vector<std::string> lines() const;  // the medians before -> after, then one line per moved point
  h5::Table table() const;                 // one row per moved point (OUT/moved.csv)
};

// The medians of one report table (its in_medians, scope, set, headline and abs_mid_error columns).
ReportMedians report_medians(const h5::Table& points);
// `before` and `after`: fidelity reports' points tables. InputError naming the column when one
// lacks a column the comparison needs (a report written before issue 38's columns).
ReportComparison compare_reports(const h5::Table& before, const h5::Table& after);
// The points table of a fidelity report file (OUT/fidelity.h5); InputError naming the file.
h5::Table read_report(const std::string& fidelity_h5);
// The rows of `points` whose document set is one of `sets` (a report of `fidelity --set ...` is
// compared with the same documents of a whole earlier report).
h5::Table rows_of_sets(const h5::Table& points, const std::vector<std::string>& sets);

}  // namespace mobisim::experiments::fidelity
