// `mobisim fidelity`: every published number beside mobisim's (experiments/published/*.yaml).
//
//   mobisim fidelity [--set percache,prefix_cache] [--run] [--threads N] [--out DIR] [--no-plot]
//
// Runs each point's experiment (or reuses its result file: OUT/runs/<experiment>-<config hash>.h5),
// extracts mobisim's value, prints one table (point, published, simulated, relative error, role,
// verdict) and writes OUT/fidelity.{h5,csv,md,png}. Before the table and again at the end: the headline
// median per document and overall, then all seed validation points, then the external (on-device) set,
// never one pooled number (fidelity.h HonestSummary). Exit code 1 only when a run failed; never for the
// size of an error (it is a report, not a test).
#include <fmt/format.h>

#include <filesystem>

#include <iostream>

#include "experiments/experiment.h"
#include "experiments/fidelity/calibrate.h"
#include "experiments/fidelity/compare.h"
#include "experiments/fidelity/fidelity.h"
#include "experiments/workload_inputs.h"
#include "sim/atomic_file.h"
#include "sim/cli.h"
#include "sim/error.h"
#include "sim/strings.h"

namespace mobisim::experiments::fidelity {
namespace {

std::vector<std::string> parse_sets(const std::optional<std::string>& arg) {
  std::vector<std::string> sets;
  if (!arg) return sets;
  for (auto& s : split(*arg, ','))
    if (!s.empty() && s != "all") sets.push_back(s);
  return sets;
}

// --compare: what moved against an earlier report, printed and written to OUT/moved.csv.
void report_moved(const std::string& earlier_path, const h5::Table& earlier, const std::vector<Evaluation>& ev,
                  const std::string& out_dir) {
  ReportComparison c;
  try {
    c = compare_reports(earlier, report_table(ev));
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", earlier_path, e.what()));
  }
  std::cout << fmt::format("\nAgainst {}:\n", earlier_path);
  for (const auto& l : c.lines()) std::cout << "  " << l << "\n";
  const std::string csv = (std::filesystem::path(out_dir) / "moved.csv").string();
  write_file_atomic(csv, c.table().to_csv());
  std::cout << fmt::format("wrote {}\n", csv);
}

int fidelity_main(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim fidelity [--set NAME[,NAME]] [--run] [--threads N] [--out DIR] [--no-plot]",
                   "Every published point of the registry (experiments/published/*.yaml) beside mobisim's value:\n"
                   "runs or reuses the experiments, prints the table, writes OUT/fidelity.{h5,csv,md,png}.\n"
                   "Exit 1 only when a run failed, never for the size of an error.");
  a.option("set", "NAME", "only these documents (comma-separated: percache, prefix_cache, kvpr_cake, dynakv, "
                          "coordgen, ondevice, ...; default all)")
      .option("registry", "DIR", "registry folder (default <source>/experiments/published)")
      .option("out", "DIR", "output folder", "results/fidelity")
      .option("runs", "DIR", "where experiment runs are kept and reused (RUNS/runs/<experiment>-<hash>.h5)",
              "results/fidelity")
      .option("threads", "N", "experiment runs at a time (results do not depend on it)", "1")
      .option("shared", "DIR", "folder holding data/qmsum (default $MOBISIM_SHARED_DIR or <source>/../shared)")
      .option("compare", "FILE", "an earlier report (its OUT/fidelity.h5): list every point that moved against it "
                                 "and the medians before and after; writes OUT/moved.csv")
      .flag("run", "run every experiment again even when a result file for its configuration exists")
      .flag("no-plot", "do not draw fidelity.png")
      .flag("quiet", "only the summary line");
  if (!a.parse(args)) return kExitOk;
  const int threads = static_cast<int>(a.get_int("threads"));
  if (threads < 1 || threads > 1024) throw UsageError("--threads must be in [1, 1024]");
  const std::string registry = a.maybe("registry").value_or(source_root() + "/experiments/published");
  const auto points = load_registry(registry, parse_sets(a.maybe("set")));
  // Read before anything is written: OUT may hold the very report compared against.
  const std::optional<std::string> compare_path = a.maybe("compare");
  std::optional<h5::Table> earlier;
  if (compare_path) {
    earlier = read_report(*compare_path);
    // Only the documents this run evaluates (all of them without --set).
    if (const auto sets = parse_sets(a.maybe("set")); !sets.empty()) earlier = rows_of_sets(*earlier, sets);
  }
  for (const auto& problem : check_roles(points)) std::cerr << "warning: " << problem << "\n";
  EvaluateOptions o;
  o.runs.dir = a.get("runs");
  o.runs.threads = threads;
  o.runs.force = a.flag_set("run");
  o.runs.quiet = a.flag_set("quiet");
  o.runs.shared = a.maybe("shared").value_or("");
  export_shared_flag(o.runs.shared);
  o.shared = o.runs.shared;
  const auto ev = evaluate(points, o);
  const bool quiet = a.flag_set("quiet");
  const auto honest = honest_summary(ev).lines();
  if (!quiet) {
    for (const auto& l : honest) std::cout << l << "\n";
    std::cout << "\n" << format_report(ev);
  }
  write_report(ev, a.get("out"), a.flag_set("no-plot"), quiet);
  const Summary s = summarize(ev);
  if (!quiet) {
    std::cout << "per document, every validation-role point (distances to ranges, derived and duplicates included):\n";
    for (const auto& l : per_set_lines(ev)) std::cout << "  " << l << "\n";
    if (const auto od = ondevice_coverage(ev).line(); !od.empty()) std::cout << od << "\n";
    std::cout << s.causes_line() << "\n";
    if (const auto f = fitted_value_line(ev); !f.empty()) std::cout << f << "\n";
    std::cout << "\n";
  }
  for (const auto& l : honest) std::cout << l << "\n";
  if (earlier) report_moved(*compare_path, *earlier, ev, a.get("out"));
  return s.failed ? kExitFailure : kExitOk;
}

}  // namespace
}  // namespace mobisim::experiments::fidelity

