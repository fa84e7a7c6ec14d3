// The fidelity registry, extractors, report arithmetic and `mobisim calibrate`.
// GCC 12 reports a -Wrestrict false positive inside test_util.h's command string once it is inlined
// here (GUIDE: known toolchain trap); the code is plain std::string concatenation.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>

#include <H5Cpp.h>
#include <fmt/format.h>

#include "devices/device.h"
#include "devices/storage.h"
#include "experiments/experiment.h"
#include "experiments/fidelity/calibrate.h"
#include "experiments/fidelity/compare.h"
#include "experiments/fidelity/extract.h"
#include "experiments/fidelity/fidelity.h"
#include "experiments/fidelity/ondevice_probe.h"
#include "experiments/fidelity/registry.h"
#include "experiments/workload_inputs.h"
#include "sim/build_id.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "sim/simulator.h"
#include "test_util.h"

namespace mobisim {
namespace {

using namespace experiments::fidelity;
using testing::TempDir;
using testing::write_text;

const std::string kRegistry = std::string(MOBISIM_SOURCE_DIR) + "/experiments/published";

TEST(FidelityRegistry, RolesAreDisjointAndAtMostAThirdCalibrates) {
  const auto points = load_registry(kRegistry);
  std::size_t numeric = 0, calibration = 0;
  for (const auto& p : points) {
    EXPECT_TRUE(p.role == "calibration" || p.role == "validation") << p.id;
    if (p.kind == PublishedKind::kTrend) continue;
    ++numeric;
    if (p.calibration()) ++calibration;
  }
  EXPECT_GE(numeric, 40u);
  EXPECT_LE(3 * calibration, numeric);
  EXPECT_TRUE(check_roles(points).empty());
  // What calibrate fits touches calibration points only, and every calibration point is fitted.
  const auto spec = CalibrationSpec::load(kRegistry + "/calibration.yaml");
  const auto problems = check_calibration(spec, points);
  EXPECT_TRUE(problems.empty()) << (problems.empty() ? "" : problems.front());
  for (const auto& f : spec.parameters)
    for (const auto& id : f.points)
      for (const auto& p : points)
        if (p.id == id) {
          EXPECT_TRUE(p.calibration()) << id;
        }
}

// Selecting several sets keeps every point's probe as its file wrote it (regression: remove_if shifted the
// points by YAML::Node copy assignment, which rewrites shared node data, so the ondevice set's probes took
// the transfer set's).
TEST(FidelityRegistry, SelectingSetsKeepsEachPointsProbe) {
  const auto both = load_registry(kRegistry, {"ondevice", "transfer"});
  std::map<std::string, std::string> written;
  for (const auto* file : {"/ondevice_public.yaml", "/ondevice_transfer.yaml", "/ondevice_cells.yaml"})
    for (const auto& p : load_registry_file(kRegistry + file)) written[p.id] = YAML::Dump(p.probe);
  ASSERT_EQ(both.size(), written.size());
  for (const auto& p : both) EXPECT_EQ(YAML::Dump(p.probe), written.at(p.id)) << p.id;
}

// ondevice_cells.yaml (points for the thin engine x unit cells, collected after the transfer set's calibration
// points were fixed) only validates: none of its points calibrates or is fitted, and calibration.yaml names none of
// them, so adding the file moved no parameter. Its points join the transfer set, so `mobisim ondevice` reports them.
TEST(FidelityRegistry, ThinCellPointsOnlyValidate) {
  const auto cells = load_registry_file(kRegistry + "/ondevice_cells.yaml");
  ASSERT_FALSE(cells.empty());
  const auto spec = CalibrationSpec::load(kRegistry + "/calibration.yaml");
  for (const auto& p : cells) {
    EXPECT_EQ(p.role, "validation") << p.id;
    EXPECT_TRUE(p.fitted.empty()) << p.id;
    EXPECT_EQ(p.set_name, "transfer") << p.id;
    for (const auto& f : spec.parameters)
      EXPECT_EQ(std::count(f.points.begin(), f.points.end(), p.id), 0) << p.id << " under " << f.key;
  }
}

// Issue 37 asks for at least 5 validation points per engine x unit. The transfer set (ondevice_transfer.yaml and
// ondevice_cells.yaml) reaches it in the cells that were thin before ondevice_cells.yaml (docs/ondevice_data.md,
// "Points added for the thin cells"); mllm x cpu has three only (the Xiaomi 14 commit message and the Pixel 9
// run of a DVFS fork's README, section "Third round for mllm x cpu"), and mnn x npu counts two builds of one
// configuration (MNN PR #4633, tables 1 and 2). Derived points, which enter
// no median, do not count. Removing or re-roling a point of these cells fails here.
TEST(FidelityRegistry, ThinCellsHaveFiveTransferValidationPoints) {
  std::map<std::string, int> validating;
  for (const auto& p : load_registry(kRegistry, {"transfer"})) {
    if (p.point_class() != "validation" || !p.probe || !p.probe["impl"] ||
        p.probe["impl"].as<std::string>() != "ondevice")
      continue;
    const std::string engine = p.probe["engine"] ? p.probe["engine"].as<std::string>() : std::string("mllm");
    ++validating[engine + " x " + p.probe["unit"].as<std::string>()];
  }
  for (const char* cell : {"executorch x gpu", "executorch x npu", "mlc x gpu", "mllm x npu", "mnn x npu"})
    EXPECT_GE(validating[cell], 5) << cell;
  EXPECT_GE(validating["mllm x cpu"], 3);
}

TEST(FidelityRegistry, CheckCalibrationRefusesAValidationPoint) {
  auto points = load_registry(kRegistry);
  CalibrationSpec spec = CalibrationSpec::load(kRegistry + "/calibration.yaml");
  spec.parameters.front().points.push_back("percache.table1.chunk_bytes");  // a validation point
  const auto problems = check_calibration(spec, points);
  ASSERT_FALSE(problems.empty());
  bool named = false;
  for (const auto& p : problems) named = named || p.find("validation point percache.table1.chunk_bytes") != std::string::npos;
  EXPECT_TRUE(named);
}

// One workload key may be fitted once per experiment (one named workload per model family), never
// twice in one experiment: one run cannot take two candidates for the same key.
TEST(FidelityRegistry, AnExperimentKeyIsFittedOncePerExperiment) {
  Point a, b, c;
  a.id = "a";
  a.role = b.role = c.role = "calibration";
  a.experiment = "qwen.yaml";
  b.id = "b";
  b.experiment = "llama.yaml";
  c.id = "c";
  c.experiment = "qwen.yaml";
  for (Point* p : {&a, &b, &c}) p->fitted = {"experiment.workload.synthetic.variant_prob"};
  CalibrationSpec spec;
  FreeParameter f;
  f.key = "experiment.workload.synthetic.variant_prob";
  f.points = {"a"};
  FreeParameter g = f;
  g.points = {"b"};
  spec.parameters = {f, g};
  EXPECT_TRUE(check_calibration(spec, {a, b}).empty());
  spec.parameters[1].points = {"c"};
  const auto problems = check_calibration(spec, {a, c});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems.front().find("listed twice for experiment qwen.yaml"), std::string::npos) << problems.front();
  // In the spec file the same key with the same points is still a duplicate.
  TempDir dir("fidelity-dup");
  const std::string param = "  - {key: experiment.workload.x, initial: 1, method: grid, values: [1, 2], points: [p]}\n";
  write_text(dir.file("c.yaml"), "parameters:\n" + param + param);
  EXPECT_THROW(CalibrationSpec::load(dir.file("c.yaml")), ConfigError);
}

// A validation point that reads the very value a calibration point is fitted to is not independent
// of the fit: the report names it. Same run and extractor (or the same probe) -> shared; another
// row, another run override or another probe -> not.
TEST(FidelityRegistry, ValidationReadingAFittedValueIsNamed) {
  const auto registry = validation_reading_a_fitted_value(load_registry(kRegistry));
  ASSERT_TRUE(registry.count("prefix.iphone.uncached_ttft_ms"));
  EXPECT_EQ(registry.at("prefix.iphone.uncached_ttft_ms"), "prefix.iphone.prefill_range_ms");
  EXPECT_FALSE(registry.count("prefix.android.uncached_ttft_ms"));  // another device's row
  TempDir dir("fidelity-shared");
  write_text(dir.file("t.yaml"),
             "document: test\nset: t\npoints:\n"
             "  - {id: t.cal, source: x, quantity: q, unit: s, role: calibration, published: 1, fitted: [device.x],\n"
             "     experiment: e.yaml, extract: {dataset: /summary, where: {device: a}, column: c}}\n"
             "  - {id: t.same, source: x, quantity: q, unit: s, role: validation, published: 2, derived_from: [t.cal],\n"
             "     experiment: e.yaml, extract: {dataset: /summary, where: {device: a}, column: c}}\n"
             "  - {id: t.row, source: x, quantity: q, unit: s, role: validation, published: 3,\n"
             "     experiment: e.yaml, extract: {dataset: /summary, where: {device: b}, column: c}}\n"
             "  - {id: t.run, source: x, quantity: q, unit: s, role: validation, published: 4, set: [experiment.k=2],\n"
             "     experiment: e.yaml, extract: {dataset: /summary, where: {device: a}, column: c}}\n"
             "  - {id: t.pcal, source: x, quantity: q, unit: s, role: calibration, published: 7, fitted: [engine.y],\n"
             "     probe: {impl: ondevice, device: d, model: m, phase: decode}}\n"
             "  - {id: t.psame, source: x, quantity: q, unit: s, role: validation, published: 5, derived_from: [t.pcal],\n"
             "     probe: {impl: ondevice, device: d, model: m, phase: decode}}\n"
             "  - {id: t.pother, source: x, quantity: q, unit: s, role: validation, published: 6,\n"
             "     probe: {impl: ondevice, device: d, model: m, phase: prefill}}\n");
  const auto shared = validation_reading_a_fitted_value(load_registry_file(dir.file("t.yaml")));
  EXPECT_EQ(shared, (std::map<std::string, std::string>{{"t.same", "t.cal"}, {"t.psame", "t.pcal"}}));
}

std::string one_point_file(const std::string& extra) {
  return "document: test\nset: t\npoints:\n  - id: t.a\n    source: x\n    quantity: q\n    unit: s\n"
         "    experiment: experiments/percache/table1.yaml\n    extract: {column: c}\n" + extra;
}

TEST(FidelityRegistry, MalformedPointsNameFileAndKey) {
  TempDir dir("fidelity");
  auto refuse = [&](const std::string& body, const std::string& expected) {
    write_text(dir.file("t.yaml"), body);
    try {
      load_registry_file(dir.file("t.yaml"));
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("t.yaml"), std::string::npos) << e.what();
    }
  };
  refuse(one_point_file("    role: validation\n"), "exactly one of published");
  refuse(one_point_file("    role: validation\n    published: 1\n    published_range: [1, 2]\n"), "exactly one of published");
  refuse(one_point_file("    role: validation\n    published: 1\n    fitted: [device.x]\n"), "validation point cannot be fitted");
  refuse(one_point_file("    role: calibration\n    published: 1\n"), "names the parameters fitted");
  refuse(one_point_file("    role: both\n    published: 1\n"), "role");
  refuse(one_point_file("    role: validation\n    published: 1\n    typo_key: 3\n"), "typo_key");
  refuse(one_point_file("    role: validation\n    published_range: [2, 1]\n"), "low < high");
  refuse(one_point_file("    role: validation\n    published: 1\n    cause: why\n"), "cause_kind");
  refuse(one_point_file("    role: validation\n    published: 1\n    cause: why\n    cause_kind: luck\n"), "cause_kind");
  refuse(one_point_file("    role: validation\n    published: 1\n    cause_kind: workload\n"), "needs its cause");
  refuse("document: test\nset: t\npoints:\n  - {id: t.b, source: x, quantity: q, unit: s, role: validation, published: 1,\n"
         "     experiment: e.yaml, extract: {function: ratio, column: c, key: k, numerator: a, denominator: b, cause: x}}\n",
         "unknown argument 'cause'");
  // Duplicate ids across files.
  write_text(dir.file("a.yaml"), one_point_file("    role: validation\n    published: 1\n"));
  write_text(dir.file("t.yaml"), one_point_file("    role: validation\n    published: 2\n"));
  EXPECT_THROW(load_registry(dir.path().string()), ConfigError);
}

