#include "experiments/fidelity/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <tuple>

#include "sim/atomic_file.h"
#include "sim/error.h"
#include "sim/params.h"

namespace mobisim::experiments::fidelity {
namespace {

namespace fs = std::filesystem;

ParamSchema point_schema() {
  ParamSchema s;
  s.text("id", std::nullopt, "unique dotted id (document.figure.quantity)");
  s.text("source", std::nullopt, "figure / table of the document, or a citation");
  s.text("quantity", std::nullopt, "what the number is");
  s.real("published", std::nullopt, "the published value").optional();
  s.real_list("published_range", std::nullopt, "[low, high] when the document gives a range").optional();
  s.real("published_over", std::nullopt, "when the document says only 'over X' (a range open above)").optional();
  s.text("trend", std::nullopt, "increasing | decreasing (checked pass/fail)").optional().in({"increasing", "decreasing"});
  s.text("unit", std::nullopt, "unit of the published and simulated values");
  s.text("role", std::nullopt, "calibration (a parameter is fitted to it) or validation").in({"calibration", "validation"});
  s.real("tolerance_rel", 0.10, "relative error within which the verdict is ok").positive();
  s.text("experiment", std::string(), "experiment YAML giving mobisim's value (relative to the source root)");
  s.text_list("set", std::vector<std::string>{}, "-p overrides of that run");
  s.text("device_at", std::string("experiment.device"), "where device.* calibration overrides go in that experiment");
  s.text("engine_at", std::string("experiment.engine"), "where engine.* calibration overrides go");
  s.node("extract", "how to read mobisim's value from the result file");
  s.node("vary", "trends over runs: {key: -p path, values: [...]}, one run per value");
  s.node("probe", "instead of experiment + extract: a fidelity_probe plug-in {impl: NAME, ...}");
  s.text_list("fitted", std::vector<std::string>{}, "calibration points: the parameters fitted to them");
  s.text("cause", std::string(), "validation points over 25 % error: what the model omits or how the workload differs");
  s.text("cause_kind", std::string(), "what the cause is: workload | mechanism | document (the source's own numbers disagree)")
      .in({"", "workload", "mechanism", "document"});
  s.text_list("derived_from", std::vector<std::string>{}, "calibration points a validation point is computed from (class derived: in no median)");
  s.text_list("interpolated_between", std::vector<std::string>{}, "the two fitted points of the series a validation point lies between (class interpolated)");
  s.text("statement", std::string(), "the published sentence or cell several points score (a group counts once)");
  s.boolean("representative", false, "the statement group's member that counts in the medians");
  s.boolean("headline", false, "a number of the document's abstract, introduction or conclusion");
  s.text("cell", std::string(), "the sentence fragment or table cell quoted, when one source states the same value twice "
         "for different things (two points with one source, unit and value are one statement otherwise)");
  s.text("notes", std::string(), "free text: the measured phone, runtime, workload and how the value was derived");
  return s;
}

// How several values of one extractor combine into a point's number (extract.h).
const std::vector<std::string> kReductions{"mean", "min", "max", "first", "last"};

ParamSchema table_extract_schema() {
  ParamSchema s;
  s.text("dataset", std::string("/summary"), "table (HDF5 group) of the result file");
  s.node("where", "row filter: {column: value, ...}");
  s.text("column", std::nullopt, "the column giving the value");
  std::vector<std::string> reductions{""};
  reductions.insert(reductions.end(), kReductions.begin(), kReductions.end());
  s.text("reduce", std::string(), "several matching rows: mean, min, max, first or last (default: exactly one row)")
      .in(reductions);
  s.text("order_by", std::string(), "trends: order the selected rows by this column (default: file order)");
  return s;
}

Extract parse_extract(const Params& p) {
  Extract e;
  const YAML::Node node = p.node("extract");
  const ConfigSource src = p.source_of("extract");
  if (!node.IsDefined() || !node.IsMap()) p.fail("extract", "expected a mapping {dataset, where, column} or {function: NAME, ...}");
  e.args = yaml_clone(node);
  if (node["function"].IsDefined()) {
    e.function = node["function"].as<std::string>();
    // Checked here, at load, so a typo names the registry file and line (extract.h lists them).
    static const std::vector<std::string> functions{"ratio", "ratios", "reduction_pct", "difference", "sum", "share",
                                                    "columns_ratio"};
    static const std::vector<std::string> args{"function", "dataset", "column", "key", "where", "numerator",
                                               "denominator", "of", "vs", "rows", "minus", "scale",
                                               "numerator_column", "denominator_column", "group_by", "reduce"};
    if (std::find(functions.begin(), functions.end(), e.function) == functions.end())
      throw ConfigError(fmt::format("{}: unknown extract function '{}' (known: {})", src.where(node), e.function,
                                    fmt::join(functions, ", ")));
    for (const auto& kv : node)
      if (std::find(args.begin(), args.end(), kv.first.as<std::string>()) == args.end())
        throw ConfigError(fmt::format("{}: unknown argument '{}' of extract function '{}'", src.where(node),
                                      kv.first.as<std::string>(), e.function));
    if (node["reduce"].IsDefined()) {
      e.reduce = node["reduce"].IsScalar() ? node["reduce"].Scalar() : std::string();
      if (std::find(kReductions.begin(), kReductions.end(), e.reduce) == kReductions.end())
        throw ConfigError(fmt::format("{}: extract function '{}': reduce must be one of {}", src.where(node["reduce"]),
                                      e.function, fmt::join(kReductions, ", ")));
    }
    return e;
  }
  Params x(node, table_extract_schema(), src, {});
  e.dataset = x.text("dataset");
  e.column = x.text("column");
  e.reduce = x.text("reduce");
  e.order_by = x.text("order_by");
  const YAML::Node where = x.node("where");
  if (where.IsDefined() && !where.IsNull()) {
    if (!where.IsMap()) x.fail("where", "expected a mapping {column: value, ...}");
    for (const auto& kv : where) {
      if (!kv.second.IsScalar()) x.fail("where", fmt::format("the value of '{}' must be a scalar", kv.first.as<std::string>()));
      e.where.emplace_back(kv.first.as<std::string>(), kv.second.Scalar());
    }
  }
  return e;
}

Point parse_point(const YAML::Node& node, const ConfigSource& src, const std::string& document, const std::string& set,
                  const std::string& file) {
  Params p(node, point_schema(), src, {});
  Point pt;
  pt.document = document;
  pt.set_name = set;
  pt.file = file;
  pt.id = p.text("id");
  if (pt.id.empty() || pt.id.find_first_of(" \t") != std::string::npos) p.fail("id", "expected a non-empty dotted id without spaces");
  pt.source = p.text("source");
  pt.quantity = p.text("quantity");
  pt.unit = p.text("unit");
  pt.role = p.text("role");
  pt.cause = p.text("cause");
  pt.cause_kind = p.text("cause_kind");
  if (!pt.cause_kind.empty() && pt.cause.empty()) p.fail("cause_kind", "a cause_kind needs its cause");
  if (!pt.cause.empty() && pt.cause_kind.empty() && pt.role == "validation")
    p.fail("cause_kind", "a validation point's cause says its kind: workload, mechanism or document");
  pt.tolerance_rel = p.real("tolerance_rel");
  const int kinds = int(p.has("published")) + int(p.has("published_range")) + int(p.has("published_over")) +
                    int(p.has("trend"));
  if (kinds != 1) p.fail("published", "give exactly one of published, published_range, published_over or trend");
  if (p.has("published")) {
    pt.kind = PublishedKind::kValue;
    pt.published = p.real("published");
    if (pt.published == 0) p.fail("published", "a relative error needs a non-zero published value");
  } else if (p.has("published_range")) {
    pt.kind = PublishedKind::kRange;
    const auto r = p.real_list("published_range");
    if (r.size() != 2 || !(r[0] < r[1])) p.fail("published_range", "expected [low, high] with low < high");
    pt.lo = r[0];
    pt.hi = r[1];
  } else if (p.has("published_over")) {
    pt.kind = PublishedKind::kRange;  // open above: "over lo"
    pt.lo = p.real("published_over");
    pt.hi = std::numeric_limits<double>::infinity();
    if (pt.lo <= 0) p.fail("published_over", "a relative error needs a positive lower bound");
  } else {
    pt.kind = PublishedKind::kTrend;
    pt.trend = p.text("trend");
  }
  pt.experiment = p.text("experiment");
  pt.run_overrides = p.text_list("set");
  pt.device_at = p.text("device_at");
  pt.engine_at = p.text("engine_at");
  pt.fitted = p.text_list("fitted");
  const bool has_probe = p.has("probe"), has_exp = !pt.experiment.empty();
  if (has_probe == has_exp) p.fail(has_probe ? "probe" : "experiment", "give exactly one of experiment (+ extract) or probe");
  if (has_exp) {
    if (!p.has("extract")) p.fail("extract", "an experiment point needs extract: {dataset, where, column} or {function: NAME}");
    pt.extract = parse_extract(p);
  } else {
    pt.probe = yaml_clone(p.node("probe"));
    if (!pt.probe.IsMap() || !pt.probe["impl"].IsDefined()) p.fail("probe", "expected {impl: NAME, ...}");
    if (p.has("extract")) p.fail("extract", "a probe point has no extract (the probe gives the value)");
  }
  if (p.has("vary")) {
    const YAML::Node v = p.node("vary");
    if (pt.kind != PublishedKind::kTrend) p.fail("vary", "only a trend point varies a parameter over runs");
    if (!v.IsMap() || !v["key"].IsDefined() || !v["key"].IsScalar() || !v["values"].IsDefined() ||
        !v["values"].IsSequence() || v["values"].size() < 2 || v.size() != 2)
      p.fail("vary", "expected {key: KEY.PATH, values: [at least two values]}");
    if (!has_exp) p.fail("vary", "vary needs an experiment");
    pt.vary_key = v["key"].Scalar();
    for (const auto& x : v["values"]) pt.vary_values.push_back(yaml_to_string(x));
  }
  if (!pt.calibration() && !pt.fitted.empty())
    p.fail("fitted", "a validation point cannot be fitted to (make it a calibration point or drop 'fitted')");
  if (pt.calibration() && pt.fitted.empty()) p.fail("fitted", "a calibration point names the parameters fitted to it");
  if (pt.calibration() && pt.kind == PublishedKind::kTrend) p.fail("role", "a trend cannot calibrate (no value to fit)");
  pt.derived_from = p.text_list("derived_from");
  pt.interpolated_between = p.text_list("interpolated_between");
  pt.statement = p.text("statement");
  pt.representative = p.boolean("representative");
  pt.headline = p.boolean("headline");
  pt.cell = p.text("cell");
  if (pt.calibration() && !pt.derived_from.empty()) p.fail("derived_from", "only a validation point is derived");
  if (pt.calibration() && !pt.interpolated_between.empty())
    p.fail("interpolated_between", "only a validation point is interpolated");
  if (!pt.derived_from.empty() && !pt.interpolated_between.empty())
    p.fail("interpolated_between", "a point is derived or interpolated, not both");
  if (!pt.interpolated_between.empty() && pt.interpolated_between.size() != 2)
    p.fail("interpolated_between", "expected the two fitted points around it: [low, high]");
  if (pt.representative && pt.statement.empty()) p.fail("representative", "a representative names its statement");
  return pt;
}

std::string set_of_file(const fs::path& path) {
  std::string stem = path.stem().string();
  // 000_percache.yaml -> percache; ondevice_pixel.yaml -> ondevice
  if (stem.size() > 4 && std::isdigit(static_cast<unsigned char>(stem[0])) && stem[3] == '_') stem = stem.substr(4);
  const auto us = stem.find('_');
  return us == std::string::npos ? stem : stem.substr(0, us);
}

}  // namespace

std::string Point::published_text() const {
  switch (kind) {
    case PublishedKind::kValue: return fmt::format("{:.4g}", published);
    case PublishedKind::kRange: return std::isinf(hi) ? fmt::format(">{:.4g}", lo) : fmt::format("{:.4g}-{:.4g}", lo, hi);
    case PublishedKind::kTrend: return trend;
  }
  return "";
}

std::vector<Point> load_registry_file(const std::string& path) {
  const YAML::Node root = load_yaml_file(path);
  ConfigSource src{std::make_shared<std::string>(path), "", nullptr};
  if (!root.IsMap()) throw ConfigError(fmt::format("{}: expected a mapping with document and points", path));
  ParamSchema s;
  s.text("document", std::nullopt, "which source document (or public measurements) the points come from");
  s.text("set", std::string(), "the --set name of these points (default: from the file name)");
  s.text("notes", std::string(), "free text");
  s.node("points", "the published points");
  s.boolean("external", false, "public measurements (reported as the external set), not a seed document");
  Params p(root, s, src, {});
  const std::string document = p.text("document");
  const bool external = p.boolean("external");
  const std::string set = p.text("set").empty() ? set_of_file(path) : p.text("set");
  const YAML::Node points = p.node("points");
  if (!points.IsDefined() || !points.IsSequence()) p.fail("points", "expected a list of points");
  std::vector<Point> out;
  for (std::size_t i = 0; i < points.size(); ++i)
    out.push_back(parse_point(points[i], p.source_of("points").element(i), document, set, path));
  for (auto& pt : out) pt.external = external;
  check_hygiene(out, false);
  return out;
}

std::vector<Point> load_registry(const std::string& dir, const std::vector<std::string>& sets) {
  if (!is_dir(dir)) throw ConfigError(fmt::format("{}: no such registry directory", dir));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".yaml" && e.path().filename() != "calibration.yaml")
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<Point> all;
  std::set<std::string> ids;
  std::set<std::string> known_sets;
  for (const auto& f : files) {
    for (auto& pt : load_registry_file(f.string())) {
      if (!ids.insert(pt.id).second)
        throw ConfigError(fmt::format("{}: point id '{}' is used twice in the registry", f.string(), pt.id));
      known_sets.insert(pt.set_name);
      all.push_back(std::move(pt));
    }
  }
  check_hygiene(all, true);  // over the whole registry: groups and references may span files
  // Keep the requested sets by constructing a new vector, never by shifting elements: YAML::Node has no move
  // assignment, and its copy assignment onto a node that already holds a value rewrites the shared node data
  // in place, so remove_if's shifting overwrote the probe of an earlier kept point with a later one's (seen
  // as the ondevice set's predictions taking the transfer set's values when both were selected).
  if (!sets.empty()) {
    std::vector<Point> kept;
    for (auto& pt : all)
      if (std::find(sets.begin(), sets.end(), pt.set_name) != sets.end()) kept.push_back(std::move(pt));
    all = std::vector<Point>();
    all.swap(kept);
  }
  for (const auto& s : sets)
    if (!known_sets.count(s))
      throw UsageError(fmt::format("no registry points in set '{}' (known: {})", s, fmt::join(known_sets, ", ")));
  return all;
}