MOBISIM_REGISTER_COMMAND("fidelity", "every published number beside mobisim's value (experiments/published/)",
                         "mobisim fidelity [--set NAME] [--run]", mobisim::experiments::fidelity::fidelity_main)

// `mobisim calibrate`: fits the free parameters of experiments/published/calibration.yaml to the
// registry's calibration points (never a validation point) and writes the fitted profiles.
namespace mobisim::experiments::fidelity {
namespace {

int calibrate_main(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim calibrate [--spec FILE] [--only KEY]... [--threads N] [--out DIR]",
                   "Fits the named free parameters of device/engine profiles and of the points' experiments (any -p\n"
                   "path, e.g. workload generator keys; experiments/published/calibration.yaml) to the calibration points\n"
                   "of the registry only: continuous ones by nonlinear least squares on ln(simulated / published) (GSL\n"
                   "gsl_multifit_nlinear), discrete ones (values: [...], method: grid) by coordinate passes of a grid\n"
                   "search. Writes OUT/<profile>.yaml (a fitted workload: OUT/workload-<name>.yaml): the fitted values,\n"
                   "each commented with the points it was fitted to. Progress (parameters, cost, runs, time left) goes\n"
                   "to stderr and OUT/state.yaml after each iteration; candidate runs are kept in --runs by\n"
                   "configuration hash, so rerunning an interrupted fit replays the finished runs from disk.");
  a.option("spec", "FILE", "free parameters (default <source>/experiments/published/calibration.yaml)")
      .option("registry", "DIR", "registry folder (default <source>/experiments/published)")
      .repeated("only", "", "KEY", "fit only this parameter (KEY or PROFILE:KEY); the others keep their initial value")
      .option("out", "DIR", "where the fitted profiles go", "results/fidelity/calibrated")
      .option("runs", "DIR", "where the candidate runs go (reused by configuration hash)", "results/fidelity/calibrate")
      .option("threads", "N", "experiment runs at a time", "1")
      .option("max-iterations", "N", "trust-region iterations at most", "25")
      .option("max-passes", "N", "coordinate passes over the grid parameters at most", "4")
      .option("shared", "DIR", "folder holding data/qmsum (default $MOBISIM_SHARED_DIR or <source>/../shared)")
      .flag("quiet", "no progress");
  if (!a.parse(args)) return kExitOk;
  const std::string root = source_root() + "/experiments/published";
  const auto registry = load_registry(a.maybe("registry").value_or(root));
  const auto spec = CalibrationSpec::load(a.maybe("spec").value_or(root + "/calibration.yaml"));
  CalibrateOptions o;
  o.evaluate.runs.dir = a.get("runs");
  o.evaluate.runs.threads = static_cast<int>(a.get_int("threads"));
  if (o.evaluate.runs.threads < 1 || o.evaluate.runs.threads > 1024) throw UsageError("--threads must be in [1, 1024]");
  o.evaluate.runs.quiet = a.flag_set("quiet");
  o.evaluate.runs.shared = a.maybe("shared").value_or("");
  export_shared_flag(o.evaluate.runs.shared);
  o.evaluate.shared = o.evaluate.runs.shared;
  o.max_iterations = static_cast<std::size_t>(std::max(1L, a.get_int("max-iterations")));
  o.max_passes = static_cast<std::size_t>(std::max(1L, a.get_int("max-passes")));
  o.only = a.all("only");
  o.state_file = (std::filesystem::path(a.get("out")) / "state.yaml").string();
  const FitResult fit = calibrate(spec, registry, o);
  std::cout << fmt::format("{}: {} after {} iterations ({} evaluations), cost {:.4g} -> {:.4g}\n\n", spec.file, fit.status,
                           fit.iterations, fit.evaluations, fit.cost_before, fit.cost_after);
  std::cout << fmt::format("{:<54} {:<22} {:>6} {:>10} {:>10}\n", "parameter", "profile", "method", "initial", "fitted");
  std::size_t held = 0;
  for (std::size_t j = 0; j < spec.parameters.size(); ++j) {
    const FreeParameter& f = spec.parameters[j];
    if (!fit.free[j]) {  // --only: the others keep their initial values
      ++held;
      continue;
    }
    std::cout << fmt::format("{:<54} {:<22} {:>6} {:>10.4g} {:>10.4g}\n", f.key, f.profile.empty() ? "(experiment)" : f.profile,
                             f.grid ? "grid" : "gsl", fit.initial[j], fit.fitted[j]);
  }
  if (held) std::cout << fmt::format("({} other parameters held at their initial values)\n", held);
  std::cout << fmt::format("\n{:<40} {:>12} {:>12} {:>12} {:>8}\n", "calibration point", "published", "before", "after",
                           "error");
  for (std::size_t i = 0; i < fit.points.size(); ++i)
    std::cout << fmt::format("{:<40} {:>12} {:>12.4g} {:>12.4g} {:>+7.1f}%\n", fit.points[i]->id,
                             fit.points[i]->published_text(), fit.before[i], fit.after[i],
                             100 * relative_error(*fit.points[i], fit.after[i]));
  for (const auto& path : write_fitted_profiles(spec, fit, a.get("out"))) std::cout << "wrote " << path << "\n";
  return kExitOk;
}

}  // namespace
}  // namespace mobisim::experiments::fidelity

MOBISIM_REGISTER_COMMAND("calibrate", "fit device/engine profile and experiment (workload) parameters to the registry's calibration points",
                         "mobisim calibrate [--only KEY]", mobisim::experiments::fidelity::calibrate_main)
