// A newcomer's path (issue 36): runs with overrides never clobber each other, -m expands into a
// sweep, a timeline filter that names nothing is an error, results say where they came from and
// which costs are not modelled, export writes tidy CSV, and implausible values are refused.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "experiments/experiment.h"
#include "experiments/sweep.h"
#include "sim/atomic_file.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "test_util.h"

namespace mobisim {
namespace {

namespace fs = std::filesystem;

// A small quick start (2 users x 4 queries, two policies) writing into `dir`.
std::string small_quickstart(const testing::TempDir& dir) {
  const std::string path = dir.file("small.yaml");
  testing::write_text(path, fmt::format(R"(name: small
seed: 1
output: {}
experiment:
  impl: rag_qa
  device: pixel7
  model: {{base: llama-3.2-3b, weight_dtype: int4, activation_dtype: fp32}}
  workload: {{generate: default, max_users: 2, max_queries_per_user: 4}}
  pipeline: {{compute_unit: cpu, top_k: 3}}
  policies:
    - impl: naive
    - {{impl: percache, knowledge_type: "personal notes"}}
)",
                                        dir.file("small.h5")));
  return path;
}

std::vector<std::string> h5_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".h5") out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Newcomer, AnOverriddenRunWritesItsOwnFileAndNeverReplacesAnotherConfiguration) {
  testing::TempDir dir("newcomer_clobber");
  const std::string yaml = small_quickstart(dir);
  ASSERT_EQ(testing::run_mobisim("run " + yaml + " --no-plot --quiet").exit_code, 0);
  const auto over = testing::run_mobisim("run " + yaml + " --no-plot --quiet -p experiment.policies.percache.tau_query=0.9");
  ASSERT_EQ(over.exit_code, 0) << over.output;
  const auto files = h5_files(dir.path());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[1], "small.h5");
  EXPECT_TRUE(files[0].starts_with("small-") && files[0].size() == std::string("small-12345678.h5").size()) << files[0];
  // The overridden file records its origin; the plain one is untouched.
  const h5::Reader o(dir.file(files[0]));
  EXPECT_EQ(o.attr_strings("/", "overrides"), std::vector<std::string>{"experiment.policies.percache.tau_query=0.9"});
  EXPECT_EQ(o.attr_string("/", "config_file"), yaml);
  EXPECT_TRUE(h5::Reader(dir.file("small.h5")).attr_strings("/", "overrides").empty());

  // Writing another configuration over a result is refused, naming the key that differs...
  const auto refused = testing::run_mobisim(
      fmt::format("run {} --no-plot --quiet -p experiment.pipeline.top_k=2 --output {}", yaml, dir.file("small.h5")));
  EXPECT_EQ(refused.exit_code, kExitUsage);
  EXPECT_NE(refused.output.find("experiment.pipeline.top_k: 3 -> 2"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("--force"), std::string::npos) << refused.output;
  // ... the same configuration replaces it, and --force replaces anything.
  EXPECT_EQ(testing::run_mobisim("run " + yaml + " --no-plot --quiet").exit_code, 0);
  EXPECT_EQ(testing::run_mobisim(fmt::format("run {} --no-plot --quiet --force -p experiment.pipeline.top_k=2 --output {}",
                                             yaml, dir.file("small.h5")))
                .exit_code,
            0);
  EXPECT_NE(h5::Reader(dir.file("small.h5")).attr_string("/", "config").find("top_k: 2"), std::string::npos);
}