namespace {
// What determines a point's simulated value: its run (experiment, overrides, varied key) and its
// extractor as written, or its probe.
std::string value_signature(const Point& p) {
  if (!p.experiment.empty())
    return fmt::format("{}\n{}\n{}={}\n{}", p.experiment, fmt::join(p.run_overrides, ","), p.vary_key,
                       fmt::join(p.vary_values, ","), yaml_to_string(p.extract.args));
  return "probe\n" + yaml_to_string(p.probe);
}
}  // namespace

namespace {
using Where = std::vector<std::pair<std::string, std::string>>;

std::string run_signature(const Point& p) {
  return fmt::format("{} [{}]{}", p.experiment, fmt::join(p.run_overrides, ", "),
                     p.vary_key.empty() ? std::string() : fmt::format(" varying {}", p.vary_key));
}

std::string scalar_text(const YAML::Node& n) { return n.IsScalar() ? n.Scalar() : yaml_to_string(n); }

// A YAML argument that is one name or a list of names.
std::vector<std::string> names_of(const YAML::Node& n) {
  std::vector<std::string> out;
  if (!n.IsDefined() || n.IsNull()) return out;
  if (n.IsSequence())
    for (const auto& x : n) out.push_back(scalar_text(x));
  else
    out.push_back(scalar_text(n));
  return out;
}

Where where_of(const YAML::Node& n) {
  Where w;
  if (n.IsDefined() && n.IsMap())
    for (const auto& kv : n) w.emplace_back(kv.first.as<std::string>(), scalar_text(kv.second));
  return w;
}

// The rows a named extractor reads (extract.cpp run_function): its `where`, plus `key: NAME` for each
// row name it takes; `share` also reads the whole column (its denominator), i.e. every row.
std::vector<Where> function_rows(const Extract& e) {
  const Where base = where_of(e.args["where"]);
  std::vector<std::string> names;
  auto add = [&](const char* arg) {
    for (auto& n : names_of(e.args[arg])) names.push_back(std::move(n));
  };
  if (e.function == "columns_ratio") return {base};
  if (e.function == "ratio" || e.function == "ratios") add("numerator"), add("denominator");
  if (e.function == "reduction_pct") add("of"), add("vs");
  if (e.function == "difference") add("of"), add("minus");
  if (e.function == "sum") add("rows");
  if (e.function == "share") add("of");
  const std::string key = e.args["key"].IsDefined() ? scalar_text(e.args["key"]) : std::string();
  std::vector<Where> rows;
  for (const auto& name : names) {
    Where w = base;
    w.emplace_back(key, name);
    rows.push_back(std::move(w));
  }
  if (e.function == "share") rows.push_back(Where{});  // the column's total: every row
  return rows;
}

bool numeric_text(const std::string& s, double& value) {
  if (s.empty()) return false;
  char* end = nullptr;
  value = std::strtod(s.c_str(), &end);
  return *end == '\0' && std::isfinite(value);
}

// Equal as text, or as numbers ("8192" and "8192.0").
bool same_scalar(const std::string& a, const std::string& b) {
  double x = 0, y = 0;
  return a == b || (numeric_text(a, x) && numeric_text(b, y) && x == y);
}

std::string cell_text(const ReadCell& c) {
  std::vector<std::string> w;
  for (const auto& [k, v] : c.where) w.push_back(fmt::format("{}={}", k, v));
  return fmt::format("{}: {} {}{}", c.run, c.dataset, c.column,
                     w.empty() ? std::string(" (every row)") : fmt::format(" where {}", fmt::join(w, ", ")));
}
}  // namespace

