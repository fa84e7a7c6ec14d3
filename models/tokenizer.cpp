#include "models/tokenizer.h"

#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/sentencepiece_check.h"
#include "sim/atomic_file.h"
#include "sim/error.h"
#include "sim/rng.h"

namespace mobisim::models {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  if (!in && !in.eof()) throw InputError(fmt::format("{}: cannot read the tokenizer model", path));
  return out.str();
}

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    if (!path_exists(path)) throw InputError(fmt::format("{}: tokenizer model not found", path));
    const std::string bytes = read_file(path);
    check_sentencepiece_model(bytes, path);  // what the library itself trusts (its normalizer's trie)
    auto status = sp_.LoadFromSerializedProto(bytes);
    if (!status.ok())
      throw InputError(fmt::format("{}: not a SentencePiece model: {}", path, status.ToString()));
  }
  std::vector<int> encode(const std::string& text) const override {
    std::vector<int> ids;
    auto status = sp_.Encode(text, &ids);
    if (!status.ok()) throw InputError(fmt::format("tokenizer {}: {}", path_, status.ToString()));
    return ids;
  }
  std::string decode(const std::vector<int>& ids) const override {
    for (int id : ids)
      if (id < 0 || id >= sp_.GetPieceSize())
        throw InputError(fmt::format("token id {} out of range [0, {})", id, sp_.GetPieceSize()));
    std::string out;
    auto status = sp_.Decode(ids, &out);
    if (!status.ok()) throw InputError(fmt::format("tokenizer {}: {}", path_, status.ToString()));
    return out;
  }
  int vocab_size() const override { return sp_.GetPieceSize(); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }
  std::string name() const override {
    return fmt::format("sentencepiece:{}", std::filesystem::path(path_).filename().string());
  }
  bool exact() const override { return true; }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
};

// The C locale's classes, tabulated: a lookup per character instead of two libc calls.
constexpr std::array<EstimateTokenizer::CharClass, 256> kCharClasses = [] {
  std::array<EstimateTokenizer::CharClass, 256> t{};
  for (auto& x : t) x = EstimateTokenizer::CharClass::kWord;
  for (int c : {'\t', '\n', '\v', '\f', '\r', ' '}) t[static_cast<std::size_t>(c)] = EstimateTokenizer::CharClass::kSpace;
  for (int c = 33; c <= 126; ++c) {
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
    if (!alnum) t[static_cast<std::size_t>(c)] = EstimateTokenizer::CharClass::kPunct;
  }
  return t;
}();

// Splits text into word and punctuation pieces.
std::vector<std::string> rough_pieces(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) out.push_back(cur);
    cur.clear();
  };
  for (unsigned char c : text) {
    const auto k = EstimateTokenizer::char_class(c);
    if (k == EstimateTokenizer::CharClass::kSpace) {
      flush();
    } else if (k == EstimateTokenizer::CharClass::kPunct) {
      flush();
      out.emplace_back(1, static_cast<char>(c));
    } else {
      cur += static_cast<char>(c);
    }
  }
  flush();
  return out;
}

}  // namespace

EstimateTokenizer::CharClass EstimateTokenizer::char_class(unsigned char c) { return kCharClasses[c]; }

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

// As encode(text).size(), without building the pieces: a run of word characters of length L
// counts max(1, ceil(L / 4)), each punctuation character one (it is a piece of length 1).
std::size_t EstimateTokenizer::count(const std::string& text) const {
  std::size_t n = 0, run = 0;
  auto flush = [&] {
    if (run > 0) n += (run + 3) / 4;
    run = 0;
  };
  for (unsigned char c : text) {
    const auto k = char_class(c);
    if (k == CharClass::kSpace) {
      flush();
    } else if (k == CharClass::kPunct) {
      flush();
      n += 1;
    } else {
      ++run;
    }
  }
  flush();
  return n;
}

std::vector<int> EstimateTokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  for (const auto& p : rough_pieces(text)) {
    const std::size_t pieces = std::max<std::size_t>(1, (p.size() + 3) / 4);
    for (std::size_t i = 0; i < pieces; ++i) {
      const std::string part = p.substr(i * 4, 4);
      ids.push_back(3 + static_cast<int>(sim::fnv1a64(part) % 31997));
    }
  }
  return ids;
}

std::string EstimateTokenizer::decode(const std::vector<int>&) const { return ""; }

}  // namespace mobisim::models
