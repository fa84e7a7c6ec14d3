// The rag_qa driver on the pipeline (issue 34): each policy's pipeline stages
// (policies/apps/rag_policy_stages.h) serve the users' queries on Pipeline::serve, each served
// request converted to a record. A small generated experiment (2 users x 10 queries, Table 1's
// fixed costs) gives, query by query, the latency, QA-hit outcome, reused tokens and phase times
// the policies' own replay loop gave, to the nanosecond, and the same summary latencies. The loop
// (`serve_on: loop`) is removed; its values are pinned in test_rag_qa_loop_values.h. Also the
// error paths, and an old config's `serve_on`.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/experiment.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "sim/simulator.h"
#include "test_rag_qa_loop_values.h"
#include "test_util.h"

namespace mobisim {
namespace rag_qa_on_pipeline_tests {  // named: unity builds put test files together
namespace {

using loop_values::LoopRecords;

// PerCache figure 14's phone, model and fixed costs, on a small generated workload (`generate`:
// the generator's overrides besides users and queries, e.g. its arrivals; `extra`: more
// experiment keys, each line indented by two spaces).
std::string experiment_yaml(const std::string& policies, const std::string& generate = "",
                            const std::string& extra = "") {
  return fmt::format(R"(name: rag_qa_on_pipeline
seed: 3
experiment:
  impl: rag_qa
{}  device: pixel7
  model: {{base: llama-3.2-3b, weight_dtype: int4, activation_dtype: fp32, kv_dtype: fp32}}
  workload:
    generate: {{base: default, users: 2, queries: {{per_user: 10{}}}{}}}
  pipeline: {{compute_unit: cpu, system_prompt_tokens: 64, top_k: 3, embed_query_ms: 1600, qa_match_ms: 10,
              retrieval_ms: 3940, kv_match_ms: 15}}
  policies:
{})",
                     extra, generate.empty() ? "" : ", paraphrase_prob: 0.775",
                     generate.empty() ? "" : ", " + generate, policies);
}

const char* kPolicies = R"(    - impl: naive
    - impl: ragcache
    - impl: meancache
    - impl: sleeptime
      knowledge_type: "personal notes"
    - impl: percache
      knowledge_type: "personal notes"
    - impl: percache
      label: no_qa_bank
      qa_bank: false
      knowledge_type: "personal notes"
)";
const std::vector<std::string> kLabels = {"naive", "ragcache", "meancache", "sleeptime", "percache", "no_qa_bank"};
const std::size_t kPolicyCount = 6;

// Runs the experiment in-process, its results written to `out`.
void run(const std::string& yaml, const std::string& out) {
  experiments::RunOptions o;
  o.output_override = out;
  o.quiet = true;
  o.no_plot = true;
  ASSERT_EQ(experiments::run_experiment(load_yaml_string(yaml, "test.yaml"), "test.yaml", o), 0);
}

std::vector<sim::Time> ns(const std::vector<double>& seconds) {
  std::vector<sim::Time> out;
  for (double s : seconds) out.push_back(sim::from_seconds(s));
  return out;
}

// A pinned column of the loop's records by name (a typo in a test is a failure, not an empty column).
template <class T>
const std::vector<T>& column(const std::map<std::string, std::vector<T>>& columns, const std::string& name) {
  const auto it = columns.find(name);
  if (it == columns.end()) throw std::runtime_error("no pinned loop column " + name);
  return it->second;
}

std::int64_t sum(const std::vector<std::int64_t>& v) {
  std::int64_t n = 0;
  for (auto x : v) n += x;
  return n;
}

// Every pinned summary column of the loop against the pipeline's: to the bit but for the columns
// `last_digits` (within 1e-12 relative) and the DRAM peak. The pipeline's DRAM ledger holds the
// K/V of the request being served (kv_residency: dram), the loop's held the weights alone: the
// pipeline's peak is above the loop's.
void expect_summary_is_the_loops(const h5::Reader& pipe, const std::map<std::string, std::vector<double>>& loop,
                                 std::size_t rows, const std::set<std::string>& last_digits) {
  for (const auto& [col, expected] : loop) {
    SCOPED_TRACE(col);
    const auto got = pipe.doubles("/summary/" + col, rows);
    ASSERT_EQ(expected.size(), rows);
    if (col == "dram_peak_bytes") {
      for (std::size_t p = 0; p < rows; ++p) EXPECT_GT(got[p], expected[p]) << p;
    } else if (last_digits.count(col)) {
      for (std::size_t p = 0; p < rows; ++p) EXPECT_NEAR(got[p], expected[p], 1e-12 * std::abs(expected[p])) << p;
    } else {
      EXPECT_EQ(got, expected);
    }
  }
}

class RagQaOnPipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("rag-qa-pipeline");
    run(experiment_yaml(kPolicies), dir_->file("pipeline.h5"));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static testing::TempDir* dir_;
};
testing::TempDir* RagQaOnPipeline::dir_ = nullptr;

