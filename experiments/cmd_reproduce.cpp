// `mobisim reproduce SET`: regenerates every figure/table of a source document.
//
//   mobisim reproduce percache|prefix_cache|kvpr_cake|dynakv|coordgen|compose|all [--only fig15a] [--no-plot] [--shared DIR]
//
// PerCache (seed 000): experiments/percache/*.yaml -> results/percache/*.{h5,png,csv}.
// Prefix caching (seed 001): experiments/prefix_cache/*.yaml. KVPR/Cake (seed 002):
// experiments/kvpr_cake/*.yaml. Each YAML names its own output path. `compose` is not a document:
// experiments/compose/*.yaml put systems of different documents on one phone (apps, shared DRAM).
// QMSum-based experiments read results/qmsum_val.h5; when it is missing it is first
// imported from <shared>/data/qmsum (val split, Llama-2 SentencePiece tokenizer when
// present), where <shared> is --shared, $MOBISIM_SHARED_DIR or <source>/../shared.
#include <fmt/format.h>

#include <chrono>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "experiments/child_process.h"
#include "experiments/experiment.h"
#include "experiments/sweep.h"
#include "experiments/workload_inputs.h"
#include "sim/atomic_file.h"
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
                  {"experiment.device.base=redmi-k70-pro", "experiment.device.npu.half_utilization_chunk=75.53"},
                  "results/coordgen/fig10_redmi-k70-pro.h5"});
  // The synthetic workload calibrated to Table 4's summary acceptance (traces/cag_synth.h): Table 4
  // (summary = calibration, rag = validation), Table 3 for the three models and Figure 10 on the three
  // phones (validation).
  // rag runs in its own shape, with the rag copy span fitted to its SAM cell (cag_calibrated_qwen_rag).
  jobs.push_back({"table4_calibrated_workload", {}, ""});
  jobs.push_back({"table4_calibrated_workload_rag", {}, ""});
  // Table 4's LLaMA3.2-1B column on the workload calibrated to it (the Llama family's acceptance).
  jobs.push_back({"table4_calibrated_workload_llama", {}, ""});
  jobs.push_back({"table4_calibrated_workload_llama_rag", {}, ""});
  jobs.push_back({"table3_k60_calibrated_workload", {}, ""});
  jobs.push_back({"table3_k60_calibrated_workload", {"experiment.model.base=qwen2.5-0.5b"},
                  "results/coordgen/table3_k60_calibrated_workload_qwen2.5-0.5b.h5"});
  jobs.push_back({"table3_k60_calibrated_workload",
                  {"experiment.model.base=llama-3.2-3b", "experiment.workload.synthetic=cag_calibrated_llama"},
                  "results/coordgen/table3_k60_calibrated_workload_llama-3.2-3b.h5"});
  jobs.push_back({"fig10_calibrated_workload", {}, ""});
  jobs.push_back({"fig10_calibrated_workload", {"experiment.device.base=redmi-k60-pro"},
                  "results/coordgen/fig10_calibrated_workload_redmi-k60-pro.h5"});
  jobs.push_back({"fig10_calibrated_workload",
                  {"experiment.device.base=redmi-k70-pro", "experiment.device.npu.half_utilization_chunk=75.53"},
                  "results/coordgen/fig10_calibrated_workload_redmi-k70-pro.h5"});
  return jobs;
}