// fidelity/reproduce may run anywhere: an experiment's "{shared}/..." path follows --shared (exported
// for the child runs), never the working directory.
TEST(FidelityRuns, SharedPathsFollowTheSharedFlagNotTheWorkingDirectory) {
  const char* before = std::getenv("MOBISIM_SHARED_DIR");
  const std::string saved = before ? before : "";
  const auto cwd = std::filesystem::current_path();
  TempDir dir("shared_flag");
  std::filesystem::current_path(dir.path());
  experiments::export_shared_flag("data_root");
  std::filesystem::current_path(cwd);
  EXPECT_EQ(experiments::expand_shared("{shared}/models/tok.model"), dir.file("data_root/models/tok.model"));
  EXPECT_EQ(experiments::expand_shared("../shared/models/tok.model"), "../shared/models/tok.model");
  EXPECT_EQ(experiments::expand_shared("x/{shared}/y"), "x/{shared}/y");
  experiments::export_shared_flag("");  // no flag: the environment stays as it was
  EXPECT_EQ(experiments::shared_dir(""), dir.file("data_root"));
  if (before) setenv("MOBISIM_SHARED_DIR", saved.c_str(), 1);
  else unsetenv("MOBISIM_SHARED_DIR");
}

TEST(FidelityReport, RelativeErrorOfValuesAndRanges) {
  Point v;
  v.kind = PublishedKind::kValue;
  v.published = 62.14;
  EXPECT_NEAR(relative_error(v, 62.4), (62.4 - 62.14) / 62.14, 1e-12);
  Point r;
  r.kind = PublishedKind::kRange;
  r.lo = 18;
  r.hi = 24;
  EXPECT_EQ(relative_error(r, 22.47), 0.0);
  EXPECT_NEAR(relative_error(r, 12.0), -6.0 / 18.0, 1e-12);   // below: against the low end
  EXPECT_NEAR(relative_error(r, 30.0), 6.0 / 24.0, 1e-12);    // above: against the high end
  EXPECT_DOUBLE_EQ(r.reference(), 21.0);
}

TEST(FidelityReport, TrendsNeedEveryStepInTheirDirection) {
  EXPECT_TRUE(trend_holds({3, 2, 2, 1}, "decreasing"));
  EXPECT_FALSE(trend_holds({3, 2, 2.5, 1}, "decreasing"));
  EXPECT_FALSE(trend_holds({2, 2, 2}, "decreasing"));  // flat is no trend
  EXPECT_TRUE(trend_holds({0.6, 0.7, 0.9}, "increasing"));
  EXPECT_FALSE(trend_holds({1}, "increasing"));
}

TEST(FidelityReport, SummaryMedianAndP90OverValidationOnly) {
  std::vector<Point> pts(6);
  std::vector<Evaluation> ev(6);
  const double errs[] = {0.05, -0.10, 0.30, 0.20, -0.01, 0.90};
  for (int i = 0; i < 6; ++i) {
    pts[i].id = "p" + std::to_string(i);
    pts[i].kind = PublishedKind::kValue;
    pts[i].published = 1;
    pts[i].role = i == 5 ? "calibration" : "validation";
    pts[i].cause = i == 2 ? "" : "explained";
    ev[i].point = &pts[i];
    ev[i].rel_error = errs[i];
  }
  const Summary s = summarize(ev);
  EXPECT_EQ(s.validation_numeric, 5u);
  EXPECT_EQ(s.calibration, 1u);
  EXPECT_NEAR(s.median_validation, 0.10, 1e-12);           // |0.01 0.05 0.10 0.20 0.30|
  EXPECT_NEAR(s.p90_validation, 0.20 + 0.6 * 0.10, 1e-12);  // numpy-style interpolation at 0.9 * 4
  EXPECT_EQ(s.over_25, 1u);
  EXPECT_EQ(s.over_25_unexplained, 1u);
  EXPECT_NE(s.line().find("median error 10.0%"), std::string::npos) << s.line();
}

// Workload differences apart from model gaps: the second median leaves out the points whose residual is
// put down to a workload difference, and keeps mechanism and document causes in.
TEST(FidelityReport, MedianWithoutWorkloadAttributedPointsAndCountsPerKind) {
  std::vector<Point> pts(6);
  std::vector<Evaluation> ev(6);
  const double errs[] = {0.05, -0.80, 0.60, 0.40, -0.02, 0.90};
  const char* kinds[] = {"", "workload", "workload", "mechanism", "document", "workload"};
  for (int i = 0; i < 6; ++i) {
    pts[i].id = "p" + std::to_string(i);
    pts[i].kind = PublishedKind::kValue;
    pts[i].published = 1;
    pts[i].role = i == 5 ? "calibration" : "validation";
    pts[i].cause_kind = kinds[i];
    pts[i].cause = pts[i].cause_kind.empty() ? "" : "why";
    ev[i].point = &pts[i];
    ev[i].rel_error = errs[i];
  }
  const Summary s = summarize(ev);
  EXPECT_NEAR(s.median_validation, 0.40, 1e-12);    // |0.02 0.05 0.40 0.60 0.80|
  EXPECT_EQ(s.not_workload, 3u);                    // p0 (no cause), p3 (mechanism), p4 (document)
  EXPECT_NEAR(s.median_not_workload, 0.05, 1e-12);  // |0.02 0.05 0.40|
  EXPECT_EQ(s.cause_kinds.at("workload"), 2u);      // the calibration point's kind is not counted
  EXPECT_EQ(s.cause_kinds.at("mechanism"), 1u);
  EXPECT_EQ(s.cause_kinds.at("document"), 1u);
  EXPECT_EQ(s.cause_kinds.at("none"), 1u);
  EXPECT_NE(s.causes_line().find("2 workload, 1 mechanism, 1 document, 1 without a cause"), std::string::npos)
      << s.causes_line();
  EXPECT_NE(s.causes_line().find("median error 5.0%"), std::string::npos) << s.causes_line();
}

// Every validation residual cause in the registry says its kind; the on-device section covers the
// issue's minimum (>= 40 points, >= 5 phones, >= 3 runtimes, all three units).
TEST(FidelityRegistry, EveryValidationCauseHasAKindAndOnDeviceCoverage) {
  const auto points = load_registry(kRegistry);
  std::size_t causes = 0;
  for (const auto& p : points)
    if (!p.calibration() && !p.cause.empty()) {
      ++causes;
      EXPECT_NE(std::find(kCauseKinds.begin(), kCauseKinds.end(), p.cause_kind), kCauseKinds.end()) << p.id;
    }
  EXPECT_GE(causes, 40u);
  std::vector<Evaluation> ev;
  for (const auto& p : points) {
    Evaluation e;
    e.point = &p;
    e.status = "unavailable";  // coverage counts the registry, not the values
    ev.push_back(e);
  }
  const OnDeviceCoverage c = ondevice_coverage(ev);
  EXPECT_GE(c.points, 40u);
  EXPECT_LE(3 * c.calibration, c.points);
  EXPECT_GE(c.phones.size(), 5u);
  EXPECT_GE(c.runtimes.size(), 3u);
  EXPECT_EQ(c.units, (std::vector<std::string>{"cpu", "gpu", "npu"}));
  EXPECT_NE(c.line().find("on-device: " + std::to_string(c.points) + " points"), std::string::npos) << c.line();
}

// A small result file: /summary with a text key, two numeric columns.
std::string write_result(const TempDir& dir) {
  const std::string path = dir.file("r.h5");
  h5::Writer w(path);
  h5::Table t;
  t.add("policy", std::vector<std::string>{"naive", "ragcache", "percache"});
  t.add("latency_s", std::vector<double>{100, 80, 70}, "s");
  t.add("background", std::vector<double>{0, 10, 20}, "s");
  t.add("users", std::vector<std::int64_t>{5, 5, 6});
  t.write(w.root(), "summary");
  w.commit();
  return path;
}

sim::Task<void> read_once(devices::Storage& st, double bytes);

Extract function_extract(const std::string& yaml) {
  Extract e;
  e.args = YAML::Load(yaml);
  e.function = e.args["function"].as<std::string>();
  return e;
}