std::vector<ReadCell> cells_read(const Point& p) {
  std::vector<ReadCell> out;
  if (p.experiment.empty()) return out;
  const Extract& e = p.extract;
  auto add = [&](const std::string& dataset, const std::vector<std::string>& columns, Where where) {
    std::sort(where.begin(), where.end());
    for (const auto& c : columns) out.push_back(ReadCell{run_signature(p), dataset, c, where});
  };
  if (e.function.empty()) {
    add(e.dataset, {e.column}, e.where);
    return out;
  }
  const std::string dataset = e.args["dataset"].IsDefined() ? scalar_text(e.args["dataset"]) : "/summary";
  std::vector<std::string> columns = names_of(e.args["column"]);
  for (auto& c : names_of(e.args["numerator_column"])) columns.push_back(std::move(c));
  for (auto& c : names_of(e.args["denominator_column"])) columns.push_back(std::move(c));
  for (const auto& rows : function_rows(e)) add(dataset, columns, rows);
  return out;
}

bool cells_overlap(const ReadCell& a, const ReadCell& b) {
  if (a.run != b.run || a.dataset != b.dataset || a.column != b.column) return false;
  for (const auto& [k, v] : a.where)
    for (const auto& [k2, v2] : b.where)
      if (k == k2 && !same_scalar(v, v2)) return false;
  return true;
}

