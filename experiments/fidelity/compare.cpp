#include "experiments/fidelity/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <type_traits>
#include <variant>

#include "sim/error.h"

namespace mobisim::experiments::fidelity {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A column of a report table, refused by name when the report predates it.
template <class T>
const std::vector<T>& column_of(const h5::Table& t, const std::string& name, const char* side) {
  for (const auto& n : t.names())
    if (n == name) {
      if (const auto* v = std::get_if<std::vector<T>>(&t.column(name))) return *v;
      throw InputError(fmt::format("the {} fidelity report's column '{}' has an unexpected type", side, name));
    }
  throw InputError(fmt::format("the {} fidelity report has no column '{}' (written by a mobisim before the honest "
                               "accounting of issue 38? run `mobisim fidelity` there again)",
                               side, name));
}

// One report's rows by what the comparison reads.
struct Rows {
  const std::vector<std::string>& id;
  const std::vector<std::string>& cls;
  const std::vector<std::string>& status;
  const std::vector<std::string>& verdict;
  const std::vector<std::string>& scope;
  const std::vector<std::string>& set;
  const std::vector<double>& simulated;
  const std::vector<double>& mid_error;
  const std::vector<std::int64_t>& in_medians;
  const std::vector<std::int64_t>& headline;
  Rows(const h5::Table& t, const char* side)
      : id(column_of<std::string>(t, "id", side)),
        cls(column_of<std::string>(t, "class", side)),
        status(column_of<std::string>(t, "status", side)),
        verdict(column_of<std::string>(t, "verdict", side)),
        scope(column_of<std::string>(t, "scope", side)),
        set(column_of<std::string>(t, "set", side)),
        simulated(column_of<double>(t, "simulated", side)),
        mid_error(column_of<double>(t, "mid_error", side)),
        in_medians(column_of<std::int64_t>(t, "in_medians", side)),
        headline(column_of<std::int64_t>(t, "headline", side)) {}
};

// Exactly equal, NaN equal to NaN (a point that did not evaluate on both sides has not moved).
bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Moved: its simulated value, status or verdict, and also what it is scored against or how it counts: its
// error (a published value or range changed), its class (a point found derived), whether it is in the
// medians or tagged headline. Any of these moves a median without the model moving.
bool row_moved(const Rows& a, std::size_t i, const Rows& b, std::size_t j) {
  return !same_value(a.simulated[i], b.simulated[j]) || a.status[i] != b.status[j] || a.verdict[i] != b.verdict[j] ||
         !same_value(a.mid_error[i], b.mid_error[j]) || a.cls[i] != b.cls[j] || a.in_medians[i] != b.in_medians[j] ||
         a.headline[i] != b.headline[j];
}

// "validation -> derived" when the class changed, else the class; "+headline" / "-headline" when tagged or untagged.
std::string class_change(const Rows& a, std::size_t i, const Rows& b, std::size_t j) {
  std::string out = a.cls[i] == b.cls[j] ? b.cls[j] : a.cls[i] + "->" + b.cls[j];
  if (a.headline[i] != b.headline[j]) out += b.headline[j] == 1 ? " +headline" : " -headline";
  return out;
}

std::string percent(double fraction) { return std::isnan(fraction) ? "-" : fmt::format("{:+.1f}%", 100 * fraction); }

std::string stats_change(const char* what, const ErrorStats& a, const ErrorStats& b) {
  return fmt::format("{}: {} -> {}", what, a.text(), b.text());
}

}  // namespace

ReportMedians report_medians(const h5::Table& points) {
  const Rows r(points, "given");
  std::vector<double> headline, seed, external;
  for (std::size_t i = 0; i < r.id.size(); ++i) {
    // As HonestSummary counts them: the sustained-use set is reported on its own, never pooled.
    if (r.in_medians[i] != 1 || r.set[i] == "sustained") continue;
    const double a = std::abs(r.mid_error[i]);
    if (r.scope[i] == "external") {
      external.push_back(a);
      continue;
    }
    seed.push_back(a);
    if (r.headline[i] == 1) headline.push_back(a);
  }
  return {error_stats(headline), error_stats(seed), error_stats(external)};
}