TEST(FidelityExtract, TableRowsFunctionsAndErrors) {
  TempDir dir("fidelity");
  const std::string path = write_result(dir);
  Extract e;
  e.dataset = "/summary";
  e.column = "latency_s";
  e.where = {{"policy", "ragcache"}};
  EXPECT_EQ(extract_value(path, e), 80.0);
  e.where = {{"users", "5"}};  // numeric filter, two rows
  EXPECT_THROW(extract_value(path, e), InputError);
  e.reduce = "mean";
  EXPECT_EQ(extract_value(path, e), 90.0);
  e.where = {};
  e.reduce = "";
  EXPECT_EQ(extract_series(path, e), (std::vector<double>{100, 80, 70}));
  e.column = "missing";
  EXPECT_THROW(extract_value(path, e), InputError);

  EXPECT_DOUBLE_EQ(extract_value(path, function_extract(
                       "{function: reduction_pct, column: latency_s, key: policy, of: percache, vs: [naive, ragcache]}")),
                   100.0 * (1 - 70.0 / 80.0));
  EXPECT_DOUBLE_EQ(extract_value(path, function_extract(
                       "{function: ratio, column: latency_s, key: policy, numerator: naive, denominator: percache}")),
                   100.0 / 70.0);
  EXPECT_DOUBLE_EQ(extract_value(path, function_extract("{function: difference, column: latency_s, key: policy, of: "
                                                        "naive, minus: percache, scale: 100}")),
                   3000.0);
  EXPECT_DOUBLE_EQ(
      extract_value(path, function_extract("{function: share, column: latency_s, key: policy, of: naive, scale: 100}")),
      100.0 * 100.0 / 250.0);
  // A list of columns is summed: (70 + 20) vs (80 + 10).
  EXPECT_DOUBLE_EQ(extract_value(path, function_extract("{function: reduction_pct, column: [latency_s, background], "
                                                        "key: policy, of: percache, vs: [ragcache]}")),
                   0.0);
  EXPECT_DOUBLE_EQ(extract_value(path, function_extract("{function: columns_ratio, where: {policy: ragcache}, "
                                                        "numerator_column: background, denominator_column: latency_s}")),
                   10.0 / 80.0);
  EXPECT_THROW(extract_value(path, function_extract("{function: nope}")), ConfigError);
  EXPECT_THROW(extract_value(path, function_extract("{function: ratio, column: latency_s, key: policy, numerator: x, "
                                                    "denominator: naive}")),
               InputError);
}

// `ratios` divides inside each group of rows (DynaKV's speed-ups per model and precision); `columns_ratio`
// gives one value per selected row; `reduce` combines either. By hand on a 2 x 2 grid of (model, policy).
TEST(FidelityExtract, GroupedRatiosAndRowRatiosReduce) {
  TempDir dir("fidelity_groups");
  const std::string path = dir.file("g.h5");
  {
    h5::Writer w(path);
    h5::Table t;
    t.add("model", std::vector<std::string>{"s", "s", "s", "m", "m", "m"});
    t.add("policy", std::vector<std::string>{"dynakv", "pqcache", "clusterkv", "dynakv", "pqcache", "clusterkv"});
    t.add("latency", std::vector<double>{100, 150, 120, 200, 500, 260});
    t.add("memory_all", std::vector<double>{10, 30, 40, 20, 50, 60});
    t.add("memory_layer", std::vector<double>{5, 10, 8, 4, 25, 20});
    t.write(w.root(), "summary");
    w.commit();
  }
  // One numerator: one ratio per group, in the order the groups first appear.
  EXPECT_EQ(extract_series(path, function_extract("{function: ratios, column: latency, key: policy, numerator: pqcache, "
                                                  "denominator: dynakv, group_by: [model]}")),
            (std::vector<double>{1.5, 2.5}));
  // Several numerators, then the mean: (1.5 + 1.2 + 2.5 + 1.3) / 4.
  Extract mean = function_extract("{function: ratios, column: latency, key: policy, numerator: [pqcache, clusterkv], "
                                  "denominator: dynakv, group_by: [model]}");
  mean.reduce = "mean";
  EXPECT_DOUBLE_EQ(extract_value(path, mean), (1.5 + 1.2 + 2.5 + 1.3) / 4);
  mean.reduce = "";
  EXPECT_THROW(extract_value(path, mean), InputError);  // four values, no reduce
  // Without group_by the key must pick one row: two dynakv rows is an error naming them.
  EXPECT_THROW(extract_value(path, function_extract("{function: ratios, column: latency, key: policy, "
                                                    "numerator: pqcache, denominator: dynakv}")),
               InputError);
  // `where` narrows the groups: the m model alone.
  EXPECT_EQ(extract_series(path, function_extract("{function: ratios, column: latency, key: policy, numerator: clusterkv, "
                                                  "denominator: dynakv, where: {model: m}, group_by: [model]}")),
            (std::vector<double>{1.3}));
  // columns_ratio over every row of a policy, the largest kept: max(10/5, 20/4).
  Extract rows = function_extract("{function: columns_ratio, where: {policy: dynakv}, numerator_column: memory_all, "
                                  "denominator_column: memory_layer}");
  EXPECT_EQ(extract_series(path, rows), (std::vector<double>{2.0, 5.0}));
  rows.reduce = "max";
  EXPECT_DOUBLE_EQ(extract_value(path, rows), 5.0);
}

// "Over 10^4" is a range open above: inside it there is no error, below it the error is against its low end.
TEST(FidelityReport, OpenRangeCountsFromItsLowEnd) {
  TempDir dir("fidelity_open");
  const std::string file = dir.file("d.yaml");
  write_text(file,
             "document: d\nset: d\npoints:\n"
             "  - {id: d.over, source: s, quantity: q, published_over: 10000, unit: x, role: validation,\n"
             "     experiment: e.yaml, extract: {dataset: /summary, column: c}}\n"
             "  - {id: d.ratio, source: s, quantity: q, published: 2, unit: x, role: validation,\n"
             "     experiment: e.yaml, extract: {function: ratios, column: c, key: k, numerator: a, denominator: b,\n"
             "                                   group_by: [g], reduce: mean}}\n");
  const auto points = load_registry(dir.path().string());
  ASSERT_EQ(points.size(), 2u);
  const Point& over = points[0];
  EXPECT_EQ(over.kind, PublishedKind::kRange);
  EXPECT_TRUE(std::isinf(over.hi));
  EXPECT_DOUBLE_EQ(over.reference(), 10000.0);
  EXPECT_EQ(over.published_text(), ">1e+04");
  EXPECT_EQ(relative_error(over, 25000.0), 0.0);
  EXPECT_NEAR(relative_error(over, 430.0), (430.0 - 10000.0) / 10000.0, 1e-12);
  EXPECT_EQ(points[1].extract.reduce, "mean");  // a function's reduce is the point's
  // A range starting at 0 ("under 500 MB") measures a shortfall against its high end.
  Point under;
  under.kind = PublishedKind::kRange;
  under.lo = 0;
  under.hi = 5e8;
  EXPECT_NEAR(relative_error(under, -1e8), -0.2, 1e-12);
  // Two kinds at once, a non-positive bound, or a function's unknown reduce are refused with the key.
  for (const std::string bad : {"published_over: 10, published: 3", "published_over: 0",
                                "published: 2, extract: {function: ratios, reduce: median}"}) {
    write_text(file, "document: d\nset: d\npoints:\n  - {id: d.x, source: s, quantity: q, " + bad +
                         ", unit: x, role: validation, experiment: e.yaml" +
                         (bad.find("extract") == std::string::npos ? ", extract: {dataset: /summary, column: c}" : "") +
                         "}\n");
    EXPECT_THROW(load_registry(dir.path().string()), ConfigError) << bad;
  }
}

// A read command's host overhead (the DynaKV runtime's loader) sits on the serial submission path beside
// the controller: n commands of one request take n x (1/iops + overhead) there, then the access
// latency and the last transfer; the per-command and the analytic models agree, and 0 changes nothing.
TEST(FidelityMechanisms, ReadCommandOverheadSerialisesTheLoadersReads) {
  devices::StorageSpec s = devices::load_device_profile("oneplus-12").storage.value();
  EXPECT_EQ(s.read_command_overhead_us, 0.0);  // the device profile's own reads are unchanged
  const double base = s.read_seconds(16 * 16384.0);
  s.read_command_overhead_us = 200;
  s.max_transfer_kb = 16;  // one 16 KB command per page: 16 commands
  const double by_hand = 16 * (1.0 / 120000 + 200e-6) + 70e-6 + 16384 / 2.9e9;
  EXPECT_NEAR(s.read_seconds(16 * 16384.0), by_hand, 1e-9);
  for (auto model : {devices::StorageCommandModel::kAnalytic, devices::StorageCommandModel::kPerCommand}) {
    sim::Simulator sim;
    sim::StatGroup stats("dev");
    devices::Storage st(sim, s, "ufs", stats);
    st.set_command_model(model);
    sim.start(read_once(st, 16 * 16384.0));
    sim.run();
    EXPECT_NEAR(sim::to_seconds(sim.now()), by_hand, 1e-7);
  }
  // One stream's sustained rate is capped at 1 / (1/iops + overhead) commands per second, at any depth.
  EXPECT_NEAR(s.read_bps(16384.0, 32), 16384.0 / (1.0 / 120000 + 200e-6), 1e-3);
  s.read_command_overhead_us = 0;
  s.max_transfer_kb = devices::load_device_profile("oneplus-12").storage->max_transfer_kb;
  EXPECT_EQ(s.read_seconds(16 * 16384.0), base);
}

TEST(FidelityReport, ExperimentOverridesGoWhereThePointSays) {
  Point p;
  p.device_at = "experiment.devices.1.device";
  const auto o = experiment_overrides(p, {"device.storage.seq_read_gbps=1.5", "engine.cpu.x=2", "seed=3"});
  EXPECT_EQ(o, (std::vector<std::string>{"experiment.devices.1.device.storage.seq_read_gbps=1.5",
                                         "experiment.engine.cpu.x=2", "seed=3"}));
}

FreeParameter free_parameter(const std::string& key, const std::string& profile, std::vector<std::string> points) {
  FreeParameter f;
  f.key = key;
  f.profile = profile;
  f.points = std::move(points);
  return f;
}

// A profile value changes every run that holds the profile: its candidate must reach the other fitted
// points of its own point's experiment too (else a joint fit evaluates them at the old value), written
// where the profile sits in that run (device 0 here), not where the receiving point's own device sits
// (device 1). An experiment key reaches them as it is.
TEST(FidelityCalibrate, CandidatesReachEveryFittedPointOfTheSameRun) {
  Point a, b, c;
  a.id = "a";
  a.experiment = "e.yaml";
  a.device_at = "experiment.devices.0.device";
  b.id = "b";
  b.experiment = "e.yaml";
  b.device_at = "experiment.devices.1.device";
  c.id = "c";
  c.experiment = "other.yaml";
  CalibrationSpec spec;
  spec.parameters = {free_parameter("device.compute.gpu.compute_efficiency", "phone0", {"a"}),
                     free_parameter("experiment.workload.user_tokens_median", "", {"b"})};
  const auto o = candidates_for(spec, {0.5, 16}, {a, b, c});
  EXPECT_EQ(o.at("a"), (std::vector<std::string>{"device.compute.gpu.compute_efficiency=0.5",
                                                 "experiment.workload.user_tokens_median=16"}));
  EXPECT_EQ(o.at("b"), (std::vector<std::string>{"experiment.devices.0.device.compute.gpu.compute_efficiency=0.5",
                                                 "experiment.workload.user_tokens_median=16"}));
  EXPECT_EQ(o.count("c"), 0u);
  // Through experiment_overrides, b's run gets device 0's value at device 0.
  EXPECT_EQ(experiment_overrides(b, o.at("b")).front(), "experiment.devices.0.device.compute.gpu.compute_efficiency=0.5");
}