namespace {
// The cells a calibration point pins: the one cell (or column of rows) a table extractor reads. A
// named extractor (a share, ratio or difference of several cells) pins only its combination, which
// the same-value rule covers: its inputs stay free (Figure 13's decode share fits the context length,
// not NPU vanilla's decode time, which other points may read).
std::vector<ReadCell> pinned_cells(const Point& p) {
  if (!p.extract.function.empty()) return {};
  return cells_read(p);
}
}  // namespace

std::map<std::string, std::vector<std::string>> fitted_parameter_cells(const std::vector<Point>& points) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& p : points) {
    if (!p.calibration()) continue;
    std::vector<std::string> cells;
    for (const auto& c : pinned_cells(p)) cells.push_back(cell_text(c));
    if (p.experiment.empty()) cells.push_back(fmt::format("probe of {}", p.id));
    if (!p.extract.function.empty()) cells.push_back(fmt::format("the {} value of {}", p.extract.function, p.id));
    for (const auto& parameter : p.fitted)
      for (const auto& c : cells) out[parameter].push_back(c);
  }
  return out;
}

std::map<std::string, FittedRead> validation_reads_of_fitted_values(const std::vector<Point>& points) {
  std::map<std::string, FittedRead> out;
  struct Fit {
    const Point* point;
    std::string signature;
    std::vector<ReadCell> cells;
  };
  std::vector<Fit> fits;
  for (const auto& p : points)
    if (p.calibration()) fits.push_back(Fit{&p, value_signature(p), pinned_cells(p)});
  for (const auto& v : points) {
    // A trend is pass/fail and in no median; the numeric points are what a fitted value could flatter.
    if (v.calibration() || v.kind == PublishedKind::kTrend) continue;
    const std::string signature = value_signature(v);
    const auto read = cells_read(v);
    for (const auto& [cal, cal_signature, cal_cells] : fits) {
      std::string how;
      if (cal_signature == signature) how = "the same value";
      for (const auto& a : read)
        for (const auto& b : cal_cells)
          if (how.empty() && cells_overlap(a, b)) how = cell_text(b);
      if (how.empty()) continue;
      out.emplace(v.id, FittedRead{cal->id, cal->fitted, how});
      break;
    }
  }
  return out;
}

