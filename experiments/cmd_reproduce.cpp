// `mobisim reproduce SET`: regenerates every figure/table of a source document.
//
//   mobisim reproduce percache [--only fig15a] [--no-plot] [--shared DIR]
//
// PerCache (seed 000): experiments/percache/*.yaml -> results/percache/*.{h5,png,csv}.
// QMSum-based experiments read results/qmsum_val.h5; when it is missing it is first
// imported from <shared>/data/qmsum (val split, Llama-2 SentencePiece tokenizer when
// present), where <shared> is --shared, $MOBISIM_SHARED_DIR or <source>/../shared.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "experiments/experiment.h"
#include "sim/cli.h"
#include "sim/error.h"
#include "traces/qmsum.h"
#include "traces/rag_trace_io.h"

namespace mobisim::experiments {
namespace {

namespace fs = std::filesystem;

struct Job {
  std::string yaml;                    // under experiments/percache/
  std::vector<std::string> overrides;  // -p values
  std::string output;                  // "" = the YAML's
};

std::vector<Job> percache_jobs() {
  std::vector<Job> jobs;
  for (const char* f : {"fig14_generated", "fig14", "fig15a", "fig15b", "fig15c", "fig16", "fig17", "fig18", "fig19",
                        "fig20", "table1", "fig22"})
    jobs.push_back({f, {}, ""});
  for (const char* d : {"redmi-k60-pro", "galaxy-s22-ultra", "oneplus-ace6"})
    jobs.push_back({"fig21", {fmt::format("experiment.device={}", d)}, fmt::format("results/percache/fig21_{}.h5", d)});
  return jobs;
}

std::string shared_dir(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* e = std::getenv("MOBISIM_SHARED_DIR"); e && *e) return e;
  return source_root() + "/../shared";
}

void ensure_qmsum_trace(const std::string& trace_path, const std::string& shared) {
  if (fs::exists(trace_path)) return;
  const std::string dir = shared + "/data/qmsum";
  if (!fs::is_directory(dir + "/val"))
    throw InputError(fmt::format(
        "{} is missing and cannot be imported: no QMSum data at {} (pass --shared DIR or set MOBISIM_SHARED_DIR to "
        "the folder holding data/qmsum/val)",
        trace_path, dir));
  traces::QmsumOptions o;
  o.dir = dir;
  o.split = "val";
  const std::string tok = shared + "/models/llama2-tokenizer.model";
  if (fs::exists(tok)) o.tokenizer_path = tok;
  std::cout << fmt::format("importing QMSum val from {} -> {}\n", dir, trace_path);
  const auto t = traces::import_qmsum(o);
  if (fs::path(trace_path).has_parent_path()) fs::create_directories(fs::path(trace_path).parent_path());
  traces::write_rag_trace(trace_path, t);
}

int reproduce_main(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim reproduce SET [--only NAME] [--no-plot] [--shared DIR]",
                   "Regenerates every figure and table of a document. SET: percache.");
  a.positional("set", "which document: percache")
      .option("only", "NAME", "run only this experiment (e.g. fig15a)")
      .option("shared", "DIR", "folder holding data/qmsum (default $MOBISIM_SHARED_DIR or <source>/../shared)")
      .flag("no-plot", "do not draw the plots")
      .flag("quiet", "no tables");
  if (!a.parse(args)) return kExitOk;
  if (a.get("set") != "percache") throw UsageError(fmt::format("unknown set '{}' (known: percache)", a.get("set")));
  const auto jobs = percache_jobs();
  const std::string only = a.maybe("only").value_or("");
  bool any = false;
  for (const auto& j : jobs) {
    if (!only.empty() && j.yaml != only) continue;
    any = true;
    const std::string path = source_root() + "/experiments/percache/" + j.yaml + ".yaml";
    YAML::Node root = load_yaml_file(path);
    const YAML::Node tr = root["experiment"]["workload"]["trace"];
    if (tr && tr.IsScalar()) ensure_qmsum_trace(tr.Scalar(), shared_dir(a.maybe("shared").value_or("")));
    RunOptions o;
    o.overrides = j.overrides;
    o.output_override = j.output;
    o.no_plot = a.flag_set("no-plot");
    o.quiet = a.flag_set("quiet");
    std::cout << fmt::format("== {}{} ==\n", j.yaml, j.output.empty() ? "" : " -> " + j.output);
    const int rc = run_experiment_file(path, o);
    if (rc != kExitOk) return rc;
  }
  if (!any) throw UsageError(fmt::format("no PerCache experiment named '{}'", only));
  return kExitOk;
}

}  // namespace

MOBISIM_REGISTER_COMMAND("reproduce", "Regenerate every figure and table of a document (percache)",
                         "mobisim reproduce percache [--only NAME] [--no-plot] [--shared DIR]", reproduce_main)

}  // namespace mobisim::experiments
