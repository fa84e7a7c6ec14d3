// docs/extending.md walks through adding a stage implementation. This test keeps it honest: every
// code block of the page is the code in the tree, word for word, and the worked example builds
// (it is part of this binary), runs from its YAML, and does what the page says.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "sim/h5.h"
#include "test_util.h"

namespace mobisim {
namespace {

std::vector<std::string> code_blocks(const std::string& markdown, const std::string& language) {
  std::vector<std::string> out;
  std::string open("```");  // built by append: g++ 12 warns falsely on "```" + language
  open.append(language).append("\n");
  for (std::size_t at = markdown.find(open); at != std::string::npos; at = markdown.find(open, at)) {
    const std::size_t begin = at + open.size();
    const std::size_t end = markdown.find("```", begin);
    if (end == std::string::npos) break;
    out.push_back(markdown.substr(begin, end - begin));
    at = end + 3;
  }
  return out;
}

TEST(Extending, EveryCodeBlockOfThePageIsTheCodeInTheTree) {
  const std::string root = testing::source_dir();
  const std::string page = testing::read_bytes(root + "/docs/extending.md");
  const std::vector<std::string> cpp = code_blocks(page, "cpp"), yaml = code_blocks(page, "yaml");
  ASSERT_EQ(cpp.size(), 2u);
  ASSERT_EQ(yaml.size(), 2u);
  EXPECT_EQ(cpp[0], testing::read_bytes(root + "/policies/pipeline/system_prompt_reuse.h"));
  EXPECT_EQ(cpp[1], testing::read_bytes(root + "/policies/pipeline/system_prompt_reuse.cpp"));
  EXPECT_EQ(yaml[0], testing::read_bytes(root + "/experiments/compose/example_system_prompt.yaml"));
  EXPECT_EQ(yaml[1], testing::read_bytes(root + "/docs/examples/pixel7-ufs4.yaml"));
}

// The device example: the same phone with faster flash loads stored K/V faster and computes
// exactly as fast (prefill and decode do not touch the flash).
TEST(Extending, TheDeviceExampleLoadsFasterAndComputesTheSame) {
  testing::TempDir dir("extending_device");
  const std::string root = testing::source_dir();
  auto run = [&](const std::string& extra, const std::string& out) {
    const auto r = testing::run_mobisim(fmt::format("run {}/experiments/quickstart.yaml --no-plot --quiet --output {} {}",
                                                    root, out, extra));
    EXPECT_EQ(r.exit_code, 0) << r.output;
  };
  run("", dir.file("pixel7.h5"));
  run(fmt::format("-p experiment.device={}/docs/examples/pixel7-ufs4.yaml", root), dir.file("ufs4.h5"));
  const h5::Reader base(dir.file("pixel7.h5")), ufs4(dir.file("ufs4.h5"));
  const auto base_load = base.doubles("/runs/ragcache/records/load_s"), ufs4_load = ufs4.doubles("/runs/ragcache/records/load_s");
  const auto base_prefill = base.doubles("/runs/ragcache/records/prefill_s");
  const auto ufs4_prefill = ufs4.doubles("/runs/ragcache/records/prefill_s");
  ASSERT_EQ(base_load.size(), ufs4_load.size());
  double loaded = 0, faster = 0;
  for (std::size_t i = 0; i < base_load.size(); ++i) {
    EXPECT_LE(ufs4_load[i], base_load[i]) << "query " << i;
    EXPECT_EQ(ufs4_prefill[i], base_prefill[i]) << "query " << i;
    loaded += base_load[i];
    faster += base_load[i] - ufs4_load[i];
  }
  EXPECT_GT(loaded, 0.0);  // RAGCache loads stored chunk K/V on this workload
  EXPECT_GT(faster, 0.0);
}

TEST(Extending, TheWorkedExampleRunsAndReusesTheSystemPrompt) {
  testing::TempDir dir("extending");
  const std::string out = dir.file("example.h5");
  const auto r = testing::run_mobisim(fmt::format("run {}/experiments/compose/example_system_prompt.yaml --no-plot "
                                                  "--quiet --output {}",
                                                  testing::source_dir(), out));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The per-request table of the system_prompt app: nothing reused by the first request, the
  // 64 system-prompt tokens by every later one; the no_reuse app reuses nothing.
  const h5::Reader result(out);
  const auto reused = result.ints("/runs/alone.system_prompt/records/reused_tokens");
  ASSERT_EQ(reused.size(), 10u);
  EXPECT_EQ(reused[0], 0);
  for (std::size_t i = 1; i < reused.size(); ++i) EXPECT_EQ(reused[i], 64) << "request " << i;
  for (auto n : result.ints("/runs/alone.no_reuse/records/reused_tokens")) EXPECT_EQ(n, 0);
}

}  // namespace
}  // namespace mobisim