namespace {
// A column name with its digit runs replaced by '#', and the runs' values.
std::pair<std::string, std::vector<double>> name_skeleton(const std::string& name) {
  std::string skeleton;
  std::vector<double> numbers;
  for (std::size_t i = 0; i < name.size();) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) {
      skeleton.push_back(name[i++]);
      continue;
    }
    std::size_t j = i;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    numbers.push_back(std::stod(name.substr(i, j - i)));
    skeleton.push_back('#');
    i = j;
  }
  return {skeleton, numbers};
}

// Where two single-row keyed maps (a row filter, a probe specification) differ in exactly one key whose
// values are both numbers: that key and the two values.
std::optional<std::tuple<std::string, double, double>> one_numeric_difference(const Where& a, const Where& b) {
  if (a.size() != b.size()) return std::nullopt;
  std::optional<std::tuple<std::string, double, double>> diff;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return std::nullopt;
    if (same_scalar(a[i].second, b[i].second)) continue;
    double x = 0, y = 0;
    if (diff || !numeric_text(a[i].second, x) || !numeric_text(b[i].second, y)) return std::nullopt;
    diff = std::make_tuple(a[i].first, x, y);
  }
  return diff;
}

Where probe_fields(const YAML::Node& probe) {
  Where w = where_of(probe);
  std::sort(w.begin(), w.end());
  return w;
}

