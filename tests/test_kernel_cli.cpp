// `mobisim kernel generate|check|trace` end to end through the real binary.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "sim/h5.h"
#include "test_kernel_util.h"

namespace mobisim::kernel {
namespace {

struct CliRun {
  int rc = -1;
  std::string out;
};

CliRun run(const std::string& args) {
  CliRun r;
  const std::string cmd = std::string(MOBISIM_BINARY) + " kernel " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Under ASan + UBSan the CLI's check runs oracle 8 at 64 tokens instead of 160 and without the
// tokenizer (oracle 5 is then the SKIP row): the oracles' code is run in process under the
// sanitizers by KernelOracles.SyntheticAllOraclesPass (oracle 5 with the same tokenizer and QMSum
// files, oracle 8 at 200 tokens), so what only this test adds there is the CLI around them; the
// ASan run went from ~20 to ~12 CPU s (`mobisim kernel check` alone). The Release build runs it whole.
std::string check_cost_options() {
  return mobisim::testing::sanitized_build() ? " --long-tokens 64 --tokenizer /nonexistent" : " --long-tokens 160";
}

TEST(KernelCli, CheckSyntheticPassesEveryMustPassRow) {
  const CliRun r = run("check --synthetic" + check_cost_options());
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("all must-pass oracles passed"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAIL "), std::string::npos) << r.out;
  for (const char* id : {"\n2 ", "\n3 ", "\n3-neg ", "\n4 ", "\n6 ", "\n7/suffix-automaton", "\n8 "})
    EXPECT_NE(r.out.find(id), std::string::npos) << id;
}

TEST(KernelCli, CheckFailsWhenExpectedIdsDisagree) {
  const CliRun r = run("check --synthetic --long-tokens 64 --expected-ids \"1 2 3\"");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos);
}

TEST(KernelCli, GenerateStoriesPrintsReadmeIds) {
  MOBISIM_REQUIRE_FILE(testing::stories_path());
  const CliRun r = run("generate --model " + testing::stories_path() + " --steps 12");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("generated ids: 461 461 401 401 401 461 378 455 473 456 435 299\n"), std::string::npos)
      << r.out;
}

TEST(KernelCli, BadInputsGiveDocumentedExitCodes) {
  EXPECT_EQ(run("generate --model /nonexistent.bin").rc, 4);
  EXPECT_EQ(run("generate --synthetic --prompt-ids \"1 9999\"").rc, 4);
  EXPECT_EQ(run("generate").rc, 2);
  EXPECT_EQ(run("frobnicate").rc, 2);
  EXPECT_EQ(run("check --help").rc, 0);
}

TEST(KernelCli, TraceWritesDocumentedLayout) {
  testing::TempFile f(".h5");
  const CliRun r = run("trace --synthetic --tokens 40 --out " + f.path);
  ASSERT_EQ(r.rc, 0) << r.out;
  h5::Reader rd(f.path);
  EXPECT_EQ(rd.attr_string("/", "format"), "mobisim-kernel-trace");
  EXPECT_EQ(rd.ints("/tokens").size(), 40u);
  std::size_t rows = 0, cols = 0;
  rd.matrix("/layers/4/k", rows, cols);
  EXPECT_EQ(rows, 40u);
  EXPECT_EQ(cols, 32u);
  const auto ent = rd.doubles("/layers/0/attention/entropy", 40u * 8u);
  EXPECT_DOUBLE_EQ(ent[0], 0.0);  // position 0 attends only itself
  const auto topk = rd.doubles("/layers/2/attention/topk_mass");
  for (double m : topk) EXPECT_LE(m, 1.0 + 1e-6);
}

}  // namespace
}  // namespace mobisim::kernel