// A probe has no run: a profile value reaches it through the probe's own device (or engine) profile,
// or one that inherits from it (`base:`). Fitting two values of one NPU to two probes jointly must
// move both probes with both values: the K70 Pro's execution overhead changes its verify-32 point too.
TEST(FidelityCalibrate, ProfileCandidatesReachEveryProbeOfTheProfile) {
  auto probe = [](const std::string& id, const std::string& yaml) {
    Point p;
    p.id = id;
    p.probe = YAML::Load(yaml);
    return p;
  };
  const Point decode = probe("decode", "{impl: ondevice, device: redmi-k70-pro, engine: mllm, unit: npu, phase: decode}");
  const Point verify = probe("verify", "{impl: ondevice, device: redmi-k70-pro, unit: npu, phase: verify}");
  const Point heir = probe("heir", "{impl: ondevice, device: xiaomi-14, engine: mlc, unit: gpu, phase: decode}");
  const Point other = probe("other", "{impl: ondevice, device: oneplus-12, engine: mllm, unit: cpu, phase: decode}");
  const Point nameless = probe("nameless", "{impl: ondevice, engine: mlc, unit: npu}");  // no device: no device value
  CalibrationSpec spec;
  spec.parameters = {free_parameter("device.npu.exec_overhead_ms", "redmi-k70-pro", {"decode"}),
                     free_parameter("engine.npu.graph_chunk", "mllm", {"decode"})};
  const auto o = candidates_for(spec, {31, 64}, {decode, verify, heir, other, nameless});
  EXPECT_EQ(o.count("nameless"), 0u);
  EXPECT_EQ(o.at("decode"), (std::vector<std::string>{"device.npu.exec_overhead_ms=31", "engine.npu.graph_chunk=64"}));
  // No engine named: the default engine (mllm) is the one it reads.
  EXPECT_EQ(o.at("verify"), (std::vector<std::string>{"device.npu.exec_overhead_ms=31", "engine.npu.graph_chunk=64"}));
  EXPECT_EQ(o.at("heir"), (std::vector<std::string>{"device.npu.exec_overhead_ms=31"}));  // xiaomi-14: base redmi-k70-pro
  EXPECT_EQ(o.at("other"), (std::vector<std::string>{"engine.npu.graph_chunk=64"}));
}

// `mobisim calibrate` end to end on a made-up published value: Table 1's prefill at 50 s instead of
// 62.14 s must pull the Pixel 7 CPU efficiency up by 62.4/50 and reproduce 50 s; the written profile
// names the point.
TEST(FidelityCalibrate, FitsAParameterToItsCalibrationPoint) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  TempDir dir("fidelity-cal");
  std::filesystem::create_directories(dir.file("reg"));
  write_text(dir.file("reg/t.yaml"),
             "document: test\nset: t\npoints:\n"
             "  - {id: t.prefill, source: made up, quantity: prefill, published: 50, unit: s, role: calibration,\n"
             "     experiment: experiments/percache/table1.yaml, fitted: [device.compute.cpu.compute_efficiency],\n"
             "     extract: {dataset: /tables/latency, where: {operation: \"LLM Prefilling (349 tokens)\"}, column: simulated_s}}\n"
             "  - {id: t.v1, source: x, quantity: decode, published: 10.95, unit: s, role: validation,\n"
             "     experiment: experiments/percache/table1.yaml,\n"
             "     extract: {dataset: /tables/latency, where: {operation: \"LLM Decoding (136 tokens)\"}, column: simulated_s}}\n"
             "  - {id: t.v2, source: x, quantity: bytes, published: 87.0e6, unit: bytes, role: validation,\n"
             "     experiment: experiments/percache/table1.yaml,\n"
             "     extract: {dataset: /tables/storage, where: {component: \"QKV Cache per chunk (152 tokens)\"}, column: simulated_bytes}}\n");
  write_text(dir.file("cal.yaml"), "parameters:\n  - {key: device.compute.cpu.compute_efficiency, profile: pixel7, initial: 0.031,\n"
                                   "     bounds: [0.005, 0.5], points: [t.prefill]}\n");
  const auto r = testing::run_mobisim_in(dir.path().string(), "calibrate --registry reg --spec cal.yaml --quiet --out fitted --runs runs");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string profile = testing::read_bytes(dir.file("fitted/pixel7.yaml"));
  ASSERT_NE(profile.find("base: pixel7"), std::string::npos) << profile;
  ASSERT_NE(profile.find("fitted by mobisim calibrate (GSL, was 0.031) to t.prefill"), std::string::npos) << profile;
  const YAML::Node y = YAML::Load(profile);
  const double eff = y["compute"]["cpu"]["compute_efficiency"].as<double>();
  // Prefill time ~ 1 / efficiency: the profile's 0.0387 gives Table 1's 62.14 s.
  EXPECT_NEAR(eff, 0.0387082 * 62.14 / 50.0, 0.0387082 * 62.14 / 50.0 * 0.02);
  // The fidelity report over the same registry: the fitted point is calibration, the others validation.
  const auto f = testing::run_mobisim_in(dir.path().string(), "fidelity --registry reg --out rep --runs rep --no-plot --quiet");
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("SEED DOCUMENTS, all validation points: median"), std::string::npos) << f.output;
  EXPECT_NE(f.output.find(" over 2 ("), std::string::npos) << f.output;
  h5::Reader rep(dir.file("rep/fidelity.h5"));
  EXPECT_EQ(rep.strings("points/role"), (std::vector<std::string>{"calibration", "validation", "validation"}));
  EXPECT_EQ(rep.strings("points/class"), (std::vector<std::string>{"calibration", "validation", "validation"}));
  EXPECT_EQ(rep.strings("points/scope"), (std::vector<std::string>{"seed", "seed", "seed"}));
  // A second report reuses the runs (same configuration hash): nothing runs again.
  const auto again = testing::run_mobisim_in(dir.path().string(), "fidelity --registry reg --out rep --runs rep --no-plot");
  EXPECT_EQ(again.output.find("[fidelity]"), std::string::npos) << again.output;
  // A run written by another build (sim/build_id.h) is not reused: the configuration alone does not
  // say which model simulated it.
  std::vector<std::string> runs;
  for (const auto& f : std::filesystem::directory_iterator(dir.file("rep/runs")))
    if (f.path().extension() == ".h5") runs.push_back(f.path().string());
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(h5::Reader(runs[0]).attr_string("/", "mobisim_build").size(), 16u);
  {
    H5::H5File f(runs[0], H5F_ACC_RDWR);
    h5::write_attr(f.openGroup("/"), "mobisim_build", std::string("0000000000000000"));
  }
  h5::reseal(runs[0]);
  const auto other_build = testing::run_mobisim_in(dir.path().string(), "fidelity --registry reg --out rep --runs rep --no-plot");
  EXPECT_NE(other_build.output.find("[fidelity] 1/1 runs"), std::string::npos) << other_build.output;
  EXPECT_NE(h5::Reader(runs[0]).attr_string("/", "mobisim_build"), "0000000000000000");
  // A build that cannot read its own executable is "unknown": no file counts as its own.
  EXPECT_TRUE(is_this_build(build_id()));
  EXPECT_FALSE(is_this_build("unknown"));
  EXPECT_FALSE(is_this_build(""));
  // Rerun everything at another thread count: the same report, byte for byte.
  const auto rerun = testing::run_mobisim_in(dir.path().string(),
                                             "fidelity --registry reg --out rep2 --runs rep2 --no-plot --quiet --run --threads 3");
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_EQ(testing::read_bytes(dir.file("rep/fidelity.csv")).size() > 0, true);
  h5::Reader rep2(dir.file("rep2/fidelity.h5"));
  EXPECT_EQ(rep2.doubles("points/simulated"), rep.doubles("points/simulated"));
  EXPECT_EQ(rep2.strings("points/verdict"), rep.strings("points/verdict"));
}

// A discrete experiment key fitted by grid, jointly with a continuous one by GSL (coordinate passes),
// on Table 1's storage rows, which are hand-computable: a knowledge chunk stores chunk_words x 6 bytes
// of text + embedding_dim (1024) x 4 bytes of embedding, a QA entry qa_entry_kb x 1000 bytes. A made-up
// 4996-byte chunk is 150 words (6 x 150 + 4096) and a 5000-byte entry 5 kB.
TEST(FidelityCalibrate, GridFitsADiscreteKeyJointlyWithAContinuousOne) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  TempDir dir("fidelity-grid");
  std::filesystem::create_directories(dir.file("reg"));
  write_text(dir.file("reg/t.yaml"),
             "document: test\nset: t\npoints:\n"
             "  - {id: t.chunk, source: made up, quantity: chunk, published: 4996, unit: bytes, role: calibration,\n"
             "     experiment: experiments/percache/table1.yaml, fitted: [experiment.chunk_words],\n"
             "     extract: {dataset: /tables/storage, where: {component: \"Knowledge Chunk (text + embedding)\"}, column: simulated_bytes}}\n"
             "  - {id: t.qa, source: made up, quantity: qa, published: 5000, unit: bytes, role: calibration,\n"
             "     experiment: experiments/percache/table1.yaml, fitted: [experiment.qa_entry_kb],\n"
             "     extract: {dataset: /tables/storage, where: {component: \"QA Bank entry\"}, column: simulated_bytes}}\n");
  write_text(dir.file("cal.yaml"),
             "parameters:\n"
             "  - {key: experiment.chunk_words, initial: 100, values: [50, 100, 150, 200], points: [t.chunk]}\n"
             "  - {key: experiment.qa_entry_kb, initial: 4, bounds: [1, 20], points: [t.qa]}\n");
  const auto r = testing::run_mobisim_in(dir.path().string(),
                                         "calibrate --registry reg --spec cal.yaml --quiet --out fitted --runs runs");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("grid: 2 coordinate pass(es)"), std::string::npos) << r.output;  // 150 found, then confirmed
  const std::string text = testing::read_bytes(dir.file("fitted/experiment-table1.yaml"));
  EXPECT_EQ(text.find("base:"), std::string::npos) << text;  // keys of the experiment itself
  EXPECT_NE(text.find("fitted by mobisim calibrate (grid of 4 values, was 100) to t.chunk"), std::string::npos) << text;
  const YAML::Node y = YAML::Load(text);
  EXPECT_EQ(y["experiment"]["chunk_words"].as<int>(), 150);
  EXPECT_NEAR(y["experiment"]["qa_entry_kb"].as<double>(), 5.0, 1e-4);
  // The grid key alone (--only): the continuous one held at its initial value, nothing GSL-fitted.
  const auto only = testing::run_mobisim_in(
      dir.path().string(), "calibrate --registry reg --spec cal.yaml --quiet --out only --runs runs --only experiment.chunk_words");
  ASSERT_EQ(only.exit_code, 0) << only.output;
  const YAML::Node o = YAML::Load(testing::read_bytes(dir.file("only/experiment-table1.yaml")));
  EXPECT_EQ(o["experiment"]["chunk_words"].as<int>(), 150);
  EXPECT_FALSE(o["experiment"]["qa_entry_kb"].IsDefined());
  // Bad specs name the key: a grid value list without the initial value, values on a GSL key.
  write_text(dir.file("bad.yaml"), "parameters:\n  - {key: experiment.chunk_words, initial: 120, values: [50, 100], points: [t.chunk]}\n");
  EXPECT_THROW(CalibrationSpec::load(dir.file("bad.yaml")), ConfigError);
  write_text(dir.file("bad2.yaml"), "parameters:\n  - {key: experiment.chunk_words, profile: pixel7, initial: 100, values: [100], points: [t.chunk]}\n");
  EXPECT_THROW(CalibrationSpec::load(dir.file("bad2.yaml")), ConfigError);
}