// The series coordinate of `v` and `c` when both are points of one series (see the header): the
// series' name and the two positions.
std::optional<std::tuple<std::string, double, double>> series_positions(const Point& v, const Point& c) {
  if (v.kind == PublishedKind::kTrend || c.kind == PublishedKind::kTrend) return std::nullopt;
  if (v.experiment.empty() != c.experiment.empty()) return std::nullopt;
  if (v.experiment.empty()) return one_numeric_difference(probe_fields(v.probe), probe_fields(c.probe));
  if (!v.extract.function.empty() || !c.extract.function.empty() || !v.extract.reduce.empty() ||
      !c.extract.reduce.empty())
    return std::nullopt;  // a single cell each
  if (run_signature(v) != run_signature(c) || v.extract.dataset != c.extract.dataset) return std::nullopt;
  Where wv = v.extract.where, wc = c.extract.where;
  std::sort(wv.begin(), wv.end());
  std::sort(wc.begin(), wc.end());
  if (v.extract.column == c.extract.column) return one_numeric_difference(wv, wc);
  if (wv.size() != wc.size() || !std::equal(wv.begin(), wv.end(), wc.begin(), [](const auto& x, const auto& y) {
        return x.first == y.first && same_scalar(x.second, y.second);
      }))
    return std::nullopt;
  const auto [sv, nv] = name_skeleton(v.extract.column);
  const auto [sc, nc] = name_skeleton(c.extract.column);
  if (sv != sc || nv.size() != nc.size()) return std::nullopt;
  std::optional<std::tuple<std::string, double, double>> diff;
  for (std::size_t i = 0; i < nv.size(); ++i) {
    if (nv[i] == nc[i]) continue;
    if (diff) return std::nullopt;
    diff = std::make_tuple(sv, nv[i], nc[i]);
  }
  return diff;
}
}  // namespace

