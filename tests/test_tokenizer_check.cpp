// SentencePiece model files: the structural check of the normalizer's precompiled character map
// (models/sentencepiece_check.h) on a tiny model trained here, and the libFuzzer finding it closes.
#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <cctype>
#include <fstream>
#include <string>

#include "models/sentencepiece_check.h"
#include "models/tokenizer.h"
#include "sim/error.h"
#include "test_util.h"

namespace mobisim {
namespace {

using testing::TempDir;

// A 60-piece BPE model with the default nmt_nfkc normalizer (its map is SentencePiece's built-in table).
std::string train_tiny_model(const TempDir& dir) {
  const std::string text = dir.file("corpus.txt");
  {
    std::ofstream out(text);
    const char* words[] = {"cache", "prefix", "token", "phone", "energy", "latency", "query", "chunk"};
    for (int i = 0; i < 400; ++i) out << words[i % 8] << ' ' << words[(i * 5 + 3) % 8] << " of the " << i << "\n";
  }
  const auto st = sentencepiece::SentencePieceTrainer::Train("--input=" + text + " --model_prefix=" + dir.file("sp") +
                                                             " --vocab_size=60 --model_type=bpe --minloglevel=2");
  EXPECT_TRUE(st.ok()) << st.ToString();
  return testing::read_bytes(dir.file("sp.model"));
}

// Where the precompiled map starts in the file: right after normalizer_spec's name "nmt_nfkc" comes
// field 2 (tag 0x12) and its varint length.
std::size_t charsmap_start(const std::string& model, std::size_t* length) {
  const std::size_t name = model.find("nmt_nfkc");
  EXPECT_NE(name, std::string::npos);
  std::size_t i = name + 8;
  EXPECT_EQ(static_cast<unsigned char>(model[i]), 0x12);
  std::size_t n = 0;
  for (int shift = 0;; shift += 7) {
    const auto c = static_cast<unsigned char>(model[++i]);
    n |= static_cast<std::size_t>(c & 0x7f) << shift;
    if (c < 0x80) break;
  }
  *length = n;
  return i + 1;
}

TEST(TokenizerCheck, TrainedModelPassesAndEncodes) {
  TempDir dir("tok-check");
  const std::string model = train_tiny_model(dir);
  EXPECT_NO_THROW(models::check_sentencepiece_model(model, "tiny.model"));
  const auto tok = models::load_sentencepiece(dir.file("sp.model"));
  const auto ids = tok->encode("the phone caches a prefix");
  EXPECT_FALSE(ids.empty());
  EXPECT_EQ(tok->vocab_size(), 60);
}

// tests/fuzz/fuzz_tokenizer.cpp found that three changed bytes of the map (two in the trie's unit 78,
// one further on) make libsentencepiece's Encode() read outside the map and crash. The same bytes
// changed in a freshly trained model must now be a clear InputError from load_sentencepiece.
TEST(TokenizerCheck, FuzzerFindingIsAnInputErrorNotACrash) {
  TempDir dir("tok-check");
  std::string model = train_tiny_model(dir);
  std::size_t length = 0;
  const std::size_t start = charsmap_start(model, &length);
  ASSERT_GT(length, 124879u);
  model[start + 318] = '\xff';
  model[start + 319] = '\x3b';
  model[start + 124878] = '\x2b';
  const std::string path = dir.file("corrupt.model");
  testing::write_text(path, model);
  try {
    models::load_sentencepiece(path);
    FAIL() << "a corrupt character map was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt precompiled character map"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("corrupt.model"), std::string::npos) << e.what();
  }
}

TEST(TokenizerCheck, MapShapeErrorsAreNamed) {
  TempDir dir("tok-check");
  const std::string model = train_tiny_model(dir);
  std::size_t length = 0;
  const std::size_t start = charsmap_start(model, &length);  // before reading `length`
  const std::string blob = model.substr(start, length);
  ASSERT_GT(blob.size(), 4u);
  EXPECT_NO_THROW(models::check_precompiled_charsmap(blob, "m"));
  EXPECT_NO_THROW(models::check_precompiled_charsmap("", "m"));  // no map: identity normaliser
  EXPECT_THROW(models::check_precompiled_charsmap(blob.substr(0, 3), "m"), InputError);
  std::string too_big = blob;
  too_big[3] = '\x7f';  // trie size far beyond the map
  EXPECT_THROW(models::check_precompiled_charsmap(too_big, "m"), InputError);
  std::string root = blob;
  root[4 + 3] = '\x7f';  // the root's child base points past the trie
  EXPECT_THROW(models::check_precompiled_charsmap(root, "m"), InputError);
  // A truncated model file is refused by the wire reader, not read past its end.
  EXPECT_THROW(models::check_sentencepiece_model(model.substr(0, model.size() / 2), "half.model"), InputError);
}

// The estimate's count is its encoding's length, computed without the pieces: by hand, "Hello,
// world!" is Hell|o , worl|d ! = 6 and a 9-letter word 3; and on texts of every kind of run.
TEST(EstimateTokenizer, CountIsTheLengthOfTheEncoding) {
  const models::EstimateTokenizer t;
  EXPECT_EQ(t.count("Hello, world!"), 6u);
  EXPECT_EQ(t.count("abcdefghi"), 3u);
  EXPECT_EQ(t.count(""), 0u);
  for (const std::string text : {"", "  ", "a", "...", "x.y", "summarize the meeting's key decisions (all 3)?",
                                 "tab\tsep\nnew line  double  space", "\xc3\xa9t\xc3\xa9 caf\xc3\xa9"})
    EXPECT_EQ(t.count(text), t.encode(text).size()) << text;
}

// Its classes are the C locale's std::isspace / std::ispunct for every byte (the test process keeps
// the C locale), so the tabulated classes count exactly what the library calls counted.
TEST(EstimateTokenizer, CharacterClassesAreTheCLocales) {
  using K = models::EstimateTokenizer::CharClass;
  int spaces = 0, puncts = 0;
  for (int c = 0; c < 256; ++c) {
    const auto u = static_cast<unsigned char>(c);
    const K want = std::isspace(u) ? K::kSpace : std::ispunct(u) ? K::kPunct : K::kWord;
    EXPECT_EQ(models::EstimateTokenizer::char_class(u), want) << "byte " << c;
    spaces += want == K::kSpace;
    puncts += want == K::kPunct;
  }
  EXPECT_EQ(spaces, 6);   // \t \n \v \f \r and ' '
  EXPECT_EQ(puncts, 32);  // the printable ASCII that is neither letter, digit nor space
}

}  // namespace
}  // namespace mobisim
