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
#include <string>
#include <string_view>
#include <vector>

namespace mobisim::traces {

std::vector<std::string> words(std::string_view text);
std::vector<std::string> split_whitespace(std::string_view text);
std::string join(const std::vector<std::string>& parts, std::string_view sep, std::size_t begin = 0,
                 std::size_t end = static_cast<std::size_t>(-1));
// True when `text` has at least one word character (letter, digit or UTF-8 byte).
bool has_words(std::string_view text);

}  // namespace mobisim::traces