std::map<std::string, std::pair<std::string, std::string>> validation_between_fitted_points(
    const std::vector<Point>& points) {
  std::map<std::string, std::pair<std::string, std::string>> out;
  for (const auto& v : points) {
    if (v.calibration()) continue;
    // Per series: the nearest fitted point below and above v's position.
    std::map<std::string, std::pair<std::pair<double, const Point*>, std::pair<double, const Point*>>> sides;
    for (const auto& c : points) {
      if (!c.calibration()) continue;
      const auto pos = series_positions(v, c);
      if (!pos) continue;
      const auto& [series, at_v, at_c] = *pos;
      auto& [below, above] = sides.try_emplace(series, std::make_pair(-INFINITY, nullptr), std::make_pair(INFINITY, nullptr))
                                 .first->second;
      if (at_c < at_v && at_c > below.first) below = {at_c, &c};
      if (at_c > at_v && at_c < above.first) above = {at_c, &c};
    }
    for (const auto& [series, ends] : sides)
      if (ends.first.second && ends.second.second) {
        out.emplace(v.id, std::make_pair(ends.first.second->id, ends.second.second->id));
        break;
      }
  }
  return out;
}

std::map<std::string, std::string> validation_reading_a_fitted_value(const std::vector<Point>& points) {
  std::map<std::string, std::string> out;
  for (const auto& [validation, read] : validation_reads_of_fitted_values(points)) out[validation] = read.calibration;
  return out;
}

namespace {
// What a point quotes: its document, source, unit and published value (or range); the cell when given.
std::string quote_key(const Point& p) {
  return fmt::format("{}\n{}\n{}\n{}\n{}", p.document, p.source, p.unit, p.published_text(), p.cell);
}
}  // namespace