// DynaKV (seed 003): Tables 1, 2, 5 (real capture and generator), 6 and Figures 10-18 (Figure 10 also over
// the four models its caption averages).
std::vector<Job> dynakv_jobs() {
  std::vector<Job> jobs;
  for (const char* f : {"table1", "table2", "table5", "table5_generator", "table6", "fig10", "fig10_models", "fig11",
                        "fig12", "fig13", "fig14", "fig15", "fig16", "fig17", "fig18"})
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
      {"compose",
       {{"a_rag_kv_reuse", {}, ""},
        {"b_npu_prefill", {}, ""},
        {"b_npu_prefill_coordgen", {}, ""},
        {"c_long_chat", {}, ""},
        {"d_chat_on_cpu", {}, ""},
        {"d_chat_on_gpu", {}, ""},
        {"d_sleeptime_on_cpu", {}, ""}}},
      // Sustained use (devices/power_manager.h): back-to-back decode, cold vs warm, CPU vs GPU.
      {"sustained",
       {{"decode_cold_warm", {}, ""},
        {"decode_cold_warm", {"experiment.thermal.start=warm"}, "results/sustained/decode_warm_cpu.h5"},
        {"decode_cold_warm", {"experiment.apps.0.unit=gpu"}, "results/sustained/decode_cold_gpu.h5"},
        {"decode_cold_warm", {"experiment.apps.0.unit=gpu", "experiment.thermal.start=warm"},
         "results/sustained/decode_warm_gpu.h5"},
        {"decode_cold_warm", {"experiment.thermal=none"}, "results/sustained/decode_no_thermal_cpu.h5"},
        {"decode_cold_warm", {"experiment.device=redmi-k70-pro", "experiment.apps.0.unit=npu"},
         "results/sustained/decode_cold_npu_redmi-k70-pro.h5"},
        {"decode_cold_warm",
         {"experiment.device=redmi-k70-pro", "experiment.apps.0.unit=npu", "experiment.thermal.start=warm"},
         "results/sustained/decode_warm_npu_redmi-k70-pro.h5"},
        // DynaKV's long session with and without throttling.
        {"long_chat_dynakv", {}, ""},
        {"long_chat_dynakv", {"experiment.thermal=none"}, "results/sustained/long_chat_dynakv_no_thermal.h5"},
        // KV-reuse policies from a cold phone and from a warm phone on a warm day.
        {"ranking_warm", {}, ""},
        {"ranking_warm", {"experiment.thermal.start=warm", "experiment.thermal.ambient_c=30"},
         "results/sustained/ranking_warm.h5"},
        // PerCache's idle-time work on a low battery: no charger, plugged in for 30 min, no budget.
        {"percache_idle_budget", {}, ""},
        {"percache_idle_budget", {"experiment.thermal.battery.charging=[{start_s: 0, end_s: 1800, power_w: 15}]"},
         "results/sustained/percache_idle_charging.h5"},
        {"percache_idle_budget", {"experiment.thermal=none"}, "results/sustained/percache_idle_no_budget.h5"}}},
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
  // The figures' points are small and share their workload: one process generates it once.
  o.in_process = !mpi;
  const int rc = sweep::run_sweep(spec, o);
  if (rc != kExitOk || no_plot) return rc;
  std::string out = spec.output;
  while (out.ends_with("/")) out.pop_back();
  plots.push_back({"sweep.py", spec.output + "/index.h5", out + ".png", {"--metric", j.plot_metrics}});
  return kExitOk;
}

// Queued plots as lines of tab-separated fields (script, h5, png, extra arguments...): how a child
// figure (--job) hands its plots to the reproduce that started it.
std::string plots_to_text(const std::vector<PlotJob>& plots) {
  std::string out;
  for (const auto& p : plots) {
    out += p.script + "\t" + p.h5_path + "\t" + p.png_path;
    for (const auto& e : p.extra) out += "\t" + e;
    out += "\n";
  }
  return out;
}

std::vector<PlotJob> plots_from_text(const std::string& text, const std::string& origin) {
  std::vector<PlotJob> out;
  std::size_t line_start = 0;
  while (line_start < text.size()) {
    const std::size_t line_end = std::min(text.find('\n', line_start), text.size());
    std::vector<std::string> fields;
    for (std::size_t b = line_start; b <= line_end;) {
      const std::size_t e = std::min(text.find('\t', b), line_end);
      fields.push_back(text.substr(b, e - b));
      b = e + 1;
    }
    if (fields.size() < 3) throw Error(fmt::format("{}: a queued plot needs script, h5 and png fields", origin));
    out.push_back({fields[0], fields[1], fields[2], {fields.begin() + 3, fields.end()}});
    line_start = line_end + 1;
  }
  return out;
}

