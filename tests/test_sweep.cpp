// Sweeps: expansion, validation before any run, identical indexes for any thread or process
// count, resume after a kill, confidence intervals by hand, bisection search, compare.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "experiments/experiment.h"
#include "experiments/sweep.h"
#include "experiments/workload_cache.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "test_util.h"

namespace mobisim {
namespace {

namespace sw = experiments::sweep;
using testing::run_mobisim;
using testing::TempDir;

// A one-user slice of the quick start with two policies: a run takes ~0.1 s.
std::string write_base(const TempDir& dir) {
  const std::string path = dir.file("base.yaml");
  testing::write_text(path,
                      "name: base\nseed: 1\nexperiment:\n  impl: rag_qa\n  device: pixel7\n"
                      "  model: {base: llama-3.2-3b, weight_dtype: int4, activation_dtype: fp32, kv_dtype: fp32}\n"
                      "  workload: {generate: default, max_users: 1, max_queries_per_user: 4}\n"
                      "  pipeline: {compute_unit: cpu, top_k: 3}\n"
                      "  policies: [{impl: naive}, {impl: percache, knowledge_type: notes}]\n");
  return path;
}

std::string write_sweep(const TempDir& dir, const std::string& body, const std::string& name = "sweep.yaml") {
  const std::string path = dir.file(name);
  testing::write_text(path, "sweep:\n  base: " + write_base(dir) + "\n" + body);
  return path;
}

TEST(Sweep, GridAndZipExpandToTheProductOfTheirAxes) {
  TempDir dir;
  const auto spec = sw::Spec::load(write_sweep(dir,
                                               "  grid:\n"
                                               "    experiment.device: [pixel7, oneplus-12, redmi-k60-pro]\n"
                                               "    experiment.pipeline.system_prompt_tokens: [32, 64]\n"
                                               "  zip:\n"
                                               "    experiment.pipeline.top_k: [1, 2, 3, 3]\n"
                                               "    experiment.workload.max_queries_per_user: [2, 3, 4, 5]\n"
                                               "  seeds: [1, 2]\n"),
                                   {});
  const auto points = sw::expand(spec);
  ASSERT_EQ(points.size(), 3u * 2u * 4u);
  // First key slowest, the zip axis fastest, zipped keys together.
  EXPECT_EQ(points[0].values, (std::vector<std::string>{"pixel7", "32", "1", "2"}));
  EXPECT_EQ(points[3].values, (std::vector<std::string>{"pixel7", "32", "3", "5"}));
  EXPECT_EQ(points[4].values, (std::vector<std::string>{"pixel7", "64", "1", "2"}));
  EXPECT_EQ(points[23].values, (std::vector<std::string>{"redmi-k60-pro", "64", "3", "5"}));
  EXPECT_EQ(sw::plan(spec, points).size(), 48u);  // x 2 seeds, every run validated
  EXPECT_THROW(sw::Spec::load(write_sweep(dir, "  zip: {experiment.seed: [1, 2], experiment.run: [1]}\n", "bad.yaml"), {}),
               ConfigError);
}

TEST(Sweep, ABadPointIsRefusedBeforeAnyRunStarts) {
  TempDir dir;
  const auto file = write_sweep(dir,
                                "  grid:\n    experiment.pipeline.system_prompt_tokens: [32, 64]\n"
                                "    experiment.device.compute.cpu.compute_efficiency: [0.03, 0.05, 7]\n"
                                "  output: " + dir.file("out") + "\n");
  auto r = run_mobisim("sweep " + file + " --quiet");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("point 2 (experiment.pipeline.system_prompt_tokens=32, "
                          "experiment.device.compute.cpu.compute_efficiency=7)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("key 'experiment.device.compute.cpu.compute_efficiency': value 7 must be <= 1"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/runs")));  // nothing ran
}