// A fitted workload key is written as the named workload it passes through: `base: NAME` + the key,
// commented with its point (the file is usable in place of NAME: rag_qa expands `base:`).
TEST(FidelityCalibrate, WorkloadKeyIsWrittenAsAFittedWorkload) {
  TempDir dir("fidelity-wl");
  Point p;
  p.id = "percache.calibrated.qa_hit_rate";
  p.document = "PerCache";
  p.source = "Figure 11";
  p.unit = "fraction";
  p.published = 0.3333;
  p.experiment = "experiments/percache/fig14_calibrated.yaml";
  CalibrationSpec spec;
  spec.file = "calibration.yaml";
  FreeParameter f;
  f.key = "experiment.workload.generate.queries.paraphrase_prob";
  f.initial = 0.775;
  f.values = {0.75, 0.775, 0.8};
  f.grid = true;
  f.points = {p.id};
  spec.parameters.push_back(f);
  FitResult fit;
  fit.free = {true};
  fit.initial = {0.775};
  fit.fitted = {0.8};
  fit.points = {&p};
  fit.after = {0.36};
  const auto paths = write_fitted_profiles(spec, fit, dir.file("out"));
  ASSERT_EQ(paths.size(), 1u);
  EXPECT_EQ(std::filesystem::path(paths.front()).filename(), "workload-percache_doc_calibrated.yaml");
  const std::string text = testing::read_bytes(paths.front());
  EXPECT_NE(text.find("\nbase: percache_doc_calibrated\n"), std::string::npos) << text;
  EXPECT_NE(text.find("fitted by mobisim calibrate (grid of 3 values, was 0.775) to percache.calibrated.qa_hit_rate"),
            std::string::npos)
      << text;
  EXPECT_EQ(YAML::Load(text)["queries"]["paraphrase_prob"].as<double>(), 0.8);
}

sim::Task<void> read_once(devices::Storage& st, double bytes) { co_await st.read(bytes); }

// The runtime's load cost per byte (the mechanism behind PerCache Table 1's load row): a read pays
// its I/O and then bytes x load_ns_per_byte, in the simulation as in the analytic time; 0 changes
// nothing.
TEST(FidelityMechanisms, LoadCostPerByteFollowsTheIo) {
  devices::StorageSpec s = devices::load_device_profile("pixel7").storage.value();
  s.load_ns_per_byte = 0;
  const double io = s.read_seconds(174e6);
  s.load_ns_per_byte = 5.0;
  EXPECT_NEAR(s.read_seconds(174e6), io + 174e6 * 5e-9, 1e-12);  // 0.87 s on top of the read
  sim::Simulator sim;
  sim::StatGroup stats("dev");
  devices::Storage st(sim, s, "ufs", stats);
  sim.start(read_once(st, 174e6));
  sim.run();
  EXPECT_NEAR(sim::to_seconds(sim.now()), s.read_seconds(174e6), 0.0005);
  // Built-in profiles other than the one fitted to it keep 0 (their results do not change).
  EXPECT_EQ(devices::load_device_profile("oneplus-12").storage->load_ns_per_byte, 0.0);
}

// PerCache Figure 13's per-layer projections as the Table 1 driver reports them: each is the roofline
// time of one layer's operator in the 349-token prefill on the Pixel 7 CPU, compute-bound at the fitted
// 0.0387 of the 1.03 TOPS int8 peak, plus the 20 us per-operator overhead. By hand: Q is 2 x 349 x 3072
// x 3072 FLOP = 165.2 ms; K (3072 x 1024, 8 KV heads of 128) a third of that, 55.1 ms. V has K's shape
// but is Q6_K in mllm's Q4_K file (linear_dtypes), whose dot products mllm's engine profile makes 1.875x
// as costly: 103.3 ms (the document: 162, 55, 113).
TEST(FidelityMechanisms, TableOneProjectionsArePerLayerRooflineTimes) {
  TempDir dir("fidelity-projections");
  experiments::RunOptions o;
  o.output_override = dir.file("t1.h5");
  o.no_plot = true;
  o.quiet = true;
  ASSERT_EQ(experiments::run_experiment_file(std::string(MOBISIM_SOURCE_DIR) + "/experiments/percache/table1.yaml", o), 0);
  h5::Reader r(dir.file("t1.h5"));
  EXPECT_EQ(r.strings("tables/projections/operation"),
            (std::vector<std::string>{"q_proj (one layer, 349 tokens)", "k_proj (one layer, 349 tokens)",
                                      "v_proj (one layer, 349 tokens)"}));
  const double rate = 1.03e12 * 0.0387082;  // FLOP/s
  const auto ms = r.doubles("tables/projections/simulated_ms");
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_NEAR(ms[0], 1e3 * 2.0 * 349 * 3072 * 3072 / rate + 0.02, 0.01);
  EXPECT_NEAR(ms[1], 1e3 * 2.0 * 349 * 3072 * 1024 / rate + 0.02, 0.01);
  EXPECT_NEAR(ms[2], 1e3 * 2.0 * 349 * 3072 * 1024 * 1.875 / rate + 0.02, 0.01);
  EXPECT_EQ(r.doubles("tables/projections/document_ms"), (std::vector<double>{162, 55, 113}));
}

// Issue 38: the honest fidelity accounting. A validation point reading a fitted value must be marked
// derived (and then counts in no median); a statement group counts once; a range scores against its
// midpoint in the medians; the headline median is per document. Every expected number is worked by hand.
std::string header() { return std::string("document: test\nset: t\npoints:\n"); }

std::string calibration_point() {
  return std::string(
      "  - {id: t.cal, source: x, quantity: q, unit: s, role: calibration, published: 1, fitted: [device.x],\n"
      "     experiment: e.yaml, extract: {dataset: /summary, where: {device: a}, column: c}}\n");
}

std::string reading_point(const std::string& extra) {
  std::string s("  - {id: t.same, source: x, quantity: q, unit: s, role: validation, published: 2,");
  s.append(extra);
  s.append("\n     experiment: e.yaml, extract: {dataset: /summary, where: {device: a}, column: c}}\n");
  return s;
}

TEST(FidelityHonest, AValidationPointReadingAFittedColumnIsRefusedUnlessDerived) {
  TempDir dir("fidelity-honest");
  std::string body = header();
  body.append(calibration_point()).append(reading_point(""));
  write_text(dir.file("t.yaml"), body);
  try {
    load_registry(dir.path().string());
    ADD_FAILURE() << "an unmarked validation point reading a fitted value was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("t.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("t.same"), std::string::npos) << what;
    EXPECT_NE(what.find("t.cal"), std::string::npos) << what;
    EXPECT_NE(what.find("derived_from"), std::string::npos) << what;
  }
  EXPECT_THROW(load_registry_file(dir.file("t.yaml")), ConfigError);  // the file alone too
  // Marked: accepted, classed derived.
  body = header();
  body.append(calibration_point()).append(reading_point(" derived_from: [t.cal],"));
  write_text(dir.file("t.yaml"), body);
  const auto points = load_registry(dir.path().string());
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].point_class(), "calibration");
  EXPECT_EQ(points[1].point_class(), "derived");
  // derived_from must name a calibration point of the registry.
  body = header();
  body.append(calibration_point()).append(reading_point(" derived_from: [t.nothing],"));
  write_text(dir.file("t.yaml"), body);
  EXPECT_THROW(load_registry(dir.path().string()), ConfigError);
}

TEST(FidelityHonest, StatementGroupsNeedExactlyOneRepresentative) {
  TempDir dir("fidelity-honest-groups");
  auto point = [](const std::string& id, const std::string& extra) {
    std::string s("  - {id: ");
    s.append(id).append(", source: x, quantity: q, unit: s, role: validation, published: 2, ").append(extra);
    s.append(" experiment: e.yaml, extract: {dataset: /summary, where: {device: ").append(id).append("}, column: c}}\n");
    return s;
  };
  std::string body = header();
  body.append(point("t.a", "statement: g,")).append(point("t.b", "statement: g,"));
  write_text(dir.file("t.yaml"), body);
  EXPECT_THROW(load_registry(dir.path().string()), ConfigError);  // none
  body = header();
  body.append(point("t.a", "statement: g, representative: true,")).append(point("t.b", "statement: g, representative: true,"));
  write_text(dir.file("t.yaml"), body);
  EXPECT_THROW(load_registry(dir.path().string()), ConfigError);  // two
  body = header();
  body.append(point("t.a", "representative: true,"));
  write_text(dir.file("t.yaml"), body);
  EXPECT_THROW(load_registry(dir.path().string()), ConfigError);  // a representative without its statement
  body = header();
  body.append(point("t.a", "statement: g, representative: true,")).append(point("t.b", "statement: g,"));
  write_text(dir.file("t.yaml"), body);
  const auto points = load_registry(dir.path().string());
  EXPECT_TRUE(points[0].counted());
  EXPECT_FALSE(points[1].counted());
}

