#pragma once
// Parameter sweeps: one experiment run at many points of a parameter space, replicated over seeds,
// every run an independent result file, one index that compares them.
//
//   sweep:
//     base: experiments/percache/fig14.yaml      # any experiment file
//     grid:                                      # cartesian product, first key varies slowest
//       experiment.device: [pixel7, oneplus-12]
//       experiment.policies.6.tau_query: [0.6, 0.8, 0.9]
//     zip:                                       # keys that vary together (equal lengths): one more axis
//       experiment.pipeline.top_k: [2, 3]
//       experiment.workload.max_users: [4, 6]
//     seeds: [1, 2, 3]                           # replications (default: the base's own seed)
//     set: {experiment.workload.max_queries_per_user: 5}   # fixed overrides of every run
//     output: results/sweeps/tau_by_phone/       # one directory per sweep
//     search:                                    # instead of grid/zip: bisect one numeric parameter
//       {parameter: experiment.pipeline.system_prompt_tokens, metric: mean_latency_s, below: 60,
//        lo: 16, hi: 4096, tolerance: 16, integer: true}
//
// Keys are the same paths as `-p`. A *point* is one combination of values; a *run* is a point at one
// seed. Every run is validated before the first starts. Runs write
//   OUTPUT/runs/p0007_s2.h5          the run's own result file (mobisim run, written atomically)
//   OUTPUT/logs/p0007_s2.log         what the run printed
//   OUTPUT/index.h5                  /runs   one row per run x variant: point, seed, parameters,
//                                            status, error, config hash, every summary metric
//                                    /points one row per point x variant: parameters, seeds done,
//                                            <metric>_mean and <metric>_ci95 (95% half-width, Student t)
//                                    /search (search sweeps) one row per variant: value found, probes
//   OUTPUT/index.csv, OUTPUT/runs.csv the same tables for pandas / spreadsheets
// Each run's result file appears only when complete (atomic rename) and stores the configuration it
// simulated, so a killed sweep loses at most the runs in flight: `--resume` keeps every run whose
// file exists with the same config hash and runs the rest. The index (rewritten atomically at most
// every 2 s and at the end) is a view of those files; it holds no wall-clock times, so it is
// identical for any thread or process count, resumed or not.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "sim/h5.h"

namespace mobisim::experiments {
class WorkloadCache;  // experiments/workload_cache.h
}

namespace mobisim::experiments::sweep {

// One swept key and its values (each value as YAML flow text, ready for `-p key=value`).
struct Axis {
  std::vector<std::string> keys;                 // one key (grid) or several (zip)
  std::vector<std::vector<std::string>> values;  // values[i][k]: the i-th value of keys[k]
  std::size_t size() const { return values.size(); }
};

struct SearchSpec {
  std::string parameter, metric;
  double target = 0;
  bool below = true;     // the metric must be below the target (else above)
  double lo = 0, hi = 0;
  double tolerance = 0;  // stop when hi - lo <= tolerance
  bool integer = false;  // probe integer values only
  bool find_smallest = false;  // the smallest value meeting the target (else the largest)
  int max_probes = 20;
};

struct Spec {
  std::string file;    // the sweep YAML
  std::string base;    // the experiment YAML
  std::vector<Axis> axes;
  std::vector<std::uint64_t> seeds;  // empty: the base's own seed
  std::vector<std::string> fixed;    // overrides applied to every run ("key=value")
  std::string output;                // directory
  std::optional<SearchSpec> search;

