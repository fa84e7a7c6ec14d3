// `mobisim reproduce SET`: regenerates every figure/table of a source document.
//
//   mobisim reproduce percache|prefix_cache|kvpr_cake|dynakv|coordgen|all [--only fig15a] [--no-plot] [--shared DIR]
//
// PerCache (seed 000): experiments/percache/*.yaml -> results/percache/*.{h5,png,csv}.
// Prefix caching (seed 001): experiments/prefix_cache/*.yaml. KVPR/Cake (seed 002):
// experiments/kvpr_cake/*.yaml. Each YAML names its own output path.
// QMSum-based experiments read results/qmsum_val.h5; when it is missing it is first
// imported from <shared>/data/qmsum (val split, Llama-2 SentencePiece tokenizer when
// present), where <shared> is --shared, $MOBISIM_SHARED_DIR or <source>/../shared.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "experiments/experiment.h"
#include "experiments/sweep.h"
#include "experiments/workload_inputs.h"
#include "sim/cli.h"
#include "sim/error.h"

namespace mobisim::experiments {
namespace {

namespace fs = std::filesystem;

struct Job {
  std::string yaml;                    // under experiments/<set>/
  std::vector<std::string> overrides;  // -p values
  std::string output;                  // "" = the YAML's
  bool sweep = false;                  // a sweep file (mobisim sweep), run point by point
  std::string plot_metrics = "";       // sweeps: the metrics drawn (plots/sweep.py)
  std::string timeline = "";           // also write a Perfetto timeline here
};

std::vector<Job> percache_jobs() {
  std::vector<Job> jobs;
  for (const char* f : {"fig14_generated", "fig14_calibrated", "fig14", "fig15a", "fig15b", "fig15c", "fig16"}) jobs.push_back({f, {}, ""});
  // Figures 17-19 are parameter sweeps: they run through the sweep engine (parallel over points).
  const char* sweep_metrics = "mean_latency_s,qa_hit_rate,kv_chunk_hit_rate,mean_rouge_l,mean_bleu";
  for (const char* f : {"fig17_sweep", "fig18_sweep", "fig19_sweep"}) jobs.push_back({f, {}, "", true, sweep_metrics});
  for (const char* f : {"fig20", "table1", "fig22", "refresh"}) jobs.push_back({f, {}, ""});
  for (const char* d : {"redmi-k60-pro", "galaxy-s22-ultra", "oneplus-ace6"})
    jobs.push_back({"fig21", {fmt::format("experiment.device={}", d)}, fmt::format("results/percache/fig21_{}.h5", d)});
  return jobs;
}

// CoordGen (seed 004): Table 3 for the three models, Table 4 (QMSum summary and rag, real kernel),
// Figure 8 schedules (+ Perfetto timeline), Figure 10 on the three phones, Figures 11-13, and the
// ui / tweet request files.
std::vector<Job> coordgen_jobs() {
  std::vector<Job> jobs{{"table3_k60", {}, ""}};
  for (const char* m : {"qwen2.5-0.5b", "llama-3.2-3b"})
    jobs.push_back({"table3_k60", {fmt::format("experiment.model.base={}", m)}, fmt::format("results/coordgen/table3_k60_{}.h5", m)});
  jobs.push_back({"table4_qmsum", {}, ""});
  jobs.push_back({"table4_qmsum", {"experiment.workload.task=rag"}, "results/coordgen/table4_qmsum_rag.h5"});
  jobs.push_back({"table4_kernel", {}, ""});
  jobs.push_back({"fig8_schedules", {}, "", false, "", "results/coordgen/fig8_timeline.json"});
  jobs.push_back({"fig10_oneplus13", {}, ""});
  jobs.push_back({"fig10_oneplus13", {"experiment.device.base=redmi-k60-pro"}, "results/coordgen/fig10_redmi-k60-pro.h5"});
  // Figures 11-13 (energy without the K70 Pro, as the document; breakdown on the OnePlus 13).
  jobs.push_back({"fig11_energy", {}, ""});
  jobs.push_back({"fig11_energy", {"experiment.device.base=redmi-k60-pro"}, "results/coordgen/fig11_energy_redmi-k60-pro.h5"});
  jobs.push_back({"fig12_memory", {}, ""});
  jobs.push_back({"fig13_breakdown", {}, ""});
  for (const char* m : {"qwen2.5-0.5b", "llama-3.2-3b"})
    jobs.push_back({"fig13_breakdown", {fmt::format("experiment.model.base={}", m)},
                    fmt::format("results/coordgen/fig13_breakdown_{}.h5", m)});
  // `ui` and `tweet` request files made by the real kernel (CAG request format, stored top-n).
  jobs.push_back({"cag_requests_ui", {}, ""});
  jobs.push_back({"cag_requests_ui", {"experiment.workload.requests=results/coordgen/requests/tweet_stories260K.jsonl"},
                  "results/coordgen/cag_requests_tweet.h5"});
  jobs.push_back({"cag_requests_ui", {"experiment.workload.requests=results/coordgen/requests/summary_stories260K.jsonl"},
                  "results/coordgen/cag_requests_summary.h5"});
  // The K70 Pro keeps its own NPU fit (section 2.3's verification speeds): only the graph load is shared.
  jobs.push_back({"fig10_oneplus13",
                  {"experiment.device.base=redmi-k70-pro", "experiment.device.npu.half_utilization_chunk=94.47"},
                  "results/coordgen/fig10_redmi-k70-pro.h5"});
  // The synthetic workload calibrated to Table 4's summary acceptance (traces/cag_synth.h): Table 4
  // (summary = calibration, rag = validation), Table 3 for the three models and Figure 10 on the three
  // phones (validation).
  const std::vector<std::string> rag = {"experiment.workload.synthetic.context_tokens=432",
                                        "experiment.workload.synthetic.output_tokens=82",
                                        "experiment.workload.synthetic.task=rag"};
  jobs.push_back({"table4_calibrated_workload", {}, ""});
  jobs.push_back({"table4_calibrated_workload", rag, "results/coordgen/table4_calibrated_workload_rag.h5"});
  jobs.push_back({"table3_k60_calibrated_workload", {}, ""});
  for (const char* m : {"qwen2.5-0.5b", "llama-3.2-3b"})
    jobs.push_back({"table3_k60_calibrated_workload", {fmt::format("experiment.model.base={}", m)},
                    fmt::format("results/coordgen/table3_k60_calibrated_workload_{}.h5", m)});
  jobs.push_back({"fig10_calibrated_workload", {}, ""});
  jobs.push_back({"fig10_calibrated_workload", {"experiment.device.base=redmi-k60-pro"},
                  "results/coordgen/fig10_calibrated_workload_redmi-k60-pro.h5"});
  jobs.push_back({"fig10_calibrated_workload",
                  {"experiment.device.base=redmi-k70-pro", "experiment.device.npu.half_utilization_chunk=94.47"},
                  "results/coordgen/fig10_calibrated_workload_redmi-k70-pro.h5"});
  return jobs;
}

// DynaKV (seed 003): Tables 1, 2, 5 (real capture and generator), 6 and Figures 10-18.
std::vector<Job> dynakv_jobs() {
  std::vector<Job> jobs;
  for (const char* f : {"table1", "table2", "table5", "table5_generator", "table6", "fig10", "fig11", "fig12", "fig13",
                        "fig14", "fig15", "fig16", "fig17", "fig18"})
    jobs.push_back({f, {}, ""});
  return jobs;
}

struct Set {
  std::string name;  // also the folder under experiments/
  std::vector<Job> jobs;
};

std::vector<Set> document_sets() {
  return {
      {"percache", percache_jobs()},
      {"prefix_cache", {{"ttft", {}, ""}}},
      {"kvpr_cake", {{"fig3", {}, ""}, {"error", {}, ""}, {"phones", {}, ""}}},
      {"dynakv", dynakv_jobs()},
      {"coordgen", coordgen_jobs()},
  };
}

int run_experiment_job(const std::string& path, const Job& j, int threads, bool no_plot, bool quiet,
                       std::vector<PlotJob>& plots) {
  RunOptions o;
  o.deferred_plots = &plots;
  o.overrides = j.overrides;
  o.output_override = j.output;
  o.timeline_override = j.timeline;
  o.no_plot = no_plot;
  o.quiet = quiet;
  o.threads = threads;
  return run_experiment_file(path, o);
}

// A figure that is a sweep: its points run in parallel (threads or MPI ranks), then one plot of
// the index, next to the figure's other files (results/<set>/<figure>.png).
int run_sweep_job(const std::string& path, const Job& j, int threads, bool mpi, bool no_plot, bool quiet,
                  std::vector<PlotJob>& plots) {
  const auto spec = sweep::Spec::load(path, j.overrides);
  sweep::Options o;
  o.threads = threads;
  o.mpi = mpi;
  o.quiet = quiet;
  o.resume = true;  // a rerun keeps the points whose configuration did not change
  const int rc = sweep::run_sweep(spec, o);
  if (rc != kExitOk || no_plot) return rc;
  std::string out = spec.output;
  while (out.ends_with("/")) out.pop_back();
  plots.push_back({"sweep.py", spec.output + "/index.h5", out + ".png", {"--metric", j.plot_metrics}});
  return kExitOk;
}

// Draws the queued plots when reproduce_main leaves, however it leaves.
struct PlotsAtExit {
  std::vector<PlotJob>& plots;
  int threads;
  bool quiet;
  ~PlotsAtExit() {
    try {
      std::string error;
      if (!run_plots(plots, threads, error)) {
        std::cerr << "warning: " << error << "\n";
      } else if (!quiet) {
        for (const auto& p : plots) std::cout << fmt::format("plot: {}\n", p.png_path);
      }
    } catch (const std::exception& e) {
      std::cerr << "warning: plots not drawn: " << e.what() << "\n";
    }
  }
};

int reproduce_main(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim reproduce SET [--only NAME] [--no-plot] [--shared DIR] [--threads N]",
                   "Regenerates every figure and table of a document.\n"
                   "SET: percache (seed 000), prefix_cache (seed 001), kvpr_cake (seed 002), dynakv (seed 003), "
                   "coordgen (seed 004), or all.");
  a.positional("set", "which document: percache, prefix_cache, kvpr_cake, dynakv, coordgen or all")
      .option("only", "NAME", "run only this experiment (e.g. fig15a)")
      .option("shared", "DIR", "folder holding data/qmsum (default $MOBISIM_SHARED_DIR or <source>/../shared)")
      .option("threads", "N", "worker threads per experiment, and sweep points at a time (results do not depend on it)",
              "1")
      .flag("no-plot", "do not draw the plots")
      .flag("mpi", "run the sweep figures' points over MPI ranks (automatic under mpirun)")
      .flag("quiet", "no tables");
  if (!a.parse(args)) return kExitOk;
  const std::string set = a.get("set");
  std::vector<Set> sets;
  std::vector<std::string> known;
  for (auto& s : document_sets()) {
    known.push_back(s.name);
    if (set == "all" || set == s.name) sets.push_back(std::move(s));
  }
  if (sets.empty()) throw UsageError(fmt::format("unknown set '{}' (known: {}, all)", set, fmt::join(known, ", ")));
  const std::string only = a.maybe("only").value_or("");
  const int threads = static_cast<int>(a.get_int("threads"));
  if (threads < 1 || threads > 1024) throw UsageError("--threads must be in [1, 1024]");
  const bool use_mpi = a.flag_set("mpi") || sweep::launched_by_mpirun();
  sweep::MpiRole role(use_mpi);  // under mpirun: ranks > 0 run sweep points for rank 0
  if (role.worker()) {
    role.serve();
    return kExitOk;
  }
  bool any = false;
  // Plots are drawn at the end, all in a few Python processes (--threads of them), not one per figure;
  // also when a later figure fails (then before its error is reported), so no finished figure loses its plot.
  std::vector<PlotJob> plots;
  const PlotsAtExit draw_plots{plots, threads, a.flag_set("quiet")};
  for (const auto& s : sets) {
    for (const auto& j : s.jobs) {
      const std::string short_name = j.sweep && j.yaml.ends_with("_sweep") ? j.yaml.substr(0, j.yaml.size() - 6) : j.yaml;
      if (!only.empty() && j.yaml != only && short_name != only) continue;
      any = true;
      const std::string path = source_root() + "/experiments/" + s.name + "/" + j.yaml + ".yaml";
      const std::string experiment_path =
          j.sweep ? sweep::Spec::load(path, j.overrides).base : path;  // the experiment the runs start from
      const YAML::Node root = load_yaml_file(experiment_path);
      if (const std::string trace = workload_trace(root); !trace.empty())
        ensure_qmsum_trace(trace, shared_dir(a.maybe("shared").value_or("")));
      if (s.name == "coordgen" && j.yaml == "cag_requests_ui")
        ensure_example_requests("results/coordgen/requests", shared_dir(a.maybe("shared").value_or("")));
      std::cout << fmt::format("== {}/{}{} ==\n", s.name, j.yaml, j.output.empty() ? "" : " -> " + j.output);
      const int rc = j.sweep ? run_sweep_job(path, j, threads, use_mpi, a.flag_set("no-plot"), a.flag_set("quiet"), plots)
                             : run_experiment_job(path, j, threads, a.flag_set("no-plot"), a.flag_set("quiet"), plots);
      if (rc != kExitOk) return rc;
    }
  }
  if (!any) throw UsageError(fmt::format("no experiment named '{}' in set '{}'", only, set));
  return kExitOk;
}

}  // namespace

MOBISIM_REGISTER_COMMAND("reproduce", "regenerate every figure and table of a document (percache, prefix_cache, kvpr_cake, dynakv, coordgen, all)",
                         "mobisim reproduce SET [--only NAME] [--no-plot] [--shared DIR]", reproduce_main)

}  // namespace mobisim::experiments
