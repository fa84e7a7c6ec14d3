#include "traces/text.h"

#include <algorithm>

namespace mobisim::traces {

std::vector<std::string> words(std::string_view text) {
  std::vector<std::string> out;
  for_each_word(text, [&](std::string_view w) { out.emplace_back(w); });
  return out;
}

std::vector<std::string> split_whitespace(std::string_view text) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) ++i;
    std::size_t j = i;
    while (j < text.size() && !(text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r')) ++j;
    if (j > i) out.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep, std::size_t begin, std::size_t end) {
  end = std::min(end, parts.size());
  std::string out;
  for (std::size_t i = begin; i < end; ++i) {
    if (i > begin) out += sep;
    out += parts[i];
  }
  return out;
}

bool has_words(std::string_view text) {
  return std::any_of(text.begin(), text.end(), [](char c) { return is_word_byte(static_cast<unsigned char>(c)); });
}

}  // namespace mobisim::traces
