#pragma once
// Experiments: an experiment YAML names a driver (`experiment: {impl: rag_qa, ...}`)
// plus run-level keys (name, seed, run, output, timeline, plot). The driver wires
// devices, models, workloads and policies together and fills a `Results`, which
// is written as one HDF5 file (+ a CSV summary) through a temporary name.
//
// Result file layout (readable with h5py/pandas alone):
//   /                 attrs: mobisim_version, experiment, name, seed, run, config (resolved YAML)
//   /summary          table, one row per variant (policy, setting) with the headline metrics
//   /runs/<variant>/records   per-record table (one row per query / step / I/O; may be streamed: spooled_records)
//   /runs/<variant>/stats     statistics tree of that variant's simulation(s)
//   /tables/<name>    any extra tables a driver adds (e.g. sweeps)
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sim/h5.h"
#include "sim/params.h"
#include "sim/stats.h"
#include "sim/timeline.h"

namespace mobisim::experiments {

class Results {
 public:
  struct Variant {
    std::string name;
    h5::Table records;
    // Set instead of `records` by a driver that streams its rows to disk as they are produced
    // (memory bounded however many rows a run makes); written in its place, with the same bytes.
    std::shared_ptr<const h5::SpooledTable> spooled_records;
    sim::StatGroup stats{"stats"};
  };
  Variant& variant(const std::string& name);
  const std::vector<std::unique_ptr<Variant>>& variants() const { return variants_; }
  h5::Table summary;
  std::map<std::string, h5::Table> tables;

 private:
  std::vector<std::unique_ptr<Variant>> variants_;
};

class WorkloadCache;  // experiments/workload_cache.h

struct RunContext {
  std::string name;
  std::string config_path;
  std::uint64_t seed = 1;
  std::uint64_t run = 0;
  std::string output;       // HDF5 path
  std::string timeline_path;
  std::vector<std::string> overrides;  // -p KEY=VALUE as given (recorded in the result file)
  // The keys read as "0: not modelled" (recorded in the result file, named after the table).
  std::shared_ptr<NotModelledKeys> not_modelled = std::make_shared<NotModelledKeys>();
  // The device-profile values the run's engine inherits by its `inherit_device` (devices/engine.h),
  // one line per unit and phase (recorded in the result file as `inherited_from_device`).
  std::shared_ptr<NotModelledKeys> inherited = std::make_shared<NotModelledKeys>();
  // What engines derived from the SoC's description (ISA path, threads, peak): `derived_from_soc`.
  std::shared_ptr<NotModelledKeys> derived_from_soc = std::make_shared<NotModelledKeys>();
  bool quiet = false;
  int threads = 1;          // worker threads for independent simulations (results do not depend on it)
  WorkloadCache* workloads = nullptr;  // generated workloads shared with the process's other runs, or null
  YAML::Node resolved;      // the fully resolved configuration (stored with the results)
  std::unique_ptr<sim::Timeline> timeline;  // non-null when a timeline was requested
  Results results;

  void progress(const std::string& message) const;
  // The timeline process of one simulated run (labels: policy, user, device), or null when no
  // timeline was requested or --timeline-filter excludes the run. Call before running in parallel.
  sim::TimelineProcess* timeline_process(const std::string& name, const std::map<std::string, std::string>& labels);
};

// The labels a --timeline-filter may select on.
inline const std::vector<std::string>& timeline_labels() {
  static const std::vector<std::string> labels{"policy", "user", "device"};
  return labels;
}

class Experiment {
 public:
  static constexpr const char* kRegistryKind = "experiment";
  virtual ~Experiment() = default;
  // Loads and checks everything the run needs that construction could not (workload files,
  // generators, what the workload can honour), without simulating. `mobisim validate` calls it,
  // so "ok" means the run will not fail on its configuration or inputs. run() comes after it.
  virtual void prepare(RunContext& ctx) { (void)ctx; }
  virtual void run(RunContext& ctx) = 0;
  // The driver's parameters with everything resolved: device and model profiles expanded to
  // every field, defaults filled in. Written into the result file; running it reproduces it.
  // `given` is the experiment node as written (after overrides).
  virtual YAML::Node resolved_config(const YAML::Node& given) const { return yaml_clone(given); }
  // The plot script (under plots/) that turns this experiment's result file into a PNG.
  virtual std::string default_plot() const { return ""; }
};

// A plot to draw: plots/<script> H5 PNG [extra...].
struct PlotJob {
  std::string script, h5_path, png_path;
  std::vector<std::string> extra;
};

// Loads, overrides, validates and runs an experiment file; returns the exit code.
struct RunOptions {
  std::vector<std::string> overrides;  // -p key.path=value
  std::string output_override;
  bool validate_only = false;
  bool quiet = false;
  bool no_plot = false;
  std::string timeline_override;
  std::string timeline_filter;  // --timeline-filter policy=..,user=..,from_s=..,to_s=..
  bool dry_run = false;         // print the resolved configuration and stop
  int threads = 1;
  // Generated workloads shared by the runs of this process (they run one after another); null:
  // every run generates its own. Results do not depend on it.
  WorkloadCache* workloads = nullptr;
  // When set, the plot is queued here instead of drawn (reproduce draws a set's plots together).
  std::vector<PlotJob>* deferred_plots = nullptr;
  // The `run` command's guard against clobbering results: a run with overrides and no --output
  // writes to <output stem>-<hash of its resolved config>.h5, and an existing result file is
  // replaced only when it holds the same configuration (or `force`). Off for reproduce, sweeps
  // and tests, which own their output paths.
  bool protect_results = false;
  bool force = false;
};
int run_experiment_file(const std::string& path, const RunOptions& options);
// Same, for an already-loaded YAML document (used by `reproduce` and tests).
int run_experiment(YAML::Node root, const std::string& origin, const RunOptions& options);
// The fully resolved configuration of an experiment file (what --dry-run prints and results store).
YAML::Node resolve_experiment_config(YAML::Node root, const std::string& origin, const RunOptions& options);

// What a run simulated: a hash (16 hex digits) of mobisim's version and the resolved
// configuration, the text stored in the result file's /config attribute.
std::string config_hash(const std::string& version, const std::string& resolved_yaml);
// The first few keys (dotted paths) whose values differ between two resolved configurations,
// "key: A -> B" each; empty when they are the same.
std::vector<std::string> config_differences(const YAML::Node& before, const YAML::Node& after, std::size_t max = 4);

// Writes the results (HDF5 + CSV) atomically; returns the CSV path.
std::string write_results(const RunContext& ctx);
// A fixed-width text rendering of a table (for the terminal).
std::string format_table(const h5::Table& t, std::size_t max_rows = 50);
// Runs plots/<script> on `h5_path` to write `png_path` with /usr/bin/python3 (or $MOBISIM_PYTHON).
// `extra` arguments follow the two paths (each shell-quoted).
bool run_plot(const std::string& script, const std::string& h5_path, const std::string& png_path, std::string& error,
              const std::vector<std::string>& extra = {});
// Draws every job with at most `processes` Python processes running at once (each draws its share
// of the jobs one after another, importing matplotlib once). False (and `error` naming the failed
// plots) when any failed; the others are still drawn.
bool run_plots(const std::vector<PlotJob>& jobs, int processes, std::string& error);
// Where plot scripts and experiment YAMLs live: $MOBISIM_HOME or the source tree.
std::string source_root();

}  // namespace mobisim::experiments