TEST(Sweep, ConfidenceIntervalByHand) {
  // {1, 2, 3}: mean 2, sample sd 1, t(0.975, 2) = 4.302652729749464 -> half width 4.3027 / sqrt(3).
  EXPECT_NEAR(sw::ci95_half_width({1, 2, 3}), 4.302652729749464 / std::sqrt(3.0), 1e-9);
  EXPECT_EQ(sw::ci95_half_width({5}), 0.0);
}

const char* kGrid =
    "  grid:\n    experiment.pipeline.system_prompt_tokens: [32, 96]\n"
    "    experiment.device: [pixel7, oneplus-12]\n"
    "  seeds: [1, 2]\n";

TEST(Sweep, IndexIsIdenticalForAnyThreadOrProcessCount) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  TempDir dir;
  const auto file = write_sweep(dir, kGrid);
  ASSERT_EQ(run_mobisim("sweep " + file + " --quiet --threads 1 --output " + dir.file("t1")).exit_code, 0);
  for (const char* threads : {"2", "3"}) {
    auto r = run_mobisim("sweep " + file + " --quiet --threads " + threads + " --output " + dir.file(std::string("t") + threads));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // In process (one run after another, each on two workers, sharing generated workloads).
  auto in = run_mobisim("sweep " + file + " --quiet --in-process --threads 2 --output " + dir.file("in"));
  ASSERT_EQ(in.exit_code, 0) << in.output;
  const std::string index = testing::read_bytes(dir.file("t1/index.h5"));
  for (const char* other : {"t2", "t3", "in"}) {
    EXPECT_EQ(index, testing::read_bytes(dir.file(std::string(other) + "/index.h5"))) << other;
    EXPECT_EQ(testing::read_bytes(dir.file("t1/runs/p0003_s2.h5")),
              testing::read_bytes(dir.file(std::string(other) + "/runs/p0003_s2.h5")))
        << other;
  }
  h5::Reader idx(dir.file("t1/index.h5"));
  EXPECT_EQ(idx.strings("/points/variant").size(), 4u * 2u);  // 4 points x 2 policies
  EXPECT_EQ(idx.strings("/runs/status"), std::vector<std::string>(8 * 2, "ok"));
#ifdef MOBISIM_TEST_MPIEXEC
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  const std::string mpi = std::string(MOBISIM_TEST_MPIEXEC) + " -n 3 --oversubscribe '" + MOBISIM_BINARY + "' sweep " +
                          file + " --quiet --output " + dir.file("mpi") + " 2>&1";
  ASSERT_EQ(std::system(mpi.c_str()), 0) << mpi;
  EXPECT_EQ(index, testing::read_bytes(dir.file("mpi/index.h5")));
  EXPECT_EQ(testing::read_bytes(dir.file("t1/runs/p0003_s2.h5")), testing::read_bytes(dir.file("mpi/runs/p0003_s2.h5")));
#else
  std::cout << "MPI not built in: the 3-rank comparison is skipped\n";
#endif
}

std::size_t finished_runs(const std::string& runs_dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(runs_dir, ec))
    n += e.path().extension() == ".h5";  // complete files only: temporaries end in .tmp-PID
  return n;
}

