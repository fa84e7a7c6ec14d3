// CAG request files (traces/cag_requests.h): JSONL and HDF5 round trips, validation errors that
// name the file, line and request (predictions whose rows do not match the prompt length, ...),
// files made by the real kernel (stories260K, when present) whose stored top-n replays
// calibration exactly as the live kernel does, the `coordgen` driver replaying them, and the
// min_match knob of retrieval drafting on hand-made sequences.
#include <gtest/gtest.h>

#include <filesystem>
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "experiments/workload_inputs.h"
#include "models/kernel/checkpoint.h"
#include "policies/specdec/kernel_requests.h"
#include "policies/specdec/retrieval_drafter.h"
#include "sim/error.h"
#include "test_util.h"
#include "traces/cag_requests.h"

namespace mobisim::traces {
namespace {

CagRequestFile small_file(bool predictions) {
  CagRequestFile f;
  f.source = "test \"quoted\"";
  f.vocab = 50;
  CagRequestRecord a;
  a.user_id = "u0";
  a.task = "ui";
  a.context = {1, 5, 6, 7};
  a.instruction = {9};
  a.output = {5, 6, 7, 8};
  if (predictions)
    for (int p = 0; p < 5; ++p) {
      a.top_ids.push_back({p + 2, p + 3});
      a.top_probs.push_back({0.625f, 0.1f + 0.01f * static_cast<float>(p)});
    }
  CagRequestRecord b = a;
  b.task = "tweet";
  b.output = {3};
  b.top_ids.clear();
  b.top_probs.clear();
  f.requests = {a, b};
  return f;
}

void expect_same(const CagRequestFile& x, const CagRequestFile& y) {
  EXPECT_EQ(x.source, y.source);
  EXPECT_EQ(x.vocab, y.vocab);
  ASSERT_EQ(x.requests.size(), y.requests.size());
  for (std::size_t i = 0; i < x.requests.size(); ++i) {
    const auto &a = x.requests[i], &b = y.requests[i];
    EXPECT_EQ(a.user_id, b.user_id);
    EXPECT_EQ(a.task, b.task);
    EXPECT_EQ(a.context, b.context);
    EXPECT_EQ(a.instruction, b.instruction);
    EXPECT_EQ(a.output, b.output);
    EXPECT_EQ(a.top_ids, b.top_ids);
    EXPECT_EQ(a.top_probs, b.top_probs);  // bit-exact: floats are written in shortest round-trip form
  }
}

std::string error_of(const std::string& text) {
  try {
    read_cag_requests_jsonl_text(text, "req.jsonl");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CagRequests, JsonlAndHdf5RoundTripExactly) {
  mobisim::testing::TempDir dir("cag");
  for (bool pred : {false, true}) {
    const CagRequestFile f = small_file(pred);
    for (const char* ext : {".jsonl", ".h5"}) {
      const std::string path = dir.file(std::string("r") + (pred ? "p" : "") + ext);
      write_cag_requests(path, f);
      expect_same(f, read_cag_requests(path));
    }
  }
  EXPECT_THROW(write_cag_requests(dir.file("r.txt"), small_file(true)), InputError);
}

TEST(CagRequests, PredictionsNotMatchingThePromptLengthNameFileLineAndRequest) {
  // Request 1 (line 3) has 4 prediction rows for a prompt of 3 + 2 = 5 positions.
  const std::string text =
      "{\"format\": \"mobisim-cag-requests\", \"schema_version\": 1, \"vocab\": 50}\n"
      "{\"user\": \"a\", \"context\": [1, 2], \"output\": [3]}\n"
      "{\"user\": \"bob\", \"context\": [1, 2, 3], \"instruction\": [4, 5], \"output\": [6],"
      " \"top_ids\": [[1], [2], [3], [4]], \"top_probs\": [[0.5], [0.5], [0.5], [0.5]]}\n";
  const std::string e = error_of(text);
  EXPECT_NE(e.find("req.jsonl:3: request 1 (user 'bob')"), std::string::npos) << e;
  EXPECT_NE(e.find("4 rows but the prompt has 5 positions (context 3 + instruction 2)"), std::string::npos) << e;
}

TEST(CagRequests, OtherBadInputIsRefusedClearly) {
  const std::string ok = "{\"user\": \"a\", \"context\": [1, 2], \"output\": [3]";
  EXPECT_NE(error_of(ok + ", \"colour\": 1}\n").find("unknown request key 'colour'"), std::string::npos);
  EXPECT_NE(error_of("{\"user\": \"a\", \"context\": [1]}\n").find("needs \"output\""), std::string::npos);
  EXPECT_NE(error_of(ok + ", \"top_ids\": [[1, 2], [1, 2]], \"top_probs\": [[0.1, 0.5], [0.5, 0.1]]}\n")
                .find("non-increasing"),
            std::string::npos);
  EXPECT_NE(error_of(ok + ", \"top_ids\": [[1], [1]]}\n").find("top_ids has 2 rows but top_probs 0"), std::string::npos);
  EXPECT_NE(error_of("{\"format\": \"mobisim-cag-requests\", \"vocab\": 3}\n" + ok + "}\n").find("outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of("{\"user\": \"a\", \"context\": [1.5], \"output\": [3]}\n").find("integer token ids"),
            std::string::npos);
  EXPECT_NE(error_of("\n\n").find("no requests"), std::string::npos);
  EXPECT_NE(error_of(ok + "}\n{\"format\": \"mobisim-cag-requests\"}\n").find("must be the first line"),
            std::string::npos);
  EXPECT_THROW(read_cag_requests("/nonexistent/r.jsonl"), InputError);
}

}  // namespace
}  // namespace mobisim::traces

namespace mobisim::policies::specdec {
namespace {

// min_match: a suffix match shorter than the threshold drafts nothing (the step verifies the
// pending token alone); a long enough one drafts what followed it. Context: 1 2 3 4 5 ... 9 2 3,
// pending 3: the longest earlier suffix is "2 3" (length 2), followed by 4 5.
TEST(CagRequests, MinMatchSuppressesWeakRetrievalDrafts) {
  const std::vector<int> ctx = {1, 2, 3, 4, 5, 6, 7, 8, 9, 2, 3};
  for (auto r : {Retriever::kPld, Retriever::kSam}) {
    DrafterOptions o;
    o.retriever = r;
    o.budget = 2;
    o.min_match = 2;
    CoordGenDrafter loose(o, nullptr);
    EXPECT_EQ(loose.propose(ctx, 2).tokens, (std::vector<int>{4, 5})) << static_cast<int>(r);
    o.min_match = 3;
    CoordGenDrafter strict(o, nullptr);
    EXPECT_EQ(strict.propose(ctx, 2).size(), 0) << static_cast<int>(r);
  }
  DrafterOptions bad;
  bad.min_match = 0;
  EXPECT_THROW(CoordGenDrafter(bad, nullptr), ConfigError);
}

// A file made by the real kernel: the stored top-1 after the last prompt position is the first
// output token (greedy), and replaying a request with its stored predictions drafts and accepts
// exactly what the live kernel's calibrated speculative decoding does.
TEST(CagRequests, KernelFileReplaysCalibrationExactly) {
  const std::string path = mobisim::testing::shared_dir() + "/models/stories260K.bin";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "real data not present: " << path;
  const kernel::Model m = kernel::load_model(path);
  KernelRequestOptions o;
  o.task = "summary";
  o.users = 1;
  o.requests = 2;
  o.context_tokens = 80;
  o.output_tokens = 40;
  o.top_n = 3;
  const traces::CagRequestFile f = make_kernel_requests(m, o, "test");
  ASSERT_EQ(f.requests.size(), 2u);
  int compared_steps = 0;
  for (const auto& q : f.requests) {
    ASSERT_EQ(q.top_ids.size(), q.prompt_size());
    EXPECT_EQ(q.top_ids.back()[0], q.output[0]);
    std::vector<int> prompt = q.context;
    prompt.insert(prompt.end(), q.instruction.begin(), q.instruction.end());
    DrafterOptions d;
    d.retriever = Retriever::kSam;
    d.calibrate = true;
    d.calibration.top_n = 3;
    d.budget = 15;
    CoordGenDrafter live(d, nullptr), replayed(d, nullptr);
    const DecodeTrace a = speculative_decode(m, prompt, static_cast<int>(q.output.size()), live);
    PrefillPredictions pred;
    pred.next = q.top_ids;
    const DecodeTrace b = replay_decode(prompt, q.output, replayed, &pred);
    ASSERT_EQ(a.tokens, b.tokens);
    ASSERT_EQ(a.steps.size(), b.steps.size());
    for (std::size_t i = 0; i < a.steps.size(); ++i) {
      EXPECT_EQ(a.steps[i].draft_tokens, b.steps[i].draft_tokens) << i;
      EXPECT_EQ(a.steps[i].accepted, b.steps[i].accepted) << i;
    }
    compared_steps += static_cast<int>(a.steps.size());
  }
  EXPECT_GT(compared_steps, 0);
}

// The driver end to end: cag-generate writes a file, `workload.requests` replays it (CoordGen
// calibrates from the stored predictions without allow_missing_predictions); a file whose
// predictions do not match its prompts stops the run with an error naming it.
TEST(CagRequests, DriverReplaysGeneratedFilesAndRefusesBadOnes) {
  const std::string model = mobisim::testing::shared_dir() + "/models/stories260K.bin";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "real data not present: " << model;
  mobisim::testing::TempDir dir("cag-driver");
  const std::string req = dir.file("ui.h5");
  auto r = mobisim::testing::run_mobisim("trace cag-generate --model '" + model +
                                         "' --task ui --users 2 --requests 2 --out '" + req + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string cfg = dir.file("c.yaml");
  auto write_cfg = [&](const std::string& file) {
    std::ofstream(cfg) << "name: c\nexperiment:\n  impl: coordgen\n  device: oneplus-13\n  model: qwen2.5-0.5b\n"
                       << "  workload: {requests: " << file << "}\n"
                       << "  policies:\n    - {impl: npu_vanilla}\n    - {impl: coordgen}\n";
  };
  write_cfg(req);
  r = mobisim::testing::run_mobisim("run '" + cfg + "' --no-plot --output '" + dir.file("c.h5") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("coordgen"), std::string::npos) << r.output;
  const std::string bad = dir.file("bad.jsonl");
  std::ofstream(bad) << "{\"user\": \"u\", \"context\": [1, 2, 3], \"output\": [4],"
                        " \"top_ids\": [[2], [3]], \"top_probs\": [[0.9], [0.9]]}\n";
  write_cfg(bad);
  r = mobisim::testing::run_mobisim("run '" + cfg + "' --no-plot --output '" + dir.file("b.h5") + "'");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:1: request 0 (user 'u')"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the prompt has 3 positions"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mobisim::policies::specdec

namespace mobisim::policies::specdec {
namespace {

// The example files `reproduce coordgen` makes from the shared checkpoint are exactly what the
// generator makes with the documented options (kExampleRequests, cag_requests_ui.yaml).
// Under ASan + UBSan ensure_example_requests still makes all three files (every task's branch of
// make_kernel_requests runs there), but only the first is made again and compared: a second run of
// the same deterministic code on the same input finds no memory error the first did not, and it
// cost ~2/3 of the test's 19 CPU s there. The Release build compares all three.
TEST(CagRequests, ExampleFilesAreTheGeneratorsOutput) {
  const std::string path = mobisim::testing::shared_dir() + "/models/stories260K.bin";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "real data not present: " << path;
  mobisim::testing::TempDir dir("cag-examples");
  experiments::ensure_example_requests(dir.path().string(), mobisim::testing::shared_dir());
  const kernel::Model m = kernel::load_model(path);
  const std::size_t compared = mobisim::testing::sanitized_build() ? 1 : std::size(experiments::kExampleRequests);
  for (std::size_t i = 0; i < std::size(experiments::kExampleRequests); ++i) {
    const auto& e = experiments::kExampleRequests[i];
    const std::string file = dir.file(std::string(e.task) + "_stories260K.jsonl");
    ASSERT_TRUE(std::filesystem::exists(file)) << file;
    if (i >= compared) continue;
    KernelRequestOptions o;
    o.task = e.task;
    o.users = experiments::kExampleRequestUsers;
    o.requests = experiments::kExampleRequestsPerUser;
    o.context_tokens = e.context_tokens;
    o.output_tokens = e.output_tokens;
    const auto made = make_kernel_requests(m, o, fmt::format("kernel:stories260K.bin greedy, task {}", e.task));
    std::ifstream in(file);
    ASSERT_TRUE(in) << file;
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(ss.str(), traces::cag_requests_to_jsonl(made)) << file;
  }
}

}  // namespace
}  // namespace mobisim::policies::specdec

namespace mobisim::policies::specdec {
namespace {

// A task filter naming no example task is an error naming it, before any file is made.
TEST(CagRequests, ExampleRequestsRefuseAnUnknownTask) {
  mobisim::testing::TempDir dir("cag-unknown-task");
  try {
    experiments::ensure_example_requests(dir.path().string(), mobisim::testing::shared_dir(), {"tweet", "tweets"});
    ADD_FAILURE() << "an unknown task was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "no example request task 'tweets' (the tasks: ui, tweet, summary)");
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("tweet_stories260K.jsonl")));
}

// The request-file workload is deterministic at any thread count, byte for byte.
TEST(CagRequests, ReplayIsIdenticalAtAnyThreadCount) {
  const std::string src = mobisim::testing::source_dir();
  if (!std::filesystem::exists(mobisim::testing::shared_dir() + "/models/stories260K.bin"))
    GTEST_SKIP() << "real data not present: " << mobisim::testing::shared_dir() << "/models/stories260K.bin";
  mobisim::testing::TempDir dir("cag-threads");
  // Only the file replayed here: the other two cost a transformer run each (~2/3 of the three).
  experiments::ensure_example_requests(dir.path().string(), mobisim::testing::shared_dir(), {"tweet"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("ui_stories260K.jsonl")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("summary_stories260K.jsonl")));
  std::string first;
  for (int threads : {1, 2, 5}) {
    const std::string out = dir.file("t" + std::to_string(threads) + ".h5");
    auto r = mobisim::testing::run_mobisim("run '" + src + "/experiments/coordgen/cag_requests_ui.yaml' -p experiment.workload.requests=" +
                                           dir.file("tweet_stories260K.jsonl") + " --no-plot --quiet --threads " +
                                           std::to_string(threads) + " --output '" + out + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string bytes = mobisim::testing::read_bytes(out);
    ASSERT_FALSE(bytes.empty());
    if (first.empty())
      first = bytes;
    else
      EXPECT_TRUE(bytes == first) << "threads " << threads << " differs from threads 1";
  }
}

}  // namespace
}  // namespace mobisim::policies::specdec
