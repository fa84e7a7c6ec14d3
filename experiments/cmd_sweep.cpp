// `mobisim sweep` (parameter studies, see experiments/sweep.h), `mobisim sweep plot` and
// `mobisim compare` (summary tables of several result files side by side).
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <iostream>

#include "experiments/experiment.h"
#include "experiments/sweep.h"
#include "sim/atomic_file.h"
#include "sim/cli.h"
#include "sim/error.h"
#include "sim/strings.h"

namespace mobisim::experiments {
namespace {

namespace fs = std::filesystem;

int sweep_plot(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim sweep plot SWEEP_DIR --metric NAME [--x KEY] [--by KEY|variant] [--out FILE.png]",
                   "Draws one metric of a sweep's index against one swept parameter: one line per variant (or per\n"
                   "value of a second parameter), with the 95% confidence band over seeds.");
  a.positional("SWEEP_DIR", "the sweep's output directory (or its index.h5)")
      .option("metric", "NAME", "summary metric, e.g. mean_latency_s", "mean_latency_s")
      .option("x", "KEY", "swept parameter on the x axis (default: the first)")
      .option("by", "KEY", "one line per value of this parameter, or 'variant'", "variant")
      .option("variants", "A,B", "only these variants (policies), comma-separated")
      .option("out", "FILE.png", "output image (default SWEEP_DIR/<metric>.png)");
  if (!a.parse(args)) return kExitOk;
  std::string index = a.get("SWEEP_DIR");
  if (is_dir(index)) index = (fs::path(index) / "index.h5").string();
  if (!path_exists(index)) throw InputError(fmt::format("{}: no sweep index here (run mobisim sweep first)", index));
  const std::string out =
      a.maybe("out").value_or((fs::path(index).parent_path() / (a.get("metric").substr(0, a.get("metric").find(',')) + ".png")).string());
  std::string error;
  std::vector<std::string> extra{"--metric", a.get("metric"), "--by", a.get("by")};
  if (auto x = a.maybe("x")) extra.insert(extra.end(), {"--x", *x});
  if (auto v = a.maybe("variants")) extra.insert(extra.end(), {"--variants", *v});
  if (!run_plot("sweep.py", index, out, error, extra)) throw Error(error);
  std::cout << fmt::format("plot: {}\n", out);
  return kExitOk;
}

int sweep_main(const std::vector<std::string>& args) {
  if (!args.empty() && args.front() == "plot") return sweep_plot({args.begin() + 1, args.end()});
  cli::ArgParser a("mobisim sweep FILE [--threads N] [--in-process] [--resume] [--dry-run] [--mpi] [-p KEY=VALUE]...\n"
                   "       mobisim sweep plot SWEEP_DIR --metric NAME [--x KEY] [--by KEY|variant]",
                   "Runs a parameter study: an experiment at every point of a grid (and zip) of `-p` keys, at every\n"
                   "seed, each run its own result file, plus an index (index.h5, index.csv: one row per point x\n"
                   "variant with means and 95% confidence intervals; runs.csv: one row per run). Every run is\n"
                   "validated first. `search:` instead of a grid bisects one parameter per variant for a target.\n"
                   "Under `mpirun -n K` (or with --mpi) rank 0 hands runs to the other ranks.\n"
                   "Exit 1 when some run failed (the sweep goes on and records it).");
  a.positional("FILE", "sweep YAML (sweep: {base, grid, zip, seeds, set, output, search})")
      .option("threads", "N", "runs at a time on this machine (each a mobisim process); with --in-process, each run's workers", "1")
      .flag("in-process", "run the points in this process one after another, sharing generated workloads (for many "
                          "small points: no process start, one workload generation; a crash ends the sweep)")
      .flag("resume", "keep runs already finished with an unchanged configuration; run the rest")
      .flag("dry-run", "validate every run and list them without running")
      .flag("mpi", "distribute runs over MPI ranks (automatic under mpirun)")
      .flag("quiet", "no progress lines")
      .option("output", "DIR", "the sweep's directory (overrides the file's output:)")
      .repeated("set", "p", "KEY.PATH=VALUE", "override applied to every run");
  if (!a.parse(args)) return kExitOk;
  sweep::Options o;
  o.threads = static_cast<int>(a.get_int("threads"));
  if (o.threads < 1 || o.threads > 1024) throw UsageError("--threads must be in [1, 1024]");
  o.resume = a.flag_set("resume");
  o.dry_run = a.flag_set("dry-run");
  o.quiet = a.flag_set("quiet");
  o.in_process = a.flag_set("in-process");
  o.mpi = a.flag_set("mpi") || sweep::launched_by_mpirun();
  if (o.in_process && o.mpi) throw UsageError("--in-process runs the points here; it cannot be combined with MPI");
  sweep::MpiRole role(o.mpi);
  if (role.worker()) {
    role.serve();
    return kExitOk;
  }
  auto spec = sweep::Spec::load(a.get("FILE"), a.all("set"));
  if (auto out = a.maybe("output")) spec.output = *out;
  return sweep::run_sweep(spec, o);
}

// ---------------------------------------------------------------------------
// compare
// ---------------------------------------------------------------------------
struct Summary {
  std::vector<std::string> variants;
  std::map<std::string, std::map<std::string, double>> value;  // variant -> metric -> value
  std::vector<std::string> metrics;
};

Summary load_summary(const std::string& path) {
  const h5::Table t = sweep::read_summary(path);
  Summary s;
  std::vector<std::string> keys(t.rows());
  for (const auto& n : t.names())
    if (const auto* col = std::get_if<std::vector<std::string>>(&t.column(n)))
      for (std::size_t i = 0; i < col->size(); ++i) keys[i] += (keys[i].empty() ? "" : "/") + (*col)[i];
  s.variants = keys;
  for (const auto& n : t.names())
    if (const auto* col = std::get_if<std::vector<double>>(&t.column(n))) {
      s.metrics.push_back(n);
      for (std::size_t i = 0; i < col->size(); ++i) s.value[keys[i]][n] = (*col)[i];
    }
  return s;
}

int compare_main(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim compare A.h5 B.h5 [C.h5 ...] [--metric NAME]... [--csv OUT.csv]",
                   "Puts the summary tables of several result files side by side: one row per variant and metric,\n"
                   "one column per file, and each file's ratio to the first.");
  a.positional("FILES", "two or more result files (the first is the reference)")
      .repeated("metric", "m", "NAME", "only these metrics (default: every numeric summary column)")
      .option("variants", "A,B", "only these variants (policies, apps) by name, comma-separated")
      .option("csv", "OUT.csv", "also write the table as CSV");
  // The parser takes one positional: collect the rest by hand.
  std::vector<std::string> files, rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].starts_with("-")) {
      rest.push_back(args[i]);
      if (args[i] != "--help" && args[i] != "-h" && args[i].find('=') == std::string::npos && i + 1 < args.size())
        rest.push_back(args[++i]);
    } else {
      files.push_back(args[i]);
    }
  }
  rest.push_back(files.empty() ? std::string("-") : files.front());
  if (!a.parse(rest)) return kExitOk;
  if (files.size() < 2) throw UsageError("compare needs at least two result files");
  std::vector<Summary> s;
  for (const auto& f : files) s.push_back(load_summary(f));
  std::vector<std::string> metrics = a.all("metric");
  if (metrics.empty()) metrics = s.front().metrics;
  for (const auto& m : metrics)
    if (std::find(s.front().metrics.begin(), s.front().metrics.end(), m) == s.front().metrics.end())
      throw UsageError(fmt::format("{}: no metric '{}' in /summary (it has: {})", files.front(), m,
                                   fmt::join(s.front().metrics, ", ")));
  std::vector<std::string> variants = s.front().variants;
  if (auto wanted = a.maybe("variants")) {
    variants.clear();
    for (const auto& v : split(*wanted, ',')) {
      if (std::find(s.front().variants.begin(), s.front().variants.end(), v) == s.front().variants.end())
        throw UsageError(fmt::format("{}: no variant '{}' in /summary (it has: {})", files.front(), v,
                                     fmt::join(s.front().variants, ", ")));
      variants.push_back(v);
    }
  }
  h5::Table t;
  std::vector<std::string> variant_col, metric_col;
  std::vector<std::vector<double>> values(files.size()), ratios(files.size());
  for (const auto& v : variants)
    for (const auto& m : metrics) {
      variant_col.push_back(v);
      metric_col.push_back(m);
      const double ref = s.front().value[v][m];
      for (std::size_t f = 0; f < files.size(); ++f) {
        auto vit = s[f].value.find(v);
        const bool has = vit != s[f].value.end() && vit->second.count(m);
        const double x = has ? vit->second.at(m) : std::nan("");
        values[f].push_back(x);
        ratios[f].push_back(ref != 0 ? x / ref : std::nan(""));
      }
    }
  t.add("variant", variant_col);
  t.add("metric", metric_col);
  for (std::size_t f = 0; f < files.size(); ++f) {
    const std::string name = fs::path(files[f]).stem().string();
    t.add(name, values[f]);
    if (f > 0) t.add(name + "/" + fs::path(files.front()).stem().string(), ratios[f], "ratio");
  }
  std::cout << format_table(t, 100000);
  if (auto csv = a.maybe("csv")) {
    write_file_atomic(*csv, t.to_csv());
    std::cout << fmt::format("csv: {}\n", *csv);
  }
  return kExitOk;
}

}  // namespace
}  // namespace mobisim::experiments

MOBISIM_REGISTER_COMMAND("sweep", "run a parameter sweep (grid, zip, seeds, search) locally or over MPI",
                         "mobisim sweep FILE [--threads N] [--resume]", mobisim::experiments::sweep_main)
MOBISIM_REGISTER_COMMAND("compare", "summary tables of several result files side by side, with ratios",
                         "mobisim compare A.h5 B.h5 ...", mobisim::experiments::compare_main)
