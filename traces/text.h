#pragma once
// Text normalisation shared by BM25, the built-in embedder, ROUGE-L/BLEU and the
// chunker, so that every component sees the same words.
//
// `words()`: ASCII letters are lower-cased, ASCII digits kept, every other ASCII
// byte (punctuation, whitespace) separates words; bytes >= 0x80 (UTF-8 letters
// such as "é") are kept inside words unchanged. No stemming, no stop-word list:
// BM25 and the embedder down-weight frequent words through their IDF instead.
//
// `split_whitespace()`: the raw words of a text (punctuation kept), used by the
// chunker so that chunk texts stay readable.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mobisim::traces {

std::vector<std::string> words(std::string_view text);
// The words of a set of texts (e.g. one user's knowledge chunks) over one vocabulary, split once
// for every index built on them (BM25, the embedder's fit, the phrase index).
struct TextWords {
  std::vector<std::string> vocab;                 // distinct words of words(), in order of first appearance
  std::vector<std::vector<std::uint32_t>> texts;  // each text's words as vocab ids, in text order
  static TextWords of(const std::vector<std::string>& texts);
};
// Calls fn(std::string_view word) for each word of words(text), in order, without allocating a
// vector of strings (the word view is valid only during the call).
template <class Fn>
void for_each_word(std::string_view text, Fn&& fn);
std::vector<std::string> split_whitespace(std::string_view text);
// join(split_whitespace(text), " ", 0, n): the first n raw words, without splitting the rest.
std::string first_words(std::string_view text, std::size_t n);
std::string join(const std::vector<std::string>& parts, std::string_view sep, std::size_t begin = 0,
                 std::size_t end = static_cast<std::size_t>(-1));
// True when `text` has at least one word character (letter, digit or UTF-8 byte).
bool has_words(std::string_view text);

inline bool is_word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80;
}

template <class Fn>
void for_each_word(std::string_view text, Fn&& fn) {
  std::string cur;
  for (unsigned char c : text) {
    if (is_word_byte(c)) {
      cur += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : static_cast<char>(c);
    } else if (!cur.empty()) {
      fn(std::string_view(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) fn(std::string_view(cur));
}

}  // namespace mobisim::traces
