#pragma once
// Helpers shared by the kernel tests: where ../shared is, temporary files, and
// the synthetic models the tests write themselves (fixed seeds).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_util.h"
#include "models/kernel/checkpoint.h"
#include "models/kernel/transformer.h"

namespace mobisim::kernel::testing {

using mobisim::testing::shared_dir;  // "" when absent: the paths below then do not exist and tests skip
inline std::string stories_path() { return shared_dir() + "/models/stories260K.bin"; }
inline std::string tokenizer_path() { return shared_dir() + "/models/llama2-tokenizer.model"; }
inline std::string qmsum_dir() { return shared_dir() + "/data/qmsum/val"; }

#define MOBISIM_REQUIRE_FILE(path)                                                                  \
  do {                                                                                              \
    if (!std::filesystem::exists(path))                                                             \
      GTEST_SKIP() << "real data not present: " << (path)                                           \
                   << " (set MOBISIM_SHARED_DIR to the directory holding models/ and data/)";       \
  } while (0)

// A temporary file path unique to this test and process, removed on destruction.
struct TempFile {
  explicit TempFile(const std::string& suffix) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = (std::filesystem::temp_directory_path() /
            (std::string("mobisim_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(::getpid()) + suffix))
               .string();
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::string path;
};

// stories260K's dimensions, random weights (seed 7).
inline Model tiny_llama(std::uint64_t seed = 7) { return make_synthetic(tiny_config(), seed); }

// A Qwen2-style model: half-split RoPE, theta 1e6, Q/K/V biases, separate classifier, GQA 6/2.
inline Config qwen_config() {
  Config c;
  c.arch = "qwen2";
  c.dim = 48;
  c.hidden_dim = 96;
  c.n_layers = 3;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 300;
  c.seq_len = 256;
  c.rope = RopeLayout::kHalfSplit;
  c.rope_theta = 1000000.0f;
  c.qkv_bias = true;
  c.tied_classifier = false;
  return c;
}
inline Model tiny_qwen(std::uint64_t seed = 11) { return make_synthetic(qwen_config(), seed); }

}  // namespace mobisim::kernel::testing
