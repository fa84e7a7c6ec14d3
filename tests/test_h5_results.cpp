// HDF5 helpers and the experiment runner: atomic result files, determinism, bad input.
#include <gtest/gtest.h>

#include <filesystem>

#include "sim/error.h"
#include "sim/h5.h"
#include "test_util.h"

namespace mobisim {
namespace {

using testing::TempDir;

TEST(H5Results, TableRoundTripsColumnWise) {
  TempDir dir;
  const std::string path = dir.file("t.h5");
  {
    h5::Writer w(path);
    h5::Table t;
    t.add("policy", std::vector<std::string>{"naive", "percache"});
    t.add("latency_s", std::vector<double>{1.5, 0.25}, "s");
    t.add("hits", std::vector<std::int64_t>{0, 7}, "count");
    t.write(w.root(), "summary");
    EXPECT_FALSE(std::filesystem::exists(path));  // nothing at the final name before commit
    w.commit();
  }
  h5::Reader r(path);
  EXPECT_EQ(r.strings("/summary/policy"), (std::vector<std::string>{"naive", "percache"}));
  EXPECT_EQ(r.doubles("/summary/latency_s"), (std::vector<double>{1.5, 0.25}));
  EXPECT_EQ(r.ints("/summary/hits", 2), (std::vector<std::int64_t>{0, 7}));
  EXPECT_EQ(r.attr_string("/summary/latency_s", "unit"), "s");
  EXPECT_EQ(r.attr_int("/summary", "n_rows"), 2);
  EXPECT_THROW(r.doubles("/summary/latency_s", 3), InputError);  // wrong length
  EXPECT_THROW(r.doubles("/summary/missing"), InputError);
}

TEST(H5Results, WriterWithoutCommitLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("never.h5");
  {
    h5::Writer w(path);
    h5::write_dataset(w.root(), "x", std::vector<double>{1, 2, 3});
  }  // destroyed without commit, as after an exception
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(H5Results, CorruptAndTruncatedFilesAreInputErrors) {
  TempDir dir;
  testing::write_text(dir.file("text.h5"), "this is not hdf5");
  EXPECT_THROW(h5::Reader(dir.file("text.h5")), InputError);
  EXPECT_THROW(h5::Reader(dir.file("missing.h5")), InputError);
  {
    h5::Writer w(dir.file("full.h5"));
    h5::write_dataset(w.root(), "big", std::vector<double>(100000, 1.0));
    w.commit();
  }
  const std::string bytes = testing::read_bytes(dir.file("full.h5"));
  testing::write_text(dir.file("cut.h5"), bytes.substr(0, bytes.size() / 2));
  try {
    h5::Reader r(dir.file("cut.h5"));
    r.doubles("/big");
    FAIL() << "a truncated file must not read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cut.h5"), std::string::npos);
  }
}

const char* kTinyExperiment = R"(
name: tiny
seed: 3
experiment:
  impl: rag_qa
  device: pixel7
  model: {base: llama-3.2-1b, weight_dtype: int4}
  workload:
    generate: default
    max_users: 2
    max_queries_per_user: 4
  policies:
    - impl: naive
)";

TEST(H5Results, SameSeedGivesByteIdenticalResultFiles) {
  TempDir dir;
  testing::write_text(dir.file("tiny.yaml"), kTinyExperiment);
  // A second run on two worker threads must give the same bytes.
  ASSERT_EQ(testing::same_bytes_at_one_and_two_threads(dir.file("tiny.yaml"), dir.file("a.h5"), dir.file("b.h5")), "");
  h5::Reader r(dir.file("a.h5"));
  EXPECT_EQ(r.ints("/summary/queries"), (std::vector<std::int64_t>{8}));
  EXPECT_EQ(r.attr_int("/", "seed"), 3);
  EXPECT_NE(r.attr_string("/", "config").find("rag_qa"), std::string::npos);
  const auto lat = r.doubles("/runs/naive/records/latency_s", 8);
  const auto pre = r.doubles("/runs/naive/records/prefill_s", 8);
  const auto dec = r.doubles("/runs/naive/records/decode_s", 8);
  for (std::size_t i = 0; i < lat.size(); ++i) EXPECT_NEAR(lat[i], pre[i] + dec[i], 1e-6);
  EXPECT_TRUE(std::filesystem::exists(dir.file("a_summary.csv")));
  // A different seed gives a different workload.
  auto c = testing::run_mobisim("run " + dir.file("tiny.yaml") + " -p seed=4 --no-plot --quiet --output " +
                                dir.file("c.h5"));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(h5::Reader(dir.file("c.h5")).doubles("/runs/naive/records/latency_s"), lat);
}

struct BadCase {
  std::string name, yaml_or_override, expected_message;
  int exit_code;
};