TEST_F(RagQaOnPipeline, EveryQueryHasTheLoopsLatencyOutcomeReuseAndPhasesToTheNanosecond) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  const h5::Reader pipe(dir_->file("pipeline.h5"));
  ASSERT_EQ(loop_values::loop_records().size(), kPolicyCount);
  for (const LoopRecords& loop : loop_values::loop_records()) {
    const std::string& label = loop.label;
    SCOPED_TRACE(label);
    const std::string records = "/runs/" + label + "/records/";
    EXPECT_EQ(pipe.strings(records + "user", 20), loop.users);
    for (const char* col : {"query", "qa_hit", "reused_tokens", "prompt_tokens", "computed_tokens", "answer_tokens",
                            "retrieved_chunks", "kv_hit_chunks", "qa_stale", "bg_jobs"})
      EXPECT_EQ(pipe.ints(records + col, 20), column(loop.ints, col)) << col;
    for (const char* col : {"latency_s", "arrival_s", "start_s", "end_s", "embed_s", "qa_match_s", "retrieval_s",
                            "kv_match_s", "load_s", "prefill_s", "decode_s"})
      EXPECT_EQ(ns(pipe.doubles(records + col, 20)), column(loop.ns, col)) << col;
    // The columns the pipeline's Served carries for the loop (the phone's FLOPs while serving, the
    // slices read back, the best QA similarity, the served answer's scores, the caches' flash): the
    // same numbers.
    for (const char* col : {"flops", "bytes_loaded", "qa_similarity", "rouge_l", "bleu", "energy_j", "cache_bytes"})
      EXPECT_EQ(pipe.doubles(records + col, 20), column(loop.doubles, col)) << col;
    // The idle stages' background work before each query: the loop's FLOPs, busy time and energy
    // but for their last digits (the loop summed the token-by-token background decode phase by
    // phase; at ed69094 busy time and energy differed by at most 1e-15 relative).
    for (const char* col : {"bg_flops", "bg_s", "bg_energy_j"}) {
      const auto a = pipe.doubles(records + col, 20);
      const auto& b = column(loop.doubles, col);
      for (std::size_t i = 0; i < 20; ++i) EXPECT_NEAR(a[i], b[i], 1e-12 * b[i]) << col << " " << i;
    }
    // The case is not empty: the answer caches hit, the trees reuse, the idle stages work.
    const std::int64_t n_hits = sum(column(loop.ints, "qa_hit")), reused = sum(column(loop.ints, "reused_tokens")),
                       jobs = sum(column(loop.ints, "bg_jobs"));
    if (label == "meancache" || label == "percache") {
      EXPECT_GT(n_hits, 0);
    }
    if (label == "ragcache" || label == "percache" || label == "no_qa_bank") {
      EXPECT_GT(reused, 0);
    }
    if (label == "naive") {
      EXPECT_EQ(jobs, 0);  // no idle stage: no background work
    } else {
      EXPECT_GT(jobs, 0);  // predictions, or the reactive baselines' deferred stores
    }
    if (label == "no_qa_bank") {
      EXPECT_EQ(n_hits, 0);  // no QA bank: never an answer-cache hit
    }
  }
}

TEST_F(RagQaOnPipeline, TheSummarysLatencyColumnsAreTheLoops) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  const h5::Reader pipe(dir_->file("pipeline.h5"));
  const auto& loop = loop_values::loop_summary();
  EXPECT_EQ(pipe.strings("/summary/policy", kPolicyCount), kLabels);
  EXPECT_EQ(pipe.ints("/summary/queries", kPolicyCount), (std::vector<std::int64_t>(kPolicyCount, 20)));
  // Sums of phases the loop timed piece by piece (a prefill in steps, slices read one by one, the
  // background decode token by token): the same within their last digits.
  expect_summary_is_the_loops(pipe, loop, kPolicyCount,
                              {"mean_tpot_s", "mean_prefill_s", "mean_decode_s", "mean_load_s", "background_energy_j"});
}

// The reactive baselines (no prediction: RAGCache, MeanCache and both) with figure 14_calibrated's
// kind of arrivals: queries a minute apart on average, so many arrive while the previous one is
// served, and a paraphrased query often follows the one it repeats. The loop's engine wrote a
// served query's QA entry and slices only in an idle period its store job fits in (plan.seconds x
// 1.02 + 0.5 s before the next query), and so does the pipeline's `reactive_store` idle stage: a
// query queued behind the one that would fill the cache misses both ways. (Stored right after the
// answer, as the pipeline does without an idle stage, that query would hit: a QA hit or a longer
// tree match, and a shorter latency; test_rag_policy_stages.cpp checks this workload tells them
// apart.)
const char* kReactivePolicies = R"(    - impl: ragcache
    - impl: meancache
    - impl: ragcache_meancache
)";
const char* kQueueingArrivals = "arrival: {mean_gap_s: 60}";