// A range's midpoint error, worked by hand: [650, 900] has midpoint 775.
TEST(FidelityHonest, MidpointErrorOfARange) {
  Point r;
  r.kind = PublishedKind::kRange;
  r.lo = 650;
  r.hi = 900;
  EXPECT_EQ(relative_error(r, 700), 0.0);                       // inside: no distance
  EXPECT_NEAR(midpoint_error(r, 700), (700.0 - 775.0) / 775.0, 1e-12);  // -9.677%
  EXPECT_NEAR(midpoint_error(r, 700), -0.0967741935483871, 1e-12);
  EXPECT_NEAR(midpoint_error(r, 1000), 225.0 / 775.0, 1e-12);
  Point v;
  v.kind = PublishedKind::kValue;
  v.published = 4.2;
  EXPECT_NEAR(midpoint_error(v, 3.5), relative_error(v, 3.5), 1e-15);  // a value: the same error
  Point over;                                                         // "over 10": no middle
  over.kind = PublishedKind::kRange;
  over.lo = 10;
  over.hi = std::numeric_limits<double>::infinity();
  EXPECT_EQ(midpoint_error(over, 25), 0.0);
  EXPECT_NEAR(midpoint_error(over, 5), -0.5, 1e-12);
}

struct Tiny {
  std::vector<Point> pts;
  std::vector<Evaluation> ev;
  void add(const std::string& id, const std::string& set, const std::string& role, double mid_error) {
    Point p;
    p.id = id;
    p.set_name = set;
    p.kind = PublishedKind::kValue;
    p.published = 1;
    p.role = role;
    if (role == "calibration") p.fitted = {"device.x"};
    pts.push_back(p);
    Evaluation e;
    e.rel_error = mid_error;
    e.mid_error = mid_error;
    ev.push_back(e);
  }
  std::vector<Evaluation>& bind() {
    for (std::size_t i = 0; i < ev.size(); ++i) ev[i].point = &pts[i];
    return ev;
  }
};

// Derived and interpolated points, and a statement group's other members, are in no median.
TEST(FidelityHonest, DerivedPointIsNotInTheMedianAndAGroupCountsOnce) {
  Tiny t;
  t.add("a.v1", "a", "validation", 0.02);
  t.add("a.v2", "a", "validation", -0.08);
  t.add("a.v3", "a", "validation", 0.30);
  t.add("a.derived", "a", "validation", 0.001);  // would pull the median down
  t.pts.back().derived_from = {"a.cal"};
  t.add("a.interp", "a", "validation", 0.003);
  t.pts.back().interpolated_between = {"a.cal", "a.cal2"};
  t.add("a.cal", "a", "calibration", 0.0);
  t.add("a.rep", "a", "validation", 0.50);   // one statement on two phones: counts once
  t.pts.back().statement = "g";
  t.pts.back().representative = true;
  t.add("a.other", "a", "validation", 0.004);
  t.pts.back().statement = "g";
  const HonestSummary h = honest_summary(t.bind());
  // Counted: |0.02|, |-0.08|, 0.30, 0.50 -> median (0.08 + 0.30) / 2 = 0.19.
  EXPECT_EQ(h.seed.n, 4u);
  EXPECT_NEAR(h.seed.median, 0.19, 1e-12);
  EXPECT_EQ(h.seed.within_10, 2u);
  EXPECT_EQ(h.derived.n, 1u);
  EXPECT_EQ(h.interpolated.n, 1u);
  EXPECT_EQ(h.sensitivity.n, 1u);
  EXPECT_NEAR(h.sensitivity.median, 0.004, 1e-12);
  // Without the rules the median of the seven validation-role points would be 0.02.
  EXPECT_EQ(h.external.n, 0u);
}

// The headline median per document and overall, and the external set apart from the seeds.
TEST(FidelityHonest, HeadlineMedianPerDocument) {
  Tiny t;
  t.add("a.h1", "a", "validation", 0.10);
  t.pts.back().headline = true;
  t.add("a.h2", "a", "validation", -0.30);
  t.pts.back().headline = true;
  t.add("a.x", "a", "validation", 0.90);
  t.add("b.h1", "b", "validation", 0.04);
  t.pts.back().headline = true;
  t.add("b.h2", "b", "validation", 0.06);
  t.pts.back().headline = true;
  t.add("b.h3", "b", "validation", -0.50);
  t.pts.back().headline = true;
  t.add("b.hcal", "b", "calibration", 0.0);  // a fitted headline number: in no median
  t.pts.back().headline = true;
  t.add("ext.1", "ext", "validation", 0.07);
  t.pts.back().external = true;
  t.add("ext.2", "ext", "validation", 0.21);
  t.pts.back().external = true;
  const HonestSummary h = honest_summary(t.bind());
  ASSERT_EQ(h.documents, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(h.headline.at("a").n, 2u);
  EXPECT_NEAR(h.headline.at("a").median, 0.20, 1e-12);   // |0.10|, |-0.30|
  EXPECT_EQ(h.headline.at("b").n, 3u);
  EXPECT_NEAR(h.headline.at("b").median, 0.06, 1e-12);   // 0.04, 0.06, 0.50
  EXPECT_EQ(h.headline_all.n, 5u);
  EXPECT_NEAR(h.headline_all.median, 0.10, 1e-12);       // 0.04 0.06 0.10 0.30 0.50
  EXPECT_EQ(h.headline_tagged, 6u);
  EXPECT_EQ(h.headline_not_counted, 1u);
  EXPECT_EQ(h.seed.n, 6u);
  EXPECT_NEAR(h.seed.median, (0.10 + 0.30) / 2, 1e-12);  // 0.04 0.06 0.10 0.30 0.50 0.90
  EXPECT_NEAR(h.seed_by_document.at("a").median, 0.30, 1e-12);  // 0.10 0.30 0.90
  EXPECT_NEAR(h.seed_by_document.at("b").median, 0.06, 1e-12);  // 0.04 0.06 0.50 (the calibration point apart)
  EXPECT_EQ(h.seed_by_document.count("ext"), 0u);
  EXPECT_EQ(h.external.n, 2u);
  EXPECT_NEAR(h.external.median, 0.14, 1e-12);
  const auto lines = h.lines();
  bool found = false;
  for (const auto& l : lines) found = found || l.find("headline b: median 6.0% over 3") != std::string::npos;
  EXPECT_TRUE(found);
}

// The registry itself: the points issue 38 names are classed as it says.
TEST(FidelityHonest, RegistryClassesTheNamedPoints) {
  const auto points = load_registry(kRegistry);
  auto find = [&](const std::string& id) -> const Point& {
    for (const auto& p : points)
      if (p.id == id) return p;
    throw Error("no point " + id);
  };
  for (const char* id : {"prefix.iphone.uncached_ttft_ms", "prefix.iphone.speedup", "percache.table1.prefill_share_pct",
                         "percache.table1.decode_share_pct"})
    EXPECT_EQ(find(id).point_class(), "derived") << id;
  for (const char* id : {"dynakv.table6.qwen_m_2k_ms", "dynakv.table6.qwen_m_4k_ms", "dynakv.table6.qwen_m_8k_ms",
                         "dynakv.table2.llama_s.within_2", "dynakv.table2.llama_s.within_4",
                         "dynakv.table2.llama_s.within_8"})
    EXPECT_EQ(find(id).point_class(), "interpolated") << id;
  EXPECT_FALSE(find("prefix.android.partial_recovery").counted());
  EXPECT_FALSE(find("percache.fig16.kv_hit_gain_pp").counted());  // 11.63 pp calibrates (its group's representative)
  EXPECT_FALSE(find("ondevice.pixel7.mllm.llama-3.2-3b.cpu.prefill").counted());
  EXPECT_TRUE(find("ondevice.pixel7.mllm.llama-3.2-3b.cpu.prefill").external);
  EXPECT_DOUBLE_EQ(find("coordgen.synth.fig10.speedup_vs_npu_eagle").hi, 1.80);
  // The K70 Pro's own range: 1 - 1/1.09 = 8.26%, 1 - 1/1.64 = 39.02% (section 4.2).
  EXPECT_DOUBLE_EQ(find("coordgen.synth.fig10.k70pro.lowest_latency_pct").lo, 8.26);
  EXPECT_DOUBLE_EQ(find("coordgen.synth.fig10.k70pro.lowest_latency_pct").hi, 39.02);
  // Found by the fitted-cell rule: its first term is the fitted QA hit rate of the calibrated workload.
  EXPECT_EQ(find("percache.calibrated.fig16.qa_hit_gain_085_pp").point_class(), "derived");
  // The interpolated marks are exactly what the series rule finds.
  std::map<std::string, std::pair<std::string, std::string>> marked;
  for (const auto& p : points)
    if (!p.interpolated_between.empty()) marked[p.id] = {p.interpolated_between[0], p.interpolated_between[1]};
  EXPECT_EQ(validation_between_fitted_points(points), marked);
  std::size_t headline = 0;
  for (const auto& p : points) headline += p.headline ? 1 : 0;
  EXPECT_GE(headline, 10u);
}

// Issue 38 item 1, enforced from the fit rather than the label: the cells a fitted parameter's calibration
// point reads are fitted values, and a validation point reading one of them, directly or as an input of a
// share, ratio or columns_ratio, is refused unless derived; the error names the point, the calibration
// point and the parameter. A point reading another row or another column of the same run is independent.
std::string fitted_cell_case(const std::string& id, const std::string& extract) {
  return std::string("  - {id: ") + id + ", source: x, quantity: q, unit: s, role: validation, published: 3, cell: " + id +
         ",\n     experiment: e.yaml, extract: " + extract + "}\n";
}

TEST(FidelityHonest, AValidationPointReadingAFittedCellIsRefusedNamingTheParameter) {
  TempDir dir("fidelity-cells");
  const std::map<std::string, std::string> reads_fitted{
      {"t.share", "{function: share, column: c, key: device, of: b}"},  // the denominator sums every row
      {"t.ratio", "{function: ratio, column: c, key: device, numerator: a, denominator: b}"},
      {"t.cols", "{function: columns_ratio, where: {device: a}, numerator_column: c, denominator_column: d}"},
      {"t.max", "{dataset: /summary, column: c, reduce: max}"}};
  for (const auto& [id, extract] : reads_fitted) {
    write_text(dir.file("t.yaml"), header() + calibration_point() + fitted_cell_case(id, extract));
    try {
      load_registry(dir.path().string());
      ADD_FAILURE() << id << " reads the fitted cell and was accepted";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + id + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("'t.cal'"), std::string::npos) << what;
      EXPECT_NE(what.find("parameter device.x"), std::string::npos) << what;
    }
  }
  // Independent of the fit: other rows, another column, another run.
  std::string body = header() + calibration_point();
  body += fitted_cell_case("t.rows", "{function: ratio, column: c, key: device, numerator: b, denominator: z}");
  body += fitted_cell_case("t.col", "{dataset: /summary, where: {device: a}, column: d}");
  body += std::string("  - {id: t.run, source: x, quantity: q, unit: s, role: validation, published: 4, set: [experiment.k=2],\n") +
          "     experiment: e.yaml, extract: {dataset: /summary, where: {device: a}, column: c}}\n";
  write_text(dir.file("t.yaml"), body);
  const auto points = load_registry(dir.path().string());
  EXPECT_TRUE(validation_reads_of_fitted_values(points).empty());
  // The map `mobisim calibrate` fits by: parameter -> the cells its calibration points read.
  EXPECT_EQ(fitted_parameter_cells(points),
            (std::map<std::string, std::vector<std::string>>{{"device.x", {"e.yaml []: /summary c where device=a"}}}));
  // Marked derived: accepted and classed so.
  write_text(dir.file("t.yaml"), header() + calibration_point() +
                                     "  - {id: t.share, derived_from: [t.cal], source: x, quantity: q, unit: s, role: validation,"
                                     " published: 3,\n     experiment: e.yaml, extract: {function: share, column: c, key: device, of: b}}\n");
  EXPECT_EQ(load_registry(dir.path().string())[1].point_class(), "derived");
}

