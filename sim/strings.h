#pragma once
// Small text helpers shared by the command-line and message parsers.
#include <string>
#include <string_view>
#include <vector>

namespace mobisim {

// "a,b,,c" split at ',' -> {"a", "b", "", "c"}: empty fields are kept, so positions stay meaningful.
inline std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.emplace_back(s.substr(begin, i - begin));
      begin = i + 1;
    }
  }
  return out;
}

}  // namespace mobisim