  static Spec load(const std::string& path, const std::vector<std::string>& cli_overrides);
  std::vector<std::string> parameter_keys() const;
};

// A point of the grid: its values, in parameter_keys() order.
struct Point {
  std::size_t id = 0;
  std::vector<std::string> values;
};
std::vector<Point> expand(const Spec& spec);

// One run: a point at a seed, with everything needed to execute and index it.
struct Run {
  std::size_t index = 0;  // position in the sweep (index row order)
  std::size_t point = 0;
  std::uint64_t seed = 0;
  std::vector<std::string> overrides;  // every -p of this run (fixed, point values, seed)
  std::string result;                  // OUTPUT/runs/pNNNN_sS.h5
  std::string log;                     // OUTPUT/logs/pNNNN_sS.log
  std::string config_hash;             // of the resolved configuration (hex)
  // Filled when the run ends.
  std::string status = "pending";      // pending, ok, failed, skipped (resumed: counts as ok)
  std::string error;
  h5::Table summary;                   // the run's /summary
};

struct Options {
  int threads = 1;       // concurrent runs (each a `mobisim run` process)
  bool resume = false;
  bool dry_run = false;  // list the runs and stop
  bool quiet = false;
  bool mpi = false;      // distribute runs over MPI ranks (rank 0 coordinates)
  // Runs in this process, one after another, each on `threads` workers, sharing generated
  // workloads (experiments/workload_cache.h): for many small points, no process start and one
  // workload generation. The files are the same as with processes. Not with `mpi`.
  bool in_process = false;
};

// Builds and validates every run of `spec` (ConfigError naming the point and the key).
std::vector<Run> plan(const Spec& spec, const std::vector<Point>& points);
// Runs a sweep (grid or search); returns the exit code (1 when some run failed).
int run_sweep(const Spec& spec, const Options& options);

// Executes runs on `threads` local processes, calling `done(run)` as each finishes (in completion
// order). Runs whose status is already "ok"/"skipped" are not executed.
void execute_local(const std::string& base, std::vector<Run>& runs, int threads,
                   const std::function<void(Run&)>& done);
// The same in this process (Options::in_process): one run after another, each on `threads` workers.
void execute_in_process(const std::string& base, std::vector<Run>& runs, int threads,
                        const std::function<void(Run&)>& done);
// MPI (built with MOBISIM_MPI, Open MPI through Boost.MPI): rank 0 hands runs out one at a time
// and writes the index; every other rank runs them in-process and writes the run's own file.
bool mpi_available();
bool launched_by_mpirun();  // started by mpirun (so `sweep` uses MPI without --mpi)
// Initialises MPI for the lifetime of the returned handle; UsageError without MPI support.
std::shared_ptr<void> mpi_session();
int mpi_rank();
int mpi_size();
// Rank 0: executes `runs` on the workers (itself when alone), calling `done` as each finishes.
void execute_mpi(const std::string& base, std::vector<Run>& runs, const std::function<void(Run&)>& done);
// Ranks > 0: run what rank 0 sends (from any sweep) until it says stop.
void mpi_worker_loop();
void mpi_stop_workers();  // rank 0, once at the end of the command

// A command's MPI role: under MPI, ranks > 0 serve runs until rank 0 finishes the command.
class MpiRole {
 public:
  explicit MpiRole(bool use_mpi);
  ~MpiRole();  // rank 0: releases the workers however the command ends
  bool worker() const { return worker_; }
  void serve() { mpi_worker_loop(); }  // for a worker: returns when rank 0 is done

 private:
  std::shared_ptr<void> session_;
  bool use_mpi_ = false, worker_ = false;
};
// Runs one run in this process (what an MPI worker does) on `threads` workers, with generated
// workloads shared through `workloads` when given; fills status/error (not the summary).
void run_in_process(const std::string& base, Run& run, int threads = 1, WorkloadCache* workloads = nullptr);

// Reads a result file's /summary; InputError when unreadable.
h5::Table read_summary(const std::string& h5_path);
// Index tables from finished runs (deterministic: run order, then variant order).
void write_index(const Spec& spec, const std::vector<Point>& points, const std::vector<Run>& runs,
                 const std::optional<h5::Table>& search_table);

// What a reader should know about intervals from `seeds` seeds per point (empty from 3 on).
std::string seeds_note(std::size_t seeds);
// Student-t 95% confidence half-width of the mean of `v` (0 for fewer than two values).
double ci95_half_width(const std::vector<double>& v);

}  // namespace mobisim::experiments::sweep