// A validation point between two fitted points of its series (one numeric row value apart, or one number
// in the column's name apart) must be marked interpolated; beyond the fitted range it is not.
TEST(FidelityHonest, APointBetweenTwoFittedPointsOfItsSeriesMustBeInterpolated) {
  TempDir dir("fidelity-series");
  auto point = [](const std::string& id, const std::string& role, double published, const std::string& where,
                  const std::string& column, const std::string& extra) {
    std::string s = std::string("  - {id: ") + id + ", source: x, quantity: q, unit: s, role: " + role +
                    ", published: " + fmt::format("{}", published) + ", " + extra + "\n     experiment: e.yaml, extract: {where: {" +
                    where + "}, column: " + column + "}}\n";
    return s;
  };
  const std::string fitted = point("t.1k", "calibration", 1, "model: m, n: 1024", "ms", "fitted: [engine.a],") +
                             point("t.16k", "calibration", 16, "model: m, n: 16384", "ms", "fitted: [engine.b],");
  write_text(dir.file("t.yaml"), header() + fitted + point("t.4k", "validation", 4, "model: m, n: 4096", "ms", ""));
  try {
    load_registry(dir.path().string());
    ADD_FAILURE() << "a point between two fitted points of its series was accepted unmarked";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'t.4k' lies between the fitted points 't.1k' and 't.16k'"), std::string::npos) << what;
  }
  // Beyond the fitted ends, another model's row, or marked: accepted.
  std::string body = header() + fitted + point("t.32k", "validation", 32, "model: m, n: 32768", "ms", "") +
                     point("t.other", "validation", 5, "model: o, n: 4096", "ms", "") +
                     point("t.8k", "validation", 8, "model: m, n: 8192.0", "ms", "interpolated_between: [t.1k, t.16k],");
  write_text(dir.file("t.yaml"), body);
  const auto points = load_registry(dir.path().string());
  EXPECT_EQ(validation_between_fitted_points(points),
            (std::map<std::string, std::pair<std::string, std::string>>{{"t.8k", {"t.1k", "t.16k"}}}));
  // A series along a column's name: within_1 and within_16 fitted, within_4 between them.
  body = header() + point("t.w1", "calibration", 1, "model: m", "within_1", "fitted: [engine.a],") +
         point("t.w16", "calibration", 16, "model: m", "within_16", "fitted: [engine.b],") +
         point("t.w4", "validation", 4, "model: m", "within_4", "") + point("t.w4x", "validation", 6, "model: m", "other_4", "");
  write_text(dir.file("t.yaml"), body);
  try {
    load_registry(dir.path().string());
    ADD_FAILURE() << "within_4 between fitted within_1 and within_16 was accepted unmarked";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'t.w4' lies between the fitted points 't.w1' and 't.w16'"), std::string::npos)
        << e.what();
  }
}

// One statement, one point: two points quoting one source's same value must share a statement group, or
// name their cells when the source states the value twice for different things.
TEST(FidelityHonest, TwoPointsQuotingOneValueNeedAStatementOrTheirCells) {
  TempDir dir("fidelity-quotes");
  auto point = [](const std::string& id, const std::string& extra) {
    return std::string("  - {id: ") + id + ", source: \"Section 5.4\", quantity: q, unit: \"%\", role: validation, published: 51.94, " +
           extra + "\n     experiment: e.yaml, extract: {where: {policy: " + id + "}, column: c}}\n";
  };
  write_text(dir.file("t.yaml"), header() + point("t.naive", "") + point("t.meancache", ""));
  try {
    load_registry_file(dir.file("t.yaml"));
    ADD_FAILURE() << "two points quoting one value without a group were accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'t.naive' and 't.meancache' quote the same published value (51.94 %"), std::string::npos) << what;
  }
  write_text(dir.file("t.yaml"), header() + point("t.naive", "cell: \"51.94% (Naive)\",") +
                                     point("t.meancache", "cell: \"51.94% (MeanCache)\","));
  EXPECT_EQ(load_registry_file(dir.file("t.yaml")).size(), 2u);
  write_text(dir.file("t.yaml"), header() + point("t.naive", "statement: s, representative: true,") +
                                     point("t.meancache", "statement: s,"));
  EXPECT_EQ(load_registry_file(dir.file("t.yaml")).size(), 2u);
}

// The calibration spec and the points' `fitted` agree both ways: a point naming a parameter the spec does
// not fit to it is a problem (the fitted-cell map is read from `fitted`).
TEST(FidelityHonest, ACalibrationPointsFittedParameterMustBeInTheSpec) {
  TempDir dir("fidelity-spec");
  write_text(dir.file("t.yaml"), header() +
                                     "  - {id: t.cal, source: x, quantity: q, unit: s, role: calibration, published: 1, fitted: [device.x, device.y],\n"
                                     "     experiment: e.yaml, extract: {dataset: /summary, where: {device: a}, column: c}}\n");
  write_text(dir.file("c.yaml"), "parameters:\n  - {key: device.x, profile: p, initial: 1, bounds: [0.1, 10], points: [t.cal]}\n");
  const auto problems = check_calibration(CalibrationSpec::load(dir.file("c.yaml")), load_registry_file(dir.file("t.yaml")));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("calibration point t.cal names device.y in fitted, but no parameter device.y"), std::string::npos)
      << problems[0];
}

}  // namespace
}  // namespace mobisim