// Draws the queued plots when reproduce_main leaves, however it leaves (or, in a child figure,
// hands them to its parent through `to_file`).
struct PlotsAtExit {
  std::vector<PlotJob>& plots;
  int threads;
  bool quiet;
  std::string to_file;
  ~PlotsAtExit() {
    try {
      if (!to_file.empty()) {
        write_file_atomic(to_file, plots_to_text(plots));
        return;
      }
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

struct Selected {
  const Set* set = nullptr;
  std::size_t job = 0;  // index in set->jobs
  std::string name() const { return set->name + "/" + set->jobs[job].yaml; }
};

// Wall time per figure: printed to stderr as each ends, with the count done and an ETA (stdout,
// the figures' tables, stays the same for any --threads), and written to
// results/reproduce_times_<set>[_<only>].csv at the end (the timings the docs quote come from that file).
class FigureClock {
 public:
  using Clock = std::chrono::steady_clock;
  FigureClock(std::size_t figures, bool quiet) : seconds_(figures, -1.0), starts_(figures), quiet_(quiet), begin_(Clock::now()) {}
  void started(std::size_t i) { starts_[i] = Clock::now(); }
  void finished(std::size_t i, const std::string& name) {
    seconds_[i] = std::chrono::duration<double>(Clock::now() - starts_[i]).count();
    ++done_;
    if (quiet_) return;
    const double elapsed = std::chrono::duration<double>(Clock::now() - begin_).count();
    const std::size_t left = seconds_.size() - done_;
    const double eta = left == 0 ? 0.0 : elapsed / static_cast<double>(done_) * static_cast<double>(left);
    std::cerr << fmt::format("[reproduce] {}: {:.1f} s ({} of {} done, {:.0f} s elapsed{})\n", name, seconds_[i], done_,
                             seconds_.size(), elapsed, left ? fmt::format(", about {:.0f} s left", eta) : "");
  }
  void write(const std::string& path, const std::vector<Selected>& selected, int threads) const {
    std::string csv = "figure,wall_s,threads\n";
    for (std::size_t i = 0; i < selected.size(); ++i)
      if (seconds_[i] >= 0) csv += fmt::format("{},{:.2f},{}\n", selected[i].name(), seconds_[i], threads);
    csv += fmt::format("total,{:.2f},{}\n", std::chrono::duration<double>(Clock::now() - begin_).count(), threads);
    create_dirs(fs::path(path).parent_path().string());
    write_file_atomic(path, csv);
  }

 private:
  std::vector<double> seconds_;
  std::vector<Clock::time_point> starts_;
  bool quiet_;
  Clock::time_point begin_;
  std::size_t done_ = 0;
};

// The figures of a reproduce with --threads N > 1: each runs in a child process (`reproduce SET --job
// K --threads N`: the last figures, running alone, still use every core), N at a time, its console
// output in a log and its plots in a file. The logs are printed and the
// plots queued in set order as the figures finish in that order, so what is printed and written does
// not depend on N. Stops starting figures after one fails; returns the first failure's exit code.
int reproduce_in_children(const std::vector<Selected>& selected, int threads, const std::vector<std::string>& passed,
                          bool no_plot, std::vector<PlotJob>& plots, FigureClock& clock) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("mobisim-reproduce-{}", ::getpid());
  fs::create_directories(dir);
  struct Child {
    std::string log, plots_file;
    bool done = false;
    int status = 0;
  };
  std::vector<Child> children(selected.size());
  std::size_t printed = 0;
  int rc = kExitOk;
  auto print_finished_in_order = [&] {
    for (; printed < children.size() && children[printed].done; ++printed) {
      const Child& c = children[printed];
      const Selected& sel = selected[printed];
      if (path_exists(c.log)) std::cout << read_file(c.log);
      if (!no_plot && path_exists(c.plots_file)) {
        auto more = plots_from_text(read_file(c.plots_file), c.plots_file);
        plots.insert(plots.end(), more.begin(), more.end());
      }
      if (exit_code_of(c.status) != kExitOk && rc == kExitOk) {
        rc = exit_code_of(c.status);
        std::cerr << fmt::format("reproduce: {}/{} failed ({})\n", sel.set->name, sel.set->jobs[sel.job].yaml,
                                 describe_wait_status(c.status));
      }
    }
    std::cout.flush();
  };
  try {
    run_children(
        selected.size(), threads,
        [&](std::size_t i) {
          Child& c = children[i];
          clock.started(i);
          c.log = (dir / fmt::format("{}.log", i)).string();
          c.plots_file = (dir / fmt::format("{}.plots", i)).string();
          std::vector<std::string> args{"reproduce", selected[i].set->name, "--job", std::to_string(selected[i].job),
                                        "--threads", std::to_string(threads)};
          args.insert(args.end(), passed.begin(), passed.end());
          if (!no_plot) args.insert(args.end(), {"--plots-to", c.plots_file});
          return spawn_self(args, c.log);
        },
        [&](std::size_t i, int status) {
          children[i].done = true;
          children[i].status = status;
          clock.finished(i, selected[i].name());
          print_finished_in_order();
          return exit_code_of(status) == kExitOk;
        });
  } catch (...) {
    std::error_code ec;
    fs::remove_all(dir, ec);  // best effort: the error being reported is the one that matters
    throw;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return rc;
}

// Runs one figure of a set in this process.
int run_job(const Set& s, const Job& j, int threads, bool use_mpi, const cli::ArgParser& a, std::vector<PlotJob>& plots) {
  const std::string path = source_root() + "/experiments/" + s.name + "/" + j.yaml + ".yaml";
  std::cout << fmt::format("== {}/{}{} ==\n", s.name, j.yaml, j.output.empty() ? "" : " -> " + j.output);
  return j.sweep ? run_sweep_job(path, j, threads, use_mpi, a.flag_set("no-plot"), a.flag_set("quiet"), plots)
                 : run_experiment_job(path, j, threads, a.flag_set("no-plot"), a.flag_set("quiet"), plots);
}

// Makes what a figure reads before it runs (the QMSum import, the example request files).
void ensure_inputs(const Set& s, const Job& j, const cli::ArgParser& a) {
  const std::string path = source_root() + "/experiments/" + s.name + "/" + j.yaml + ".yaml";
  const std::string experiment_path =
      j.sweep ? sweep::Spec::load(path, j.overrides).base : path;  // the experiment the runs start from
  const YAML::Node root = load_yaml_file(experiment_path);
  if (const std::string trace = workload_trace(root, experiment_path); !trace.empty())
    ensure_qmsum_trace(trace, shared_dir(a.maybe("shared").value_or("")));
  if (s.name == "coordgen" && j.yaml == "cag_requests_ui")
    ensure_example_requests("results/coordgen/requests", shared_dir(a.maybe("shared").value_or("")));
}

int reproduce_main(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim reproduce SET [--only NAME] [--no-plot] [--shared DIR] [--threads N]",
                   "Regenerates every figure and table of a document.\n"
                   "SET: percache (seed 000), prefix_cache (seed 001), kvpr_cake (seed 002), dynakv (seed 003), "
                   "coordgen (seed 004), compose (systems of different documents on one phone), or all.");
  a.positional("set", "which document: percache, prefix_cache, kvpr_cake, dynakv, coordgen, compose or all")
      .option("only", "NAME", "run only this experiment (e.g. fig15a)")
      .option("shared", "DIR", "folder holding data/qmsum (default $MOBISIM_SHARED_DIR or <source>/../shared)")
      .option("threads", "N",
              "figures run side by side, N at a time, each in its own process with N worker threads (so the last "
              "ones still use every core); results and output do not depend on N",
              "1")
      .flag("no-plot", "do not draw the plots")
      .flag("mpi", "run the sweep figures' points over MPI ranks (automatic under mpirun)")
      .flag("quiet", "no tables")
      .option("job", "K", "internal (--threads runs each figure so): run only the set's K-th figure")
      .option("plots-to", "FILE", "internal (with --job): write the queued plots to FILE instead of drawing them");
  if (!a.parse(args)) return kExitOk;
  export_shared_flag(a.maybe("shared").value_or(""));
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
  // Plots are drawn at the end, all in a few Python processes (--threads of them), not one per figure;
  // also when a later figure fails (then before its error is reported), so no finished figure loses its plot.
  std::vector<PlotJob> plots;
  const PlotsAtExit draw_plots{plots, threads, a.flag_set("quiet"), a.maybe("plots-to").value_or("")};
  if (const auto job = a.maybe("job")) {  // a child of a reproduce with --threads: one figure
    const std::size_t k = static_cast<std::size_t>(a.get_int("job"));
    if (sets.size() != 1 || k >= sets[0].jobs.size())
      throw UsageError(fmt::format("--job {}: expected one set and a figure index below its count", *job));
    ensure_inputs(sets[0], sets[0].jobs[k], a);
    return run_job(sets[0], sets[0].jobs[k], threads, use_mpi, a, plots);
  }
  std::vector<Selected> selected;
  for (const auto& s : sets)
    for (std::size_t k = 0; k < s.jobs.size(); ++k) {
      const Job& j = s.jobs[k];
      const std::string short_name = j.sweep && j.yaml.ends_with("_sweep") ? j.yaml.substr(0, j.yaml.size() - 6) : j.yaml;
      if (only.empty() || j.yaml == only || short_name == only) selected.push_back({&s, k});
    }
  if (selected.empty()) throw UsageError(fmt::format("no experiment named '{}' in set '{}'", only, set));
  const std::string times_path = fmt::format("results/reproduce_times_{}{}.csv", set, only.empty() ? "" : "_" + only);
  if (threads > 1 && !use_mpi && selected.size() > 1) {
    for (const auto& sel : selected) ensure_inputs(*sel.set, sel.set->jobs[sel.job], a);
    std::vector<std::string> passed;
    if (const auto shared = a.maybe("shared")) passed.insert(passed.end(), {"--shared", *shared});
    if (a.flag_set("quiet")) passed.push_back("--quiet");
    if (a.flag_set("no-plot")) passed.push_back("--no-plot");
    FigureClock clock(selected.size(), a.flag_set("quiet"));
    const int rc = reproduce_in_children(selected, threads, passed, a.flag_set("no-plot"), plots, clock);
    clock.write(times_path, selected, threads);
    return rc;
  }
  FigureClock clock(selected.size(), a.flag_set("quiet"));
  for (std::size_t i = 0; i < selected.size(); ++i) {
    const Selected& sel = selected[i];
    clock.started(i);
    ensure_inputs(*sel.set, sel.set->jobs[sel.job], a);
    const int rc = run_job(*sel.set, sel.set->jobs[sel.job], threads, use_mpi, a, plots);
    if (rc != kExitOk) return rc;
    clock.finished(i, sel.name());
  }
  clock.write(times_path, selected, threads);
  return kExitOk;
}

}  // namespace

MOBISIM_REGISTER_COMMAND("reproduce", "regenerate every figure and table of a document (percache, prefix_cache, kvpr_cake, dynakv, coordgen, compose, all)",
                         "mobisim reproduce SET [--only NAME] [--no-plot] [--shared DIR]", reproduce_main)

}  // namespace mobisim::experiments