class RagQaOnPipelineQueued : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("rag-qa-pipeline-queued");
    run(experiment_yaml(kReactivePolicies, kQueueingArrivals), dir_->file("pipeline.h5"));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static testing::TempDir* dir_;
};
testing::TempDir* RagQaOnPipelineQueued::dir_ = nullptr;

TEST_F(RagQaOnPipelineQueued, TheReactiveBaselinesStoreInIdleTimeAsTheLoopToTheBit) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  const h5::Reader pipe(dir_->file("pipeline.h5"));
  ASSERT_EQ(loop_values::queued_loop_records().size(), 3u);
  for (const LoopRecords& loop : loop_values::queued_loop_records()) {
    const std::string& label = loop.label;
    SCOPED_TRACE(label);
    const std::string records = "/runs/" + label + "/records/";
    EXPECT_EQ(pipe.strings(records + "user", 20), loop.users);
    for (const char* col : {"qa_hit", "reused_tokens", "prompt_tokens", "computed_tokens", "kv_hit_chunks", "bg_jobs"})
      EXPECT_EQ(pipe.ints(records + col, 20), column(loop.ints, col)) << col;
    for (const char* col : {"latency_s", "arrival_s", "start_s", "end_s", "embed_s", "qa_match_s", "retrieval_s",
                            "kv_match_s", "load_s", "prefill_s", "decode_s"})
      EXPECT_EQ(ns(pipe.doubles(records + col, 20)), column(loop.ns, col)) << col;
    // The deferred store jobs before each query: the same writes, the same busy time and energy.
    for (const char* col : {"bg_s", "bg_energy_j", "bg_flops", "cache_bytes", "energy_j", "flops", "bytes_loaded"})
      EXPECT_EQ(pipe.doubles(records + col, 20), column(loop.doubles, col)) << col;
    // Not vacuous: queries queue behind the previous one, and the caches are written in idle time.
    const auto& arrival = column(loop.ns, "arrival_s");
    const auto& end = column(loop.ns, "end_s");
    int queued = 0;
    for (std::size_t i = 1; i < 20; ++i) queued += loop.users[i] == loop.users[i - 1] && arrival[i] < end[i - 1];
    EXPECT_GE(queued, 3);
    EXPECT_GT(sum(column(loop.ints, "bg_jobs")), 0);
  }
  // The latencies, hit rates and energies to the bit; the prefills the loop timed step by step
  // within their last digits.
  const auto& loop = loop_values::queued_loop_summary();
  expect_summary_is_the_loops(pipe, loop, 3, {"mean_prefill_s"});
  // Both answer caches hit and both trees reuse on this workload.
  const auto& qa = column(loop, "qa_hit_rate");
  const auto& kv = column(loop, "kv_chunk_hit_rate");
  EXPECT_GT(qa[1], 0);
  EXPECT_GT(qa[2], 0);
  EXPECT_GT(kv[0], 0);
  EXPECT_GT(kv[2], 0);
}

// An old config that still selects how to serve (the removed loop, or the pipeline it chose
// between) is refused with the key named and the reason, not ignored.
TEST(RagQaServeOn, IsRemovedAndAnOldConfigThatSetsItIsAConfigError) {
  testing::TempDir dir("rag-qa-serve-on");
  for (const char* value : {"loop", "pipeline"}) {
    SCOPED_TRACE(value);
    testing::expect_config_error_naming(
        [&] { run(experiment_yaml("    - impl: naive\n", "", fmt::format("  serve_on: {}\n", value)), dir.file("x.h5")); },
        {"serve_on", "removed", "loop", "test.yaml:5"});
  }
}

// A key the loop's policy had but no stage carries (a QA bank key without a QA bank) is refused.
TEST(RagQaOnPipelineErrors, AKeyNoStageCarriesIsAConfigErrorNamingIt) {
  testing::TempDir dir("rag-qa-pipeline-err");
  testing::expect_config_error_naming(
      [&] {
        run(experiment_yaml("    - impl: naive\n    - impl: percache\n      label: no_qa_bank\n"
                            "      qa_bank: false\n      tau_query: 0.9\n"),
            dir.file("x.h5"));
      },
      {"no_qa_bank", "tau_query"});
}

}  // namespace
}  // namespace rag_qa_on_pipeline_tests
}  // namespace mobisim