namespace mobisim {
namespace {

using namespace experiments::fidelity;

// `mobisim ondevice` reports the validation error per engine x unit (issue 37): a hand-made registry
// of on-device points with known errors, grouped by the probe's engine (default mllm) and unit.
TEST(FidelityReport, OnDeviceGroupsPerEngineAndUnit) {
  struct Row {
    const char* probe;  // "" : not an on-device point
    const char* role;
    double error;
    const char* status;
  };
  const Row rows[] = {
      {"{impl: ondevice, engine: llama.cpp, unit: cpu}", "validation", 0.10, "ok"},
      {"{impl: ondevice, engine: llama.cpp, unit: cpu}", "validation", -0.30, "ok"},
      {"{impl: ondevice, engine: llama.cpp, unit: cpu}", "validation", 2.00, "ok"},
      {"{impl: ondevice, engine: llama.cpp, unit: cpu}", "calibration", 0.0, "ok"},
      {"{impl: ondevice, engine: qnn, unit: npu}", "validation", -0.20, "ok"},
      {"{impl: ondevice, engine: qnn, unit: npu}", "validation", 0.40, "ok"},
      {"{impl: ondevice, engine: qnn, unit: npu}", "validation", 9.0, "failed"},  // counted, no error
      {"{impl: ondevice, unit: npu}", "validation", -0.05, "ok"},                  // engine: mllm (default)
      {"", "validation", 5.0, "ok"},                                                // not on-device: ignored
      {"{impl: ondevice, engine: qnn, unit: npu}", "derived", 7.0, "ok"},           // derived: in no median
  };
  std::vector<Point> pts(std::size(rows));
  std::vector<Evaluation> ev(std::size(rows));
  for (std::size_t i = 0; i < std::size(rows); ++i) {
    pts[i].id = "p" + std::to_string(i);
    pts[i].kind = PublishedKind::kValue;
    pts[i].published = 1;
    pts[i].role = std::string(rows[i].role) == "derived" ? "validation" : rows[i].role;
    if (std::string(rows[i].role) == "derived") pts[i].derived_from = {"p0"};
    if (*rows[i].probe) pts[i].probe = YAML::Load(rows[i].probe);
    ev[i].point = &pts[i];
    ev[i].rel_error = rows[i].error;
    ev[i].status = rows[i].status;
  }
  const OnDeviceGroups g = ondevice_groups(ev);
  ASSERT_EQ(g.rows.size(), 3u);
  EXPECT_EQ(g.rows[0].engine + "/" + g.rows[0].unit, "llama.cpp/cpu");
  EXPECT_EQ(g.rows[1].engine + "/" + g.rows[1].unit, "mllm/npu");
  EXPECT_EQ(g.rows[2].engine + "/" + g.rows[2].unit, "qnn/npu");
  // llama.cpp x cpu: 4 points, 1 calibration; |0.10 0.30 2.00| -> median 0.30, one within 25%.
  EXPECT_EQ(g.rows[0].points, 4u);
  EXPECT_EQ(g.rows[0].calibration, 1u);
  EXPECT_EQ(g.rows[0].validation, 3u);
  EXPECT_EQ(g.rows[0].error.n, 3u);
  EXPECT_NEAR(g.rows[0].error.median, 0.30, 1e-12);
  EXPECT_EQ(g.rows[0].within_25, 1u);
  // qnn x npu: the failed point counts as a validation point but has no error; |0.20 0.40| -> 0.30; the
  // derived point is counted apart.
  EXPECT_EQ(g.rows[2].points, 4u);
  EXPECT_EQ(g.rows[2].other, 1u);
  EXPECT_EQ(g.rows[2].validation, 3u);
  EXPECT_EQ(g.rows[2].error.n, 2u);
  EXPECT_NEAR(g.rows[2].error.median, 0.30, 1e-12);
  EXPECT_NEAR(g.rows[1].error.median, 0.05, 1e-12);
  // all: 9 on-device points (1 derived), 7 validation; |0.05 0.10 0.20 0.30 0.40 2.00| -> median 0.25, p90 at 4.5: 1.20.
  EXPECT_EQ(g.all.points, 9u);
  EXPECT_EQ(g.all.other, 1u);
  EXPECT_EQ(g.all.validation, 7u);
  EXPECT_EQ(g.all.error.n, 6u);
  EXPECT_NEAR(g.all.error.median, 0.25, 1e-12);
  EXPECT_NEAR(g.all.error.p90, 1.20, 1e-12);
  EXPECT_EQ(g.all.within_25, 3u);
  const auto lines = g.lines();
  ASSERT_EQ(lines.size(), 6u);  // title, header, 3 rows, all
  EXPECT_NE(lines[2].find("llama.cpp x cpu"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("30.0%"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("1/3"), std::string::npos) << lines[2];
  EXPECT_NE(lines[5].find("25.0%"), std::string::npos) << lines[5];
  EXPECT_TRUE(ondevice_groups({}).lines().empty());
}

// The same table from the command line, on a two-point registry whose published values are set from
// mobisim's own prediction so the errors are known: -20% and +50%, median 35%.
TEST(FidelityReport, OnDeviceCommandPrintsTheEngineUnitTable) {
  ::mobisim::fidelity::OnDeviceQuery q;
  q.device = "honor-magic7";
  q.engine = "mnn";
  q.model = "qwen3-1.7b";
  q.unit = "cpu";
  q.phase = "decode";
  q.tokens = 256;
  q.dtype = "int4";
  q.activation_dtype = "int8";
  const double sim = ::mobisim::fidelity::ondevice_prediction(q);
  TempDir dir("ondevice-groups");
  const std::string probe =
      "{impl: ondevice, device: honor-magic7, engine: mnn, model: qwen3-1.7b, unit: cpu, phase: decode, tokens: 256, "
      "dtype: int4, activation_dtype: int8, metric: tokens_per_s}";
  write_text(dir.file("t.yaml"), fmt::format("document: test\nexternal: true\npoints:\n"
                                             "  - {{id: t.a, source: made up, quantity: q, published: {:.17g}, unit: tokens_per_s,\n"
                                             "     role: validation, probe: {}}}\n"
                                             "  - {{id: t.b, source: made up, quantity: q, published: {:.17g}, unit: tokens_per_s,\n"
                                             "     role: validation, cause_kind: document, cause: made up, probe: {}}}\n",
                                             sim * 1.25, probe, sim / 1.5, probe));
  const auto r = testing::run_mobisim_in(dir.path().string(), "ondevice t.yaml");
  EXPECT_NE(r.output.find("on-device validation |error| per engine x unit:"), std::string::npos) << r.output;
  const auto at = r.output.find("mnn x cpu");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_NE(line.find("35.0%"), std::string::npos) << line;
  EXPECT_NE(line.find("1/2"), std::string::npos) << line;
}

}  // namespace
}  // namespace mobisim

// `fidelity --compare`: what moved between two reports' points tables, matched by id, and the
// honest medians recomputed from each table by the report's own rule.
namespace mobisim {
namespace {

using namespace experiments::fidelity;

struct ReportRow {
  std::string id, cls, set, scope;
  std::int64_t headline, in_medians;
  double simulated, mid_error;
  std::string status = "ok", verdict = "ok";
};

h5::Table report_of(const std::vector<ReportRow>& rows) {
  std::vector<std::string> id, cls, set, scope, status, verdict;
  std::vector<std::int64_t> headline, in_medians;
  std::vector<double> simulated, mid;
  for (const auto& r : rows) {
    id.push_back(r.id), cls.push_back(r.cls), set.push_back(r.set), scope.push_back(r.scope);
    status.push_back(r.status), verdict.push_back(r.verdict);
    headline.push_back(r.headline), in_medians.push_back(r.in_medians);
    simulated.push_back(r.simulated), mid.push_back(r.mid_error);
  }
  h5::Table t;
  t.add("id", id);
  t.add("set", set);
  t.add("simulated", simulated);
  t.add("verdict", verdict);
  t.add("status", status);
  t.add("class", cls);
  t.add("scope", scope);
  t.add("headline", headline);
  t.add("in_medians", in_medians);
  t.add("mid_error", mid, "fraction");
  return t;
}

TEST(FidelityCompare, ListsWhatMovedAndRecountsTheMediansByTheReportsRule) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const h5::Table before = report_of({
      {"a.headline", "validation", "percache", "seed", 1, 1, 10.0, -0.20},
      {"a.other", "validation", "percache", "seed", 0, 1, 5.0, 0.10},
      {"a.derived", "derived", "percache", "seed", 0, 0, 3.0, 0.50},
      {"a.failed", "validation", "percache", "seed", 0, 0, nan, nan, "failed", "error"},
      {"ext.one", "validation", "ondevice", "external", 0, 1, 7.0, 0.30},
      {"sus.one", "validation", "sustained", "external", 0, 1, 2.0, 0.90},
      {"a.gone", "validation", "percache", "seed", 0, 1, 1.0, 0.40},
  });
  const h5::Table after = report_of({
      {"a.headline", "validation", "percache", "seed", 1, 1, 11.0, -0.12},
      {"a.other", "validation", "percache", "seed", 0, 1, 5.0, 0.10},
      {"a.derived", "derived", "percache", "seed", 0, 0, 3.0, 0.50},
      {"a.failed", "validation", "percache", "seed", 0, 0, nan, nan, "failed", "error"},
      {"ext.one", "validation", "ondevice", "external", 0, 1, 7.0, 0.30},
      {"sus.one", "validation", "sustained", "external", 0, 1, 2.0, 0.90},
      {"a.new", "validation", "percache", "seed", 0, 1, 4.0, -0.06},
  });
  const ReportComparison c = compare_reports(before, after);
  ASSERT_EQ(c.moved.size(), 3u);
  EXPECT_EQ(c.moved[0].id, "a.headline");
  EXPECT_EQ(c.moved[0].change, "moved");
  EXPECT_EQ(c.moved[0].simulated_before, 10.0);
  EXPECT_EQ(c.moved[0].simulated_after, 11.0);
  EXPECT_EQ(c.moved[1].id, "a.new");
  EXPECT_EQ(c.moved[1].change, "new");
  EXPECT_TRUE(std::isnan(c.moved[1].simulated_before));
  EXPECT_EQ(c.moved[2].id, "a.gone");
  EXPECT_EQ(c.moved[2].change, "removed");
  EXPECT_EQ(c.unchanged, 5u);  // a failed point that failed again (NaN both sides) has not moved
  // Before: headline {0.20}; seed {0.20, 0.10, 0.40}: median 0.20; external {0.30} (the sustained set
  // is reported on its own, never pooled). After: headline {0.12}; seed {0.12, 0.10, 0.06}: 0.10.
  EXPECT_EQ(c.before.headline.n, 1u);
  EXPECT_DOUBLE_EQ(c.before.headline.median, 0.20);
  EXPECT_EQ(c.before.seed.n, 3u);
  EXPECT_DOUBLE_EQ(c.before.seed.median, 0.20);
  EXPECT_EQ(c.before.external.n, 1u);
  EXPECT_DOUBLE_EQ(c.before.external.median, 0.30);
  EXPECT_DOUBLE_EQ(c.after.headline.median, 0.12);
  EXPECT_DOUBLE_EQ(c.after.seed.median, 0.10);
  EXPECT_EQ(c.table().rows(), 3u);
  // A --set run is compared with the same documents of the earlier report.
  const h5::Table only = rows_of_sets(before, {"ondevice"});
  ASSERT_EQ(only.rows(), 1u);
  EXPECT_EQ(std::get<std::vector<std::string>>(only.column("id"))[0], "ext.one");
  EXPECT_EQ(std::get<std::vector<double>>(only.column("mid_error"))[0], 0.30);
}

// A point moves for the report when what it is scored against or how it counts changes, the model unchanged:
// a published range made the document's own (same simulated value, another midpoint error), a point found
// derived (out of the medians), a point tagged headline.
TEST(FidelityCompare, AChangedRangeClassOrHeadlineTagIsListedAsMoved) {
  const h5::Table before = report_of({
      {"a.range", "validation", "coordgen", "seed", 0, 0, -17.3, -1.699},
      {"a.gain", "validation", "percache", "seed", 0, 0, 0.5, -0.94},
      {"a.tagged", "validation", "coordgen", "seed", 0, 1, 1.2, -0.30},
      {"a.same", "validation", "coordgen", "seed", 0, 1, 2.0, 0.05},
  });
  const h5::Table after = report_of({
      {"a.range", "validation", "coordgen", "seed", 0, 0, -17.3, -1.732},
      {"a.gain", "derived", "percache", "seed", 0, 0, 0.5, -0.94},
      {"a.tagged", "validation", "coordgen", "seed", 1, 1, 1.2, -0.30},
      {"a.same", "validation", "coordgen", "seed", 0, 1, 2.0, 0.05},
  });
  const ReportComparison c = compare_reports(before, after);
  ASSERT_EQ(c.moved.size(), 3u);
  EXPECT_EQ(c.unchanged, 1u);
  EXPECT_EQ(c.moved[0].id, "a.range");
  EXPECT_DOUBLE_EQ(c.moved[0].error_before, -1.699);
  EXPECT_DOUBLE_EQ(c.moved[0].error_after, -1.732);
  EXPECT_EQ(c.moved[1].point_class, "validation->derived");
  EXPECT_EQ(c.moved[2].point_class, "validation +headline");
  // Headline before: none counted; after: a.tagged, |-0.30|.
  EXPECT_EQ(c.before.headline.n, 0u);
  EXPECT_EQ(c.after.headline.n, 1u);
  EXPECT_DOUBLE_EQ(c.after.headline.median, 0.30);
}

TEST(FidelityCompare, AReportWithoutTheHonestColumnsIsRefusedByName) {
  h5::Table old;
  old.add("id", std::vector<std::string>{"a"});
  old.add("simulated", std::vector<double>{1.0});
  try {
    compare_reports(old, old);
    FAIL() << "a report without class/in_medians must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no column"), std::string::npos) << e.what();
  }
  TempDir dir;
  const std::string path = (dir.path() / "not_a_report.h5").string();
  {
    h5::Writer w(path);
    w.commit();
  }
  EXPECT_THROW(read_report(path), InputError);
}

}  // namespace
}  // namespace mobisim
