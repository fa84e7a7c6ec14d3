#pragma once
// Helpers shared by the test files: temporary directories, the shared data
// folder (../shared, may be absent), and running the `mobisim` binary.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "models/model_spec.h"
#include "sim/error.h"

namespace mobisim::testing {

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "mobisim") {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            (tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ../shared (real data and models): $MOBISIM_SHARED_DIR, else <source>/../shared; "" when absent.
inline std::string shared_dir() {
  if (const char* env = std::getenv("MOBISIM_SHARED_DIR"); env && std::filesystem::is_directory(env)) return env;
#ifdef MOBISIM_SOURCE_DIR
  std::string guess = std::string(MOBISIM_SOURCE_DIR) + "/../shared";
  if (std::filesystem::exists(guess)) return guess;
#endif
  return "";
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs the mobisim binary with `args` (a shell-quoted string) in `workdir` ("" = the current
// directory) and captures its output.
inline CommandResult run_mobisim_in(const std::string& workdir, const std::string& args) {
  CommandResult r;
#ifdef MOBISIM_BINARY
  // Built by append: g++ 12 reports a false -Wrestrict on some inlinings of chained operator+.
  std::string cmd;
  if (!workdir.empty()) cmd.append("cd '").append(workdir).append("' && ");
  cmd.append("MOBISIM_HOME='").append(MOBISIM_SOURCE_DIR).append("' '").append(MOBISIM_BINARY).append("' ");
  cmd.append(args).append(" 2>&1");
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
#else
  (void)workdir;
  (void)args;
#endif
  return r;
}

inline CommandResult run_mobisim(const std::string& args) { return run_mobisim_in("", args); }

// `mobisim run CONFIG` at one and at two worker threads: both must succeed and write the same bytes.
// Returns "" when they do, else what went wrong (the test's failure message).
inline std::string same_bytes_at_one_and_two_threads(const std::string& config, const std::string& out1,
                                                     const std::string& out2) {
  const auto a = run_mobisim(std::string("run ").append(config).append(" --no-plot --quiet --output ").append(out1));
  if (a.exit_code != 0) return std::string("--threads 1: ").append(a.output);
  const auto b = run_mobisim(
      std::string("run ").append(config).append(" --threads 2 --no-plot --quiet --output ").append(out2));
  if (b.exit_code != 0) return std::string("--threads 2: ").append(b.output);
  if (read_bytes(out1) != read_bytes(out2)) return std::string(out1).append(" and ").append(out2).append(" differ");
  return "";
}

// Tests that run the whole binary many times (every thread count, every sweep point) take minutes
// under ASan on 2 cores; the sanitizer CI job runs those paths once each in scripts/e2e.sh.
inline bool sanitized_build() {
#ifdef MOBISIM_SANITIZED
  return true;
#else
  return false;
#endif
}
#define MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS()                                                          \
  do {                                                                                                 \
    if (::mobisim::testing::sanitized_build())                                                         \
      GTEST_SKIP() << "repeated whole-binary runs: covered by the Release build and scripts/e2e.sh"; \
  } while (0)

inline std::string source_dir() {
#ifdef MOBISIM_SOURCE_DIR
  return MOBISIM_SOURCE_DIR;
#else
  return ".";
#endif
}

// `f` throws a ConfigError whose message holds every one of `words`.
inline void expect_config_error_naming(const std::function<void()>& f, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    for (const auto& w : words) EXPECT_NE(m.find(w), std::string::npos) << "'" << w << "' not in: " << m;
  }
}

// A 4-layer transformer of width 64 (4 heads of 16, no GQA), FFN 128, vocabulary 100: small enough
// that its byte and FLOP counts are worked out by hand in the tests that use it.
inline models::ModelSpec tiny_transformer_spec() {
  models::ModelSpec m;
  m.name = "tiny";
  m.n_layers = 4;
  m.hidden = 64;
  m.n_heads = 4;
  m.n_kv_heads = 4;
  m.head_dim = 16;
  m.ffn_hidden = 128;
  m.vocab = 100;
  return m;
}

}  // namespace mobisim::testing
