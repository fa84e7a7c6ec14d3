#include "traces/text.h"

#include <algorithm>
#include <functional>
#include <unordered_map>

namespace mobisim::traces {

std::vector<std::string> words(std::string_view text) {
  std::vector<std::string> out;
  for_each_word(text, [&](std::string_view w) { out.emplace_back(w); });
  return out;
}

namespace {
struct ViewHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
}  // namespace

TextWords TextWords::of(const std::vector<std::string>& texts) {
  TextWords out;
  std::unordered_map<std::string, std::uint32_t, ViewHash, std::equal_to<>> id_of;  // lookups only
  out.texts.reserve(texts.size());
  for (const auto& t : texts) {
    std::vector<std::uint32_t> ids;
    for_each_word(t, [&](std::string_view w) {
      auto it = id_of.find(w);
      if (it == id_of.end()) {
        it = id_of.emplace(std::string(w), static_cast<std::uint32_t>(out.vocab.size())).first;
        out.vocab.emplace_back(w);
      }
      ids.push_back(it->second);
    });
    out.texts.push_back(std::move(ids));
  }
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

std::string first_words(std::string_view text, std::size_t n) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  std::string out;
  std::size_t i = 0, taken = 0;
  while (taken < n && i < text.size()) {
    while (i < text.size() && space(text[i])) ++i;
    std::size_t j = i;
    while (j < text.size() && !space(text[j])) ++j;
    if (j > i) {
      if (taken > 0) out += ' ';
      out.append(text.substr(i, j - i));
      ++taken;
    }
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
