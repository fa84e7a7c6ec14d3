#pragma once
// Text <-> token ids. `SentencePieceTokenizer` wraps libsentencepiece (e.g. the
// Llama 2 model in ../shared/models); `EstimateTokenizer` is the documented
// fallback when no model file is given: it splits on whitespace and punctuation
// and charges ceil(len/4) tokens per word piece of more than 4 characters, a rule
// fitted to the Llama 2 tokenizer on English text (about 1.3 tokens per word).
#include <memory>
#include <string>
#include <vector>

namespace mobisim::models {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int>& ids) const = 0;
  virtual std::size_t count(const std::string& text) const { return encode(text).size(); }
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual std::string name() const = 0;   // stored in trace metadata
  virtual bool exact() const = 0;         // false for estimates
};

// Throws InputError when the file is missing or not a SentencePiece model.
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_path);

// Word pieces of at most 4 characters; whitespace separates, and each punctuation character is a
// piece of its own. Characters are classed as the C locale's std::isspace / std::ispunct do (ASCII
// only: a byte >= 0x80 is a word character), whatever locale the process sets.
class EstimateTokenizer : public Tokenizer {
 public:
  enum class CharClass : unsigned char { kWord, kSpace, kPunct };
  static CharClass char_class(unsigned char c);
  std::vector<int> encode(const std::string& text) const override;  // pseudo ids (hash of the piece)
  std::string decode(const std::vector<int>& ids) const override;   // not invertible: returns ""
  std::size_t count(const std::string& text) const override;
  int vocab_size() const override { return 32000; }
  int bos_id() const override { return 1; }
  int eos_id() const override { return 2; }
  std::string name() const override { return "estimate:word-pieces-of-4-chars"; }
  bool exact() const override { return false; }
};

}  // namespace mobisim::models