TEST(H5Results, BadExperimentsFailClearlyWithoutResultFiles) {
  TempDir dir;
  testing::write_text(dir.file("tiny.yaml"), kTinyExperiment);
  const std::vector<BadCase> cases = {
      {"unknown policy", "-p experiment.policies[0].impl=nopolicy", "unknown rag_policy 'nopolicy'", 3},
      {"unknown key", "-p experiment.pipeline.topk=3", "unknown key 'topk'", 3},
      {"negative value", "-p experiment.pipeline.top_k=-1", "must be >= 1", 3},
      {"unknown device", "-p experiment.device=nophone", "unknown device 'nophone'", 3},
      {"missing unit", "-p experiment.pipeline.compute_unit=tpu", "has no compute unit 'tpu'", 3},
      {"negative bandwidth", "-p experiment.device.dram.bandwidth_gbps=-5",
       "-p 'experiment.device.dram.bandwidth_gbps=-5': key 'experiment.device.dram.bandwidth_gbps': value -5 must be > 0",
       3},
      {"missing trace", "-p experiment.workload.generate=null -p experiment.workload.trace=/nonexistent.h5",
       "/nonexistent.h5: no such file", 4},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = testing::run_mobisim("run " + dir.file("tiny.yaml") + " " + c.yaml_or_override +
                                  " --no-plot --quiet --output " + dir.file("bad.h5"));
    EXPECT_EQ(r.exit_code, c.exit_code) << r.output;
    EXPECT_NE(r.output.find(c.expected_message), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("bad.h5")));
  }
  testing::write_text(dir.file("broken.yaml"), "experiment:\n  impl: rag_qa\n  device: [pixel7\n");
  auto r = testing::run_mobisim("validate " + dir.file("broken.yaml"));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("broken.yaml:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("malformed YAML"), std::string::npos) << r.output;
  testing::write_text(dir.file("trunc.h5"), "\x89HDF\r\n\x1a\n truncated");
  auto t = testing::run_mobisim("run " + dir.file("tiny.yaml") +
                                " -p experiment.workload.generate=null -p experiment.workload.trace=" +
                                dir.file("trunc.h5") + " --no-plot --quiet --output " + dir.file("bad.h5"));
  EXPECT_EQ(t.exit_code, 4) << t.output;
}

TEST(H5Results, QuickstartInvariantsHoldForEveryPolicy) {
  // Energies are never negative, a query's latency covers its phases, and every policy answers every query.
  TempDir dir;
  auto r = testing::run_mobisim("run " + testing::source_dir() + "/experiments/quickstart.yaml " +
                                "-p experiment.workload.max_users=2 -p experiment.workload.max_queries_per_user=6 "
                                "--threads 2 --no-plot --quiet --output " + dir.file("q.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  h5::Reader h(dir.file("q.h5"));
  const auto policies = h.strings("/summary/policy");
  EXPECT_EQ(policies.size(), 7u);
  for (const auto& p : policies) {
    SCOPED_TRACE(p);
    const std::string g = "/runs/" + p + "/records/";
    const auto lat = h.doubles(g + "latency_s", 12);
    std::vector<double> phases(12, 0.0);
    for (const char* c : {"embed_s", "qa_match_s", "retrieval_s", "kv_match_s", "load_s", "prefill_s", "decode_s"}) {
      const auto v = h.doubles(g + c, 12);
      for (std::size_t i = 0; i < v.size(); ++i) {
        EXPECT_GE(v[i], 0.0) << c;
        phases[i] += v[i];
      }
    }
    for (std::size_t i = 0; i < lat.size(); ++i) EXPECT_GE(lat[i] + 1e-9, phases[i]) << i;
    for (const char* c : {"energy_j", "bg_energy_j", "bg_flops", "flops"})
      for (double v : h.doubles(g + c, 12)) EXPECT_GE(v, 0.0) << c;
  }
}

TEST(H5Results, CliHelpVersionListAndValidate) {
  auto h = testing::run_mobisim("--help");
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.output.find("run"), std::string::npos);
  EXPECT_NE(h.output.find("exit codes"), std::string::npos);
  EXPECT_EQ(testing::run_mobisim("--version").exit_code, 0);
  auto l = testing::run_mobisim("list");
  EXPECT_EQ(l.exit_code, 0);
  for (const char* name : {"pixel7", "redmi-k60-pro", "redmi-k70-pro", "galaxy-s22-ultra", "oneplus-ace6",
                           "oneplus-12", "oneplus-13", "oneplus-ace5-pro", "oneplus-ace3", "oneplus-ace2",
                           "iphone-14-pro", "midtier-android-ufs21", "server-p100", "llama-3.2-1b",
                           "llama-3.2-3b", "qwen1.5-1.8b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b",
                           "qwen2.5-7b", "mistral-7b", "generic-3b", "naive", "rag_qa"})
    EXPECT_NE(l.output.find(name), std::string::npos) << name;
  // Each engine says which of the device's parts it changes (DynaKV's runtime: only its reads) and
  // what it takes from the device profile by name (issue 37).
  const auto engines = testing::run_mobisim("list engines");
  for (const char* line : {"dynakv", "[sets: storage; inherits from the device: cpu]", "qnn",
                           "[sets: npu; inherits from the device: npu]", "executorch",
                           "[sets: cpu, gpu, npu; inherits from the device: cpu.decode.bf16, gpu.decode.int4, npu]"})
    EXPECT_NE(engines.output.find(line), std::string::npos) << line << "\n" << engines.output;
  EXPECT_EQ(testing::run_mobisim("frobnicate").exit_code, 2);
  EXPECT_EQ(testing::run_mobisim("run").exit_code, 2);
  auto v = testing::run_mobisim("validate " + testing::source_dir() + "/experiments/quickstart.yaml");
  EXPECT_EQ(v.exit_code, 0) << v.output;
}

}  // namespace
}  // namespace mobisim