TEST(Newcomer, MultirunExpandsIntoAGridSweepAddressedByLabels) {
  testing::TempDir dir("newcomer_multirun");
  const std::string yaml = small_quickstart(dir);
  const std::string out = dir.file("sweep");
  const auto r = testing::run_mobisim(fmt::format(
      "run {} --quiet --output {} -m experiment.policies.percache.tau_query=0.8,0.9 -m experiment.pipeline.top_k=2,3", yaml,
      out));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const h5::Reader index(out + "/index.h5");
  const auto tau = index.strings("/points/experiment.policies.percache.tau_query");
  const auto k = index.strings("/points/experiment.pipeline.top_k");
  // 2 x 2 points, two policies each, first key slowest.
  ASSERT_EQ(tau.size(), 8u);
  EXPECT_EQ(tau, (std::vector<std::string>{"0.8", "0.8", "0.8", "0.8", "0.9", "0.9", "0.9", "0.9"}));
  EXPECT_EQ(k, (std::vector<std::string>{"2", "2", "3", "3", "2", "2", "3", "3"}));
  EXPECT_EQ(h5_files(out + "/runs").size(), 4u);
  const auto bad = testing::run_mobisim(fmt::format("run {} --quiet -m experiment.pipeline.top_k", yaml));
  EXPECT_EQ(bad.exit_code, kExitUsage);
}

TEST(Newcomer, ATimelineFilterNamingNoRunIsAnErrorAndQueriesAreSpans) {
  testing::TempDir dir("newcomer_timeline");
  const std::string yaml = small_quickstart(dir);
  const auto typo = testing::run_mobisim(fmt::format("run {} --no-plot --quiet --timeline {} --timeline-filter policy=percahce",
                                                     yaml, dir.file("t.json")));
  EXPECT_EQ(typo.exit_code, kExitUsage);
  EXPECT_NE(typo.output.find("policy=percahce names no run"), std::string::npos) << typo.output;
  EXPECT_NE(typo.output.find("naive, percache"), std::string::npos) << typo.output;
  EXPECT_FALSE(path_exists(dir.file("t.json")));
  EXPECT_FALSE(path_exists(dir.file("small.h5")));  // nothing written by a run that failed

  ASSERT_EQ(testing::run_mobisim(fmt::format("run {} --no-plot --quiet --timeline {} --timeline-filter policy=percache",
                                             yaml, dir.file("t.json")))
                .exit_code,
            0);
  const std::string json = read_file(dir.file("t.json"));
  EXPECT_NE(json.find("\"otherData\":{\"config_file\":\"" + yaml + "\""), std::string::npos);
  // One span per query of the two users under percache, named by user and index.
  std::size_t spans = 0;
  for (std::size_t at = json.find("\"name\":\"query "); at != std::string::npos; at = json.find("\"name\":\"query ", at + 1))
    ++spans;
  EXPECT_EQ(spans, 8u);
}

TEST(Newcomer, ResultsNameTheCostsThatAreNotModelledAndCarryTokenTimes) {
  testing::TempDir dir("newcomer_summary");
  const std::string yaml = small_quickstart(dir);
  const auto r = testing::run_mobisim("run " + yaml + " --no-plot");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("not modelled (taken as 0 s): experiment.pipeline.embed_query_ms"), std::string::npos);
  const h5::Reader f(dir.file("small.h5"));
  EXPECT_EQ(f.attr_strings("/", "not_modelled"),
            (std::vector<std::string>{"experiment.pipeline.embed_query_ms", "experiment.pipeline.kv_match_ms",
                                      "experiment.pipeline.qa_match_ms", "experiment.pipeline.retrieval_ms"}));
  // TTFT is latency minus decode (decode is a query's last phase); TPOT is decode time per token.
  const auto latency = f.doubles("/runs/naive/records/latency_s");
  const auto decode = f.doubles("/runs/naive/records/decode_s");
  const auto tokens = f.ints("/runs/naive/records/answer_tokens");
  double ttft = 0, tpot = 0;
  for (std::size_t i = 0; i < latency.size(); ++i) {
    ttft += latency[i] - decode[i];
    tpot += decode[i] / static_cast<double>(tokens[i]);
  }
  const auto mean_ttft = f.doubles("/summary/mean_ttft_s"), mean_tpot = f.doubles("/summary/mean_tpot_s");
  EXPECT_NEAR(mean_ttft[0], ttft / static_cast<double>(latency.size()), 1e-9);
  EXPECT_NEAR(mean_tpot[0], tpot / static_cast<double>(latency.size()), 1e-12);
  EXPECT_GE(f.doubles("/summary/p99_latency_s")[0], f.doubles("/summary/p90_latency_s")[0]);
}