ReportComparison compare_reports(const h5::Table& before, const h5::Table& after) {
  const Rows a(before, "older"), b(after, "newer");
  ReportComparison c;
  c.before = report_medians(before);
  c.after = report_medians(after);
  std::map<std::string, std::size_t> row_before;
  for (std::size_t i = 0; i < a.id.size(); ++i) row_before.emplace(a.id[i], i);
  for (std::size_t j = 0; j < b.id.size(); ++j) {
    MovedPoint m{b.id[j], b.cls[j], "moved", b.in_medians[j] == 1, kNaN, b.simulated[j], kNaN, b.mid_error[j], "",
                 b.verdict[j]};
    const auto it = row_before.find(b.id[j]);
    if (it == row_before.end()) {
      m.change = "new";
    } else {
      const std::size_t i = it->second;
      row_before.erase(it);
      if (!row_moved(a, i, b, j)) {
        ++c.unchanged;
        continue;
      }
      m.point_class = class_change(a, i, b, j);
      m.simulated_before = a.simulated[i];
      m.error_before = a.mid_error[i];
      m.verdict_before = a.verdict[i];
    }
    c.moved.push_back(m);
  }
  for (std::size_t i = 0; i < a.id.size(); ++i)  // what only the older report has, in its order
    if (row_before.count(a.id[i]))
      c.moved.push_back({a.id[i], a.cls[i], "removed", a.in_medians[i] == 1, a.simulated[i], kNaN, a.mid_error[i], kNaN,
                         a.verdict[i], ""});
  return c;
}

std::vector<std::string> ReportComparison::lines() const {
  std::vector<std::string> out{stats_change("headline", before.headline, after.headline),
                               stats_change("seed documents", before.seed, after.seed),
                               stats_change("external", before.external, after.external)};
  std::size_t counted = 0;
  for (const auto& m : moved) counted += m.in_medians;
  out.push_back(fmt::format("{} points moved, new or removed ({} of them in the medians); {} unchanged", moved.size(),
                            counted, unchanged));
  if (moved.empty()) return out;
  out.push_back(fmt::format("{:<64} {:<24} {:<7} {:>12} {:>12} {:>9} {:>9}", "point", "class", "change",
                            "sim. before", "sim. after", "err. bef.", "err. aft."));
  for (const auto& m : moved)
    out.push_back(fmt::format("{:<64} {:<24} {:<7} {:>12.5g} {:>12.5g} {:>9} {:>9}{}", m.id, m.point_class, m.change,
                              m.simulated_before, m.simulated_after, percent(m.error_before), percent(m.error_after),
                              m.in_medians ? "" : "  (in no median)"));
  return out;
}

h5::Table ReportComparison::table() const {
  std::vector<std::string> id, cls, change, verdict_before, verdict_after;
  std::vector<std::int64_t> counted;
  std::vector<double> sim_before, sim_after, err_before, err_after;
  for (const auto& m : moved) {
    id.push_back(m.id);
    cls.push_back(m.point_class);
    change.push_back(m.change);
    counted.push_back(m.in_medians ? 1 : 0);
    sim_before.push_back(m.simulated_before);
    sim_after.push_back(m.simulated_after);
    err_before.push_back(m.error_before);
    err_after.push_back(m.error_after);
    verdict_before.push_back(m.verdict_before);
    verdict_after.push_back(m.verdict_after);
  }
  h5::Table t;
  t.add("id", id);
  t.add("class", cls);
  t.add("change", change);
  t.add("in_medians", counted);
  t.add("simulated_before", sim_before);
  t.add("simulated_after", sim_after);
  t.add("mid_error_before", err_before, "fraction");
  t.add("mid_error_after", err_after, "fraction");
  t.add("verdict_before", verdict_before);
  t.add("verdict_after", verdict_after);
  return t;
}

h5::Table rows_of_sets(const h5::Table& points, const std::vector<std::string>& sets) {
  const std::vector<std::string>& set = column_of<std::string>(points, "set", "given");
  std::vector<std::size_t> keep;
  for (std::size_t i = 0; i < set.size(); ++i)
    if (std::find(sets.begin(), sets.end(), set[i]) != sets.end()) keep.push_back(i);
  h5::Table out;
  for (std::size_t c = 0; c < points.names().size(); ++c) {
    const std::string& name = points.names()[c];
    std::visit(
        [&](const auto& values) {
          std::decay_t<decltype(values)> kept;
          for (std::size_t i : keep) kept.push_back(values[i]);
          if constexpr (std::is_same_v<std::decay_t<decltype(values)>, std::vector<std::string>>)
            out.add(name, std::move(kept));
          else
            out.add(name, std::move(kept), points.units()[c]);
        },
        points.column(name));
  }
  return out;
}

h5::Table read_report(const std::string& fidelity_h5) {
  const h5::Reader r(fidelity_h5);
  if (!r.exists("points"))
    throw InputError(fmt::format("{}: not a fidelity report (no 'points' table; expected OUT/fidelity.h5 of "
                                 "`mobisim fidelity`)",
                                 fidelity_h5));
  return r.table("points");
}

}  // namespace mobisim::experiments::fidelity
