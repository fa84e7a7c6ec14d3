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
  ASSERT_EQ(yaml.size(), 1u);
  EXPECT_EQ(cpp[0], testing::read_bytes(root + "/policies/pipeline/system_prompt_reuse.h"));
  EXPECT_EQ(cpp[1], testing::read_bytes(root + "/policies/pipeline/system_prompt_reuse.cpp"));
  EXPECT_EQ(yaml[0], testing::read_bytes(root + "/experiments/compose/example_system_prompt.yaml"));
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