void check_one_statement_one_point(const std::vector<Point>& points) {
  std::map<std::string, const Point*> first;  // quote -> the first numeric point quoting it
  for (const auto& p : points) {
    if (p.kind == PublishedKind::kTrend) continue;  // a trend quotes no number
    const auto [it, fresh] = first.emplace(quote_key(p), &p);
    if (fresh) continue;
    const Point& q = *it->second;
    if (!q.statement.empty() && q.statement == p.statement) continue;
    throw ConfigError(fmt::format(
        "{}: points '{}' and '{}' quote the same published value ({} {}, source \"{}\"): one statement counts once; "
        "give both statement: ID (one representative: true), or, if the source states this value twice for "
        "different things, name each one's sentence fragment or table cell in cell:",
        p.file, q.id, p.id, p.published_text(), p.unit, p.source));
  }
}

void check_hygiene(const std::vector<Point>& points, bool whole) {
  std::map<std::string, const Point*> by_id;
  for (const auto& p : points) by_id.emplace(p.id, &p);
  for (const auto& [validation, read] : validation_reads_of_fitted_values(points)) {
    const Point& p = *by_id.at(validation);
    if (std::find(p.derived_from.begin(), p.derived_from.end(), read.calibration) == p.derived_from.end())
      throw ConfigError(fmt::format(
          "{}: validation point '{}' reads a value calibration point '{}' is fitted to (parameter {}; {}): mark it "
          "derived_from: [{}] (class derived, in no median) or make it read something else",
          p.file, p.id, read.calibration, fmt::join(read.parameters, ", "), read.how, read.calibration));
  }
  for (const auto& [validation, ends] : validation_between_fitted_points(points)) {
    const Point& p = *by_id.at(validation);
    if (p.interpolated_between.empty() && p.derived_from.empty())
      throw ConfigError(fmt::format(
          "{}: validation point '{}' lies between the fitted points '{}' and '{}' of its series: mark it "
          "interpolated_between: [{}, {}] (class interpolated, reported apart)",
          p.file, p.id, ends.first, ends.second, ends.first, ends.second));
  }
  check_one_statement_one_point(points);
  if (!whole) return;
  auto must_calibrate = [&](const Point& p, const char* key, const std::string& ref) {
    const auto it = by_id.find(ref);
    if (it == by_id.end())
      throw ConfigError(fmt::format("{}: point '{}': {} names '{}', which is no point of the registry", p.file, p.id, key, ref));
    if (!it->second->calibration())
      throw ConfigError(fmt::format("{}: point '{}': {} names '{}', which is not a calibration point", p.file, p.id, key, ref));
  };
  std::map<std::string, std::vector<const Point*>> groups;
  for (const auto& p : points) {
    for (const auto& ref : p.derived_from) must_calibrate(p, "derived_from", ref);
    for (const auto& ref : p.interpolated_between) must_calibrate(p, "interpolated_between", ref);
    if (!p.statement.empty()) groups[p.statement].push_back(&p);
  }
  for (const auto& [statement, members] : groups) {
    std::vector<std::string> reps;
    for (const Point* m : members)
      if (m->representative) reps.push_back(m->id);
    if (reps.size() != 1)
      throw ConfigError(fmt::format("{}: statement '{}' ({} points) needs exactly one representative: true, has {}{}",
                                    members.front()->file, statement, members.size(), reps.size(),
                                    reps.empty() ? std::string() : fmt::format(" ({})", fmt::join(reps, ", "))));
  }
}

std::vector<std::string> check_roles(const std::vector<Point>& points) {
  std::vector<std::string> problems;
  std::size_t numeric = 0, calibration = 0;
  for (const auto& p : points) {
    if (p.kind == PublishedKind::kTrend) continue;
    ++numeric;
    if (p.calibration()) ++calibration;
    if (p.calibration() == !p.fitted.empty()) continue;
    problems.push_back(fmt::format("{}: role {} but fitted lists {} parameters", p.id, p.role, p.fitted.size()));
  }
  if (3 * calibration > numeric)
    problems.push_back(fmt::format("{} of {} numeric points calibrate: at most a third may", calibration, numeric));
  return problems;
}

}  // namespace mobisim::experiments::fidelity