// A sweep SIGKILLed (with its runs in flight) after some runs finished; --resume completes it and
// the index and every run file equal an uninterrupted sweep's, byte for byte.
TEST(Sweep, AKilledSweepResumesToTheSameIndex) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  TempDir dir;
  const auto file = write_sweep(dir, kGrid);
  ASSERT_EQ(run_mobisim("sweep " + file + " --quiet --output " + dir.file("whole")).exit_code, 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setpgid(0, 0);  // its own process group: the kill takes the runs in flight too
    const std::string out = dir.file("killed");
    ::execl(MOBISIM_BINARY, MOBISIM_BINARY, "sweep", file.c_str(), "--quiet", "--output", out.c_str(), nullptr);
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (finished_runs(dir.file("killed/runs")) < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(-pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::size_t before = finished_runs(dir.file("killed/runs"));
  ASSERT_GE(before, 1u);
  auto resumed = run_mobisim("sweep " + file + " --resume --output " + dir.file("killed"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  if (before < 8u) {
    EXPECT_NE(resumed.output.find("finished earlier, kept"), std::string::npos) << resumed.output;
  }
  EXPECT_EQ(testing::read_bytes(dir.file("whole/index.h5")), testing::read_bytes(dir.file("killed/index.h5")));
  for (const char* run : {"p0000_s1", "p0001_s2", "p0003_s1", "p0003_s2"})
    EXPECT_EQ(testing::read_bytes(dir.file(std::string("whole/runs/") + run + ".h5")),
              testing::read_bytes(dir.file(std::string("killed/runs/") + run + ".h5")))
        << run;
}

TEST(Sweep, AFailedRunIsRecordedAndTheSweepGoesOn) {
  TempDir dir;
  // A trace that does not exist passes configuration checks but fails when the run loads it.
  const auto file = write_sweep(dir,
                                "  grid:\n    experiment.workload: ['{generate: default, max_users: 1, max_queries_per_user: 2}', "
                                "'{trace: " + dir.file("missing.h5") + "}']\n");
  for (const char* mode : {"", " --in-process"}) {
    SCOPED_TRACE(mode);
    const std::string out = dir.file(*mode ? "in" : "out");
    auto r = run_mobisim("sweep " + file + " --quiet" + mode + " --output " + out);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    h5::Reader idx(out + "/index.h5");
    const auto status = idx.strings("/runs/status");
    const auto error = idx.strings("/runs/error");
    ASSERT_EQ(status.size(), 3u);  // two variants of the good run, one row for the failed one
    EXPECT_EQ(status[0], "ok");
    EXPECT_EQ(status[2], "failed");
    EXPECT_NE(error[2].find("missing.h5"), std::string::npos) << error[2];
    EXPECT_NE(testing::read_bytes(out + "/logs/p0001.log").find("missing.h5"), std::string::npos);
  }
  EXPECT_NE(run_mobisim("sweep " + file + " --in-process --mpi").output.find("cannot be combined with MPI"),
            std::string::npos);
}

// Runs of one process share the workload they generate alike (WorkloadCache): generated once, with
// the result bytes of a run that generates its own; another seed generates its own.
TEST(Sweep, InProcessRunsShareAGeneratedWorkloadWithTheSameResultBytes) {
  TempDir dir;
  const std::string base = write_base(dir);
  experiments::RunOptions o;
  o.quiet = true;
  o.no_plot = true;
  o.output_override = dir.file("alone.h5");
  ASSERT_EQ(experiments::run_experiment_file(base, o), 0);
  experiments::WorkloadCache cache;
  o.workloads = &cache;
  for (const char* name : {"first.h5", "second.h5"}) {
    o.output_override = dir.file(name);
    ASSERT_EQ(experiments::run_experiment_file(base, o), 0);
    EXPECT_EQ(testing::read_bytes(dir.file("alone.h5")), testing::read_bytes(dir.file(name))) << name;
  }
  EXPECT_EQ(cache.generated(), 1u);
  o.overrides = {"seed=2"};
  o.output_override = dir.file("seed2.h5");
  ASSERT_EQ(experiments::run_experiment_file(base, o), 0);
  EXPECT_EQ(cache.generated(), 2u);
  EXPECT_NE(testing::read_bytes(dir.file("alone.h5")), testing::read_bytes(dir.file("seed2.h5")));
  // It keeps the two most recent workloads.
  auto make = [] { return traces::RagTrace{}; };
  for (const char* key : {"a", "b", "a", "c", "b"}) (void)cache.rag_trace(key, make);
  EXPECT_EQ(cache.generated(), 2u + 4u);  // a, b, c, then b again (c and a were the two kept)
}

TEST(Sweep, SearchBisectsForTheLargestValueMeetingTheTarget) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  TempDir dir;
  // Mean latency grows with the system prompt; find the largest prompt keeping naive under a
  // target set between the latencies at 16 and 2048 tokens.
  const auto probe = [&](int tokens) {
    const std::string out = dir.file("probe" + std::to_string(tokens) + ".h5");
    auto r = run_mobisim("run " + write_base(dir) + " -p experiment.pipeline.system_prompt_tokens=" +
                         std::to_string(tokens) + " -p 'experiment.policies=[{impl: naive}]' --quiet --no-plot --output " + out);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return h5::Reader(out).doubles("/summary/mean_latency_s").at(0);
  };
  const double target = 0.5 * (probe(16) + probe(2048));
  const auto file = write_sweep(dir, fmt::format("  set: {{experiment.policies: '[{{impl: naive}}]'}}\n"
                                                 "  search: {{parameter: experiment.pipeline.system_prompt_tokens, "
                                                 "metric: mean_latency_s, below: {}, lo: 16, hi: 2048, integer: true, "
                                                 "tolerance: 8}}\n",
                                                 target));
  auto r = run_mobisim("sweep " + file + " --quiet --threads 2 --output " + dir.file("search"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  h5::Reader idx(dir.file("search/index.h5"));
  const double found = idx.doubles("/search/experiment.pipeline.system_prompt_tokens").at(0);
  EXPECT_EQ(idx.strings("/search/target_met").at(0), "yes");
  EXPECT_LT(probe(static_cast<int>(found)), target);
  EXPECT_GE(probe(static_cast<int>(found) + 8), target);  // within the tolerance of the boundary
}

TEST(Compare, PutsSummariesSideBySideWithRatios) {
  TempDir dir;
  const std::string base = write_base(dir);
  ASSERT_EQ(run_mobisim("run " + base + " --quiet --no-plot --output " + dir.file("a.h5")).exit_code, 0);
  ASSERT_EQ(run_mobisim("run " + base + " -p experiment.device=oneplus-12 --quiet --no-plot --output " + dir.file("b.h5"))
                .exit_code,
            0);
  auto r = run_mobisim("compare " + dir.file("a.h5") + " " + dir.file("b.h5") + " --metric mean_latency_s --csv " +
                       dir.file("c.csv"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double a = h5::Reader(dir.file("a.h5")).doubles("/summary/mean_latency_s").at(0);
  const double b = h5::Reader(dir.file("b.h5")).doubles("/summary/mean_latency_s").at(0);
  const std::string csv = testing::read_bytes(dir.file("c.csv"));
  EXPECT_NE(csv.find(fmt::format("naive,mean_latency_s,{},{},{}", a, b, b / a)), std::string::npos) << csv;
  EXPECT_EQ(run_mobisim("compare " + dir.file("a.h5")).exit_code, 2);
}

}  // namespace
}  // namespace mobisim

namespace mobisim {
namespace {

// `reproduce` runs the figures that are sweeps through the sweep engine (PerCache figure 18 uses
// the generated workload, so it needs no shared data) and still runs plain experiments that have
// no workload at all (table 1).
TEST(Sweep, ReproduceRunsSweepFiguresThroughTheSweepEngine) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  testing::TempDir dir;
  auto r = testing::run_mobisim_in(dir.path().string(), "reproduce percache --only table1 --no-plot --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_mobisim_in(dir.path().string(), "reproduce percache --only fig18 --no-plot --quiet --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  h5::Reader idx(dir.file("results/percache/fig18/index.h5"));
  const auto limits = idx.strings("/points/experiment.policies.0.storage_limit_gb");
  EXPECT_EQ(limits, (std::vector<std::string>{"1", "2", "4", "6", "8", "10", "12"}));
  // The document's trend: latency falls as the storage limit rises.
  const auto latency = idx.doubles("/points/mean_latency_s_mean");
  EXPECT_GT(latency.front(), latency.back());
}

}  // namespace
}  // namespace mobisim
