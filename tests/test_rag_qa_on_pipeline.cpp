// The rag_qa driver's `serve_on: pipeline` (issue 34 item 4): each policy's pipeline stages
// (policies/apps/rag_policy_stages.h) serve the users' queries on Pipeline::serve, converted to the
// loop's records. A small generated experiment (2 users x 10 queries, Table 1's fixed costs) run
// both ways gives, query by query, the same latency, QA-hit outcome, reused tokens and phase
// times to the nanosecond, and the same summary latencies; and the error paths.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "experiments/experiment.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "sim/simulator.h"
#include "test_util.h"

namespace mobisim {
namespace rag_qa_on_pipeline_tests {  // named: unity builds put test files together
namespace {

// PerCache figure 14's phone, model and fixed costs, on a small generated workload (`generate`:
// the generator's overrides besides users and queries, e.g. its arrivals).
std::string experiment_yaml(const std::string& serve_on, const std::string& policies,
                            const std::string& generate = "") {
  return fmt::format(R"(name: rag_qa_on_pipeline
seed: 3
experiment:
  impl: rag_qa
  serve_on: {}
  device: pixel7
  model: {{base: llama-3.2-3b, weight_dtype: int4, activation_dtype: fp32, kv_dtype: fp32}}
  workload:
    generate: {{base: default, users: 2, queries: {{per_user: 10{}}}{}}}
  pipeline: {{compute_unit: cpu, system_prompt_tokens: 64, top_k: 3, embed_query_ms: 1600, qa_match_ms: 10,
              retrieval_ms: 3940, kv_match_ms: 15}}
  policies:
{})",
                     serve_on, generate.empty() ? "" : ", paraphrase_prob: 0.775",
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

class RagQaOnPipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("rag-qa-pipeline");
    run(experiment_yaml("loop", kPolicies), dir_->file("loop.h5"));
    run(experiment_yaml("pipeline", kPolicies), dir_->file("pipeline.h5"));
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
  const h5::Reader loop(dir_->file("loop.h5")), pipe(dir_->file("pipeline.h5"));
  for (const std::string& label : kLabels) {
    SCOPED_TRACE(label);
    const std::string records = "/runs/" + label + "/records/";
    const auto hits = loop.ints(records + "qa_hit", 20);
    EXPECT_EQ(pipe.ints(records + "qa_hit", 20), hits);
    EXPECT_EQ(pipe.strings(records + "user", 20), loop.strings(records + "user", 20));
    EXPECT_EQ(pipe.ints(records + "query", 20), loop.ints(records + "query", 20));
    for (const char* col : {"latency_s", "arrival_s", "start_s", "end_s", "embed_s", "qa_match_s", "retrieval_s",
                            "kv_match_s", "load_s", "prefill_s", "decode_s"})
      EXPECT_EQ(ns(pipe.doubles(records + col, 20)), ns(loop.doubles(records + col, 20))) << col;
    for (const char* col : {"reused_tokens", "prompt_tokens", "computed_tokens", "answer_tokens", "retrieved_chunks",
                            "kv_hit_chunks", "qa_stale"})
      EXPECT_EQ(pipe.ints(records + col, 20), loop.ints(records + col, 20)) << col;
    // The columns the pipeline's Served carries for the loop (the phone's FLOPs while serving, the
    // slices read back, the best QA similarity, the served answer's scores): the same numbers.
    for (const char* col : {"flops", "bytes_loaded", "qa_similarity", "rouge_l", "bleu", "energy_j"})
      EXPECT_EQ(pipe.doubles(records + col, 20), loop.doubles(records + col, 20)) << col;
    // The idle stages' background work before each query is the loop's (jobs, FLOPs).
    if (label == "sleeptime" || label == "percache" || label == "no_qa_bank") {
      EXPECT_EQ(pipe.ints(records + "bg_jobs", 20), loop.ints(records + "bg_jobs", 20));
      const auto a = pipe.doubles(records + "bg_flops", 20), b = loop.doubles(records + "bg_flops", 20);
      for (std::size_t i = 0; i < 20; ++i) EXPECT_NEAR(a[i], b[i], 1e-12 * b[i]) << "bg_flops " << i;
    }
    // The case is not empty: the answer caches hit, the trees reuse, the idle stages work.
    std::int64_t n_hits = 0, reused = 0, jobs = 0;
    for (auto h : hits) n_hits += h;
    for (auto r : loop.ints(records + "reused_tokens", 20)) reused += r;
    for (auto j : loop.ints(records + "bg_jobs", 20)) jobs += j;
    if (label == "meancache" || label == "percache") {
      EXPECT_GT(n_hits, 0);
    }
    if (label == "ragcache" || label == "percache" || label == "no_qa_bank") {
      EXPECT_GT(reused, 0);
    }
    if (label == "sleeptime" || label == "percache" || label == "no_qa_bank") {
      EXPECT_GT(jobs, 0);
    }
    if (label == "no_qa_bank") {
      EXPECT_EQ(n_hits, 0);  // no QA bank: never an answer-cache hit
    }
  }
}

TEST_F(RagQaOnPipeline, TheSummarysLatencyColumnsAreTheLoops) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  const h5::Reader loop(dir_->file("loop.h5")), pipe(dir_->file("pipeline.h5"));
  EXPECT_EQ(pipe.strings("/summary/policy", kPolicyCount), kLabels);
  EXPECT_EQ(pipe.ints("/summary/queries", kPolicyCount), (std::vector<std::int64_t>(kPolicyCount, 20)));
  // The latencies are the same records' latencies: the same numbers, to the bit.
  for (const char* col : {"mean_latency_s", "p50_latency_s", "p90_latency_s", "p99_latency_s", "mean_ttft_s",
                          "p90_ttft_s", "p99_ttft_s", "qa_hit_rate", "kv_chunk_hit_rate", "total_tflops"})
    EXPECT_EQ(pipe.doubles(std::string("/summary/") + col, kPolicyCount), loop.doubles(std::string("/summary/") + col, kPolicyCount)) << col;
  // Sums of phases the loop times piece by piece (a prefill in steps, slices read one by one): the
  // same within their last digits.
  for (const char* col : {"mean_tpot_s", "mean_prefill_s", "mean_decode_s", "mean_load_s"}) {
    const auto a = pipe.doubles(std::string("/summary/") + col, kPolicyCount), b = loop.doubles(std::string("/summary/") + col, kPolicyCount);
    for (std::size_t p = 0; p < kPolicyCount; ++p) EXPECT_NEAR(a[p], b[p], 1e-12 * std::abs(b[p])) << col << " " << kLabels[p];
  }
  // The K/V of the request being served is in the pipeline's DRAM ledger (kv_residency: dram), not
  // the loop's: the pipeline's peak is above the weights the loop holds alone.
  const auto peak_pipe = pipe.doubles("/summary/dram_peak_bytes", kPolicyCount), peak_loop = loop.doubles("/summary/dram_peak_bytes", kPolicyCount);
  for (std::size_t p = 0; p < kPolicyCount; ++p) EXPECT_GT(peak_pipe[p], peak_loop[p]) << kLabels[p];
}

// The reactive baselines (no prediction: RAGCache, MeanCache and both) with figure 14_calibrated's
// kind of arrivals: queries a minute apart on average, so many arrive while the previous one is
// served, and a paraphrased query often follows the one it repeats. The loop's engine writes a
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
const std::vector<std::string> kReactiveLabels = {"ragcache", "meancache", "ragcache_meancache"};
const char* kQueueingArrivals = "arrival: {mean_gap_s: 60}";

class RagQaOnPipelineQueued : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("rag-qa-pipeline-queued");
    run(experiment_yaml("loop", kReactivePolicies, kQueueingArrivals), dir_->file("loop.h5"));
    run(experiment_yaml("pipeline", kReactivePolicies, kQueueingArrivals), dir_->file("pipeline.h5"));
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
  const h5::Reader loop(dir_->file("loop.h5")), pipe(dir_->file("pipeline.h5"));
  for (const std::string& label : kReactiveLabels) {
    SCOPED_TRACE(label);
    const std::string records = "/runs/" + label + "/records/";
    EXPECT_EQ(pipe.ints(records + "qa_hit", 20), loop.ints(records + "qa_hit", 20));
    for (const char* col : {"latency_s", "start_s", "end_s", "embed_s", "qa_match_s", "retrieval_s", "kv_match_s",
                            "load_s", "prefill_s", "decode_s"})
      EXPECT_EQ(ns(pipe.doubles(records + col, 20)), ns(loop.doubles(records + col, 20))) << col;
    for (const char* col : {"reused_tokens", "prompt_tokens", "computed_tokens", "kv_hit_chunks", "bg_jobs"})
      EXPECT_EQ(pipe.ints(records + col, 20), loop.ints(records + col, 20)) << col;
    // The deferred store jobs before each query: the same writes, the same busy time and energy.
    for (const char* col : {"bg_s", "bg_energy_j", "bg_flops", "cache_bytes", "energy_j", "flops", "bytes_loaded"})
      EXPECT_EQ(pipe.doubles(records + col, 20), loop.doubles(records + col, 20)) << col;
    // Not vacuous: queries queue behind the previous one, and the caches are written in idle time.
    const auto arrival = loop.doubles(records + "arrival_s", 20), end = loop.doubles(records + "end_s", 20);
    const auto users = loop.strings(records + "user", 20);
    int queued = 0;
    for (std::size_t i = 1; i < 20; ++i) queued += users[i] == users[i - 1] && arrival[i] < end[i - 1];
    EXPECT_GE(queued, 3);
    std::int64_t jobs = 0;
    for (auto j : loop.ints(records + "bg_jobs", 20)) jobs += j;
    EXPECT_GT(jobs, 0);
  }
  for (const char* col : {"mean_latency_s", "p90_latency_s", "qa_hit_rate", "kv_chunk_hit_rate", "total_tflops",
                          "background_energy_j", "query_energy_j"})
    EXPECT_EQ(pipe.doubles(std::string("/summary/") + col, 3), loop.doubles(std::string("/summary/") + col, 3)) << col;
  // Both answer caches hit and both trees reuse on this workload.
  const auto qa = loop.doubles("/summary/qa_hit_rate", 3), kv = loop.doubles("/summary/kv_chunk_hit_rate", 3);
  EXPECT_GT(qa[1], 0);
  EXPECT_GT(qa[2], 0);
  EXPECT_GT(kv[0], 0);
  EXPECT_GT(kv[2], 0);
}

// The default is the pipeline; `loop` stays selectable (the reference the tests above compare to).
TEST(RagQaServeOn, DefaultsToThePipeline) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  testing::TempDir dir("rag-qa-serve-on-default");
  std::string yaml = experiment_yaml("loop", "    - impl: ragcache\n");
  const std::string line = "  serve_on: loop\n";
  ASSERT_NE(yaml.find(line), std::string::npos);
  yaml.erase(yaml.find(line), line.size());
  run(yaml, dir.file("default.h5"));
  run(experiment_yaml("loop", "    - impl: ragcache\n"), dir.file("loop.h5"));
  const h5::Reader by_default(dir.file("default.h5")), loop(dir.file("loop.h5"));
  // The request's K/V is held in the pipeline's DRAM ledger only (the loop holds the weights).
  EXPECT_GT(by_default.doubles("/summary/dram_peak_bytes", 1)[0], loop.doubles("/summary/dram_peak_bytes", 1)[0]);
  EXPECT_EQ(by_default.doubles("/summary/mean_latency_s", 1), loop.doubles("/summary/mean_latency_s", 1));
}

// A key the loop's policy has but no stage carries (a QA bank key without a QA bank) is refused.
TEST(RagQaOnPipelineErrors, AKeyNoStageCarriesIsAConfigErrorNamingIt) {
  testing::TempDir dir("rag-qa-pipeline-err");
  testing::expect_config_error_naming(
      [&] {
        run(experiment_yaml("pipeline", "    - impl: naive\n    - impl: percache\n      label: no_qa_bank\n"
                                        "      qa_bank: false\n      tau_query: 0.9\n"),
            dir.file("x.h5"));
      },
      {"no_qa_bank", "tau_query"});
}

TEST(RagQaOnPipelineErrors, AnUnknownServeOnIsAConfigError) {
  testing::TempDir dir("rag-qa-pipeline-err");
  testing::expect_config_error_naming([&] { run(experiment_yaml("pipelines", "    - impl: naive\n"), dir.file("x.h5")); },
                                      {"serve_on", "pipelines", "loop", "pipeline"});
}

}  // namespace
}  // namespace rag_qa_on_pipeline_tests
}  // namespace mobisim