TEST(Newcomer, ExportWritesOneTidyRowPerQueryWithThePolicyAsText) {
  testing::TempDir dir("newcomer_export");
  const std::string yaml = small_quickstart(dir);
  ASSERT_EQ(testing::run_mobisim("run " + yaml + " --no-plot --quiet").exit_code, 0);
  const auto r = testing::run_mobisim(fmt::format("export {} --csv {}", dir.file("small.h5"), dir.file("csv")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string csv = read_file(dir.file("csv/small_records.csv"));
  EXPECT_TRUE(csv.starts_with("policy,user,query,arrival_s,")) << csv.substr(0, 80);
  std::size_t lines = 0, naive = 0, percache = 0;
  for (std::size_t at = 0; (at = csv.find('\n', at)) != std::string::npos; ++at) ++lines;
  for (std::size_t at = 0; (at = csv.find("\nnaive,", at)) != std::string::npos; ++at) ++naive;
  for (std::size_t at = 0; (at = csv.find("\npercache,", at)) != std::string::npos; ++at) ++percache;
  EXPECT_EQ(lines, 1u + 16u);  // header + 2 users x 4 queries x 2 policies
  EXPECT_EQ(naive, 8u);
  EXPECT_EQ(percache, 8u);
  EXPECT_EQ(read_file(dir.file("csv/small_summary.csv")), read_file(dir.file("small_summary.csv")));
  EXPECT_EQ(testing::run_mobisim("export " + dir.file("csv/small_summary.csv") + " --csv " + dir.file("x")).exit_code,
            kExitInput);
}

TEST(Newcomer, AKeyOfTheDefaultWorkloadCanBeOverriddenFromTheCommandLine) {
  // `-p ...generate.users=3` turns `generate: default` into `{base: default, users: 3}`: the built-in
  // rag_default with one key replaced (it was "unknown base workloads 'default'").
  testing::TempDir dir("newcomer_default_workload");
  const std::string yaml = small_quickstart(dir);
  const auto r = testing::run_mobisim(fmt::format(
      "run {} --no-plot --quiet -p experiment.workload.generate.users=3 -p experiment.workload.max_users=0 "
      "-p experiment.workload.max_queries_per_user=1 --output {}",
      yaml, dir.file("three.h5")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(testing::run_mobisim(fmt::format("export {} --csv {}", dir.file("three.h5"), dir.file("csv"))).exit_code, 0);
  const std::string csv = read_file(dir.file("csv/three_records.csv"));
  std::size_t naive = 0;
  for (std::size_t at = 0; (at = csv.find("\nnaive,", at)) != std::string::npos; ++at) ++naive;
  EXPECT_EQ(naive, 3u);  // 3 generated users (rag_default has 5) x 1 query
}

TEST(Newcomer, ValuesBeyondPhysicsAreRefusedWithTheBoundNamed) {
  testing::TempDir dir("newcomer_bounds");
  const std::string yaml = small_quickstart(dir);
  const auto r = testing::run_mobisim("validate " + yaml + " -p experiment.device.storage.seq_read_gbps=4000");
  EXPECT_EQ(r.exit_code, kExitConfig);
  EXPECT_NE(r.output.find("4000 GB/s is beyond what ufs3.1 can carry (2.34 GB/s"), std::string::npos) << r.output;
  // At the link's ceiling it is accepted.
  EXPECT_EQ(testing::run_mobisim("validate " + yaml + " -p experiment.device.storage.seq_read_gbps=2.34").exit_code, 0);
}

TEST(Newcomer, FewSeedsAreSaidToGiveWideIntervals) {
  EXPECT_NE(experiments::sweep::seeds_note(1).find("no confidence intervals"), std::string::npos);
  // t(0.975, 1 degree of freedom) = 12.706.
  EXPECT_NE(experiments::sweep::seeds_note(2).find("12.7 standard errors"), std::string::npos);
  EXPECT_EQ(experiments::sweep::seeds_note(3), "");
}

TEST(Newcomer, ConfigDifferencesNameTheChangedKeys) {
  const YAML::Node a = YAML::Load("x: {y: 1, z: [a, b]}\nw: 2\n");
  const YAML::Node b = YAML::Load("x: {y: 1, z: [a, c]}\nv: 3\n");
  EXPECT_EQ(experiments::config_differences(a, b),
            (std::vector<std::string>{"x.z.1: b -> c", "v: (absent) -> 3", "w: 2 -> (absent)"}));
  EXPECT_TRUE(experiments::config_differences(a, a).empty());
}

TEST(Newcomer, EverySubcommandAnswersHelp) {
  for (const char* cmd : {"run", "validate", "config", "list", "compare", "export", "sweep", "reproduce", "fidelity",
                          "calibrate", "ondevice", "kernel", "trace", "trace import", "trace import jsonl",
                          "trace generate"}) {
    const auto r = testing::run_mobisim(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find("usage"), std::string::npos) << cmd << ": " << r.output;
  }
}

}  // namespace
}  // namespace mobisim

namespace mobisim {
namespace {

TEST(Newcomer, PathsInAYamlResolveAgainstItsFolder) {
  ConfigSource in_file{std::make_shared<std::string>("configs/exp/run.yaml"), "experiment.workload.trace"};
  EXPECT_EQ(resolve_input_path("data/t.h5", in_file), "configs/exp/data/t.h5");
  EXPECT_EQ(resolve_input_path("../t.h5", in_file), "configs/t.h5");
  EXPECT_EQ(resolve_input_path("{cwd}/results/t.h5", in_file), "results/t.h5");  // written by other runs
  EXPECT_EQ(resolve_input_path("/abs/t.h5", in_file), "/abs/t.h5");
  EXPECT_EQ(resolve_input_path("{shared}/models/m.bin", in_file), "{shared}/models/m.bin");
  EXPECT_EQ(resolve_input_path("", in_file), "");
  // A YAML in the working directory, a built-in profile, and a -p override keep the path as given.
  EXPECT_EQ(resolve_input_path("t.h5", ConfigSource{std::make_shared<std::string>("run.yaml"), "x"}), "t.h5");
  EXPECT_EQ(resolve_input_path("t.h5", ConfigSource{std::make_shared<std::string>("builtin:configs/a.yaml"), "x"}),
            "t.h5");
  auto overrides = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"experiment.workload={trace: t.h5}"});
  EXPECT_EQ(resolve_input_path("t.h5", ConfigSource{std::make_shared<std::string>("configs/exp/run.yaml"),
                                                     "experiment.workload.trace", overrides}),
            "t.h5");
}

TEST(Newcomer, AnExperimentReadsATraceBesideItsYamlFromAnyWorkingDirectory) {
  testing::TempDir dir("newcomer_paths");
  fs::create_directories(dir.file("exp"));
  ASSERT_EQ(testing::run_mobisim(fmt::format("trace generate {}/configs/workloads/rag_default.yaml --out {}",
                                             testing::source_dir(), dir.file("exp/my_trace.h5")))
                .exit_code,
            0);
  testing::write_text(dir.file("exp/run.yaml"), R"(name: beside
experiment:
  impl: rag_qa
  device: pixel7
  model: {base: llama-3.2-3b, weight_dtype: int4, activation_dtype: fp32}
  workload: {trace: my_trace.h5, max_users: 1, max_queries_per_user: 2}
  policies: [{impl: naive}]
)");
  // Run from another folder: the trace is found beside the YAML, and the stored configuration
  // names where it was read from.
  const auto r = testing::run_mobisim_in(dir.path().string(), "run exp/run.yaml --no-plot --quiet --output out.h5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const YAML::Node stored = YAML::Load(h5::Reader(dir.file("out.h5")).attr_string("/", "config"));
  EXPECT_EQ(stored["experiment"]["workload"]["trace"].as<std::string>(), "exp/my_trace.h5");
}

}  // namespace
}  // namespace mobisim
