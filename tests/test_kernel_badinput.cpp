// Malformed model files and out-of-range token ids give an InputError naming
// the problem, never an out-of-bounds read (these tests also run under ASan).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "models/kernel/checkpoint.h"
#include "models/kernel/transformer.h"
#include "sim/error.h"
#include "test_kernel_util.h"

namespace mobisim::kernel {
namespace {

using testing::TempFile;

std::vector<char> slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}
void dump(const std::string& p, const std::vector<char>& b) {
  std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
}

template <class F>
std::string input_error_message(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected InputError";
  return "";
}

Model small_llama() {
  Config c = tiny_config();
  c.n_layers = 2;
  c.seq_len = 64;
  return make_synthetic(c, 1);
}

TEST(KernelBadInput, TruncatedLlama2cCheckpoint) {
  TempFile f(".bin");
  write_llama2c(f.path, small_llama());
  auto bytes = slurp(f.path);
  for (std::size_t keep : {std::size_t{0}, std::size_t{10}, std::size_t{28}, bytes.size() / 2, bytes.size() - 1}) {
    dump(f.path, std::vector<char>(bytes.begin(), bytes.begin() + keep));
    const std::string msg = input_error_message([&] { load_llama2c(f.path); });
    EXPECT_NE(msg.find(f.path), std::string::npos) << msg;
  }
}

TEST(KernelBadInput, HeaderSizesDisagreeWithFileLength) {
  TempFile f(".bin");
  write_llama2c(f.path, small_llama());
  auto bytes = slurp(f.path);
  auto patch = [&](int field, std::int32_t v) {
    auto b = bytes;
    std::memcpy(b.data() + 4 * field, &v, 4);
    dump(f.path, b);
    return input_error_message([&] { load_llama2c(f.path); });
  };
  EXPECT_NE(patch(2, 3).find("needs exactly"), std::string::npos);        // one more layer than stored
  EXPECT_NE(patch(0, 1 << 20).find("dim"), std::string::npos);            // absurd width
  EXPECT_NE(patch(6, 100000).find("needs exactly"), std::string::npos);   // rope tables larger than the file
  EXPECT_NE(patch(4, 3).find("n_kv_heads"), std::string::npos);           // does not divide n_heads
  EXPECT_NE(patch(5, std::numeric_limits<std::int32_t>::min()).find("vocab"), std::string::npos);
  EXPECT_NE(patch(1, -5).find("hidden_dim"), std::string::npos);
  // Extra bytes are a disagreement too.
  auto longer = bytes;
  longer.push_back(0);
  dump(f.path, longer);
  EXPECT_NE(input_error_message([&] { load_llama2c(f.path); }).find("needs exactly"), std::string::npos);
}

TEST(KernelBadInput, MissingFile) {
  EXPECT_THROW(load_model("/nonexistent/model.bin"), InputError);
}

TEST(KernelBadInput, GgufUnsupportedTensorType) {
  TempFile f(".gguf");
  GgufWriter g;
  g.add_string("general.architecture", "llama");
  g.add_tensor("token_embd.weight", {32, 16}, 2 /* Q4_0 */, std::vector<std::uint8_t>(32 * 16 / 2, 0));
  g.write(f.path);
  const std::string msg = input_error_message([&] { load_gguf(f.path); });
  EXPECT_NE(msg.find("Q4_0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("token_embd.weight"), std::string::npos) << msg;
}

TEST(KernelBadInput, GgufUnsupportedArchitecture) {
  TempFile f(".gguf");
  write_gguf(f.path, small_llama());
  auto bytes = slurp(f.path);
  // Rewrite the architecture value "llama" (its first occurrence) as "gemma" (same length).
  const std::string needle = "llama";
  auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  ASSERT_NE(it, bytes.end());
  std::memcpy(&*it, "gemma", 5);
  dump(f.path, bytes);
  const std::string msg = input_error_message([&] { load_gguf(f.path); });
  EXPECT_NE(msg.find("gemma"), std::string::npos) << msg;
}

TEST(KernelBadInput, GgufTruncatedEverywhere) {
  TempFile f(".gguf");
  write_gguf(f.path, small_llama(), GgufType::kF16);
  const auto bytes = slurp(f.path);
  ASSERT_NO_THROW(load_gguf(f.path));
  // Every prefix of the header region and a few of the data region must fail cleanly.
  for (std::size_t keep = 0; keep < bytes.size(); keep += keep < 2048 ? 7 : bytes.size() / 13) {
    dump(f.path, std::vector<char>(bytes.begin(), bytes.begin() + keep));
    EXPECT_THROW(load_gguf(f.path), InputError) << "kept " << keep;
  }
}

TEST(KernelBadInput, GgufLyingCountsAndShapes) {
  TempFile f(".gguf");
  {
    GgufWriter g;
    g.add_string("general.architecture", "llama");
    auto b = g.bytes();
    const std::uint64_t huge = 1ULL << 60;
    std::memcpy(b.data() + 8, &huge, 8);  // tensor count
    dump(f.path, std::vector<char>(b.begin(), b.end()));
    EXPECT_THROW(load_gguf(f.path), InputError);
  }
  {
    // A tensor whose stated extent runs past the end of the file.
    GgufWriter g;
    g.add_string("general.architecture", "llama");
    g.add_tensor("token_embd.weight", {1u << 20, 1u << 10}, 0, std::vector<std::uint8_t>(64, 0));
    g.write(f.path);
    EXPECT_THROW(load_gguf(f.path), InputError);
  }
  {
    // A well-formed file whose tensors disagree with the metadata dimensions.
    const Model m = small_llama();
    write_gguf(f.path, m);
    auto bytes = slurp(f.path);
    const std::string key = "llama.embedding_length";
    auto it = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
    ASSERT_NE(it, bytes.end());
    const std::uint32_t wrong = 80;
    std::memcpy(&*(it + key.size() + 4), &wrong, 4);  // after the u32 type tag
    dump(f.path, bytes);
    const std::string msg = input_error_message([&] { load_gguf(f.path); });
    EXPECT_NE(msg.find("shape"), std::string::npos) << msg;
  }
}

TEST(KernelBadInput, TokenIdOutOfRange) {
  const Model m = small_llama();
  KVCache c(m.config);
  RunState st;
  for (int bad : {-1, m.config.vocab_size, 1 << 30}) {
    const std::vector<int> t = {1, bad};
    const std::string msg = input_error_message([&] { forward(m, c, st, t); });
    EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
    EXPECT_EQ(c.length, 0) << "a rejected call leaves the cache untouched";
  }
  EXPECT_THROW(forward_token(m, c, st, m.config.vocab_size), InputError);
}

TEST(KernelBadInput, SequenceLongerThanContext) {
  const Model m = small_llama();
  KVCache c(m.config);
  RunState st;
  std::vector<int> t(m.config.seq_len + 1, 1);
  EXPECT_THROW(forward(m, c, st, t), InputError);
}

}  // namespace
}  // namespace mobisim::kernel
