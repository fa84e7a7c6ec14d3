#include <filesystem>

#include "sim/atomic_file.h"
#include "sim/builtin_configs.h"

namespace mobisim {

std::vector<std::string> builtin_names(const std::string& folder) {
  std::vector<std::string> out;
  const std::string prefix = folder + "/";
  for (const auto& [key, text] : builtin_configs()) {
    if (key.rfind(prefix, 0) != 0) continue;
    std::string stem = key.substr(prefix.size());
    if (stem.find('/') != std::string::npos) continue;
    out.push_back(stem.substr(0, stem.size() - 5));  // drop ".yaml"
  }
  return out;
}

bool find_config(const std::string& folder, const std::string& name_or_path, std::string& text,
                 std::string& origin) {
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".yaml")) {
    if (!is_file(name_or_path)) return false;
    text = read_file(name_or_path);
    origin = name_or_path;
    return true;
  }
  const std::string key = folder + "/" + name_or_path + ".yaml";
  auto it = builtin_configs().find(key);
  if (it == builtin_configs().end()) return false;
  text = it->second;
  origin = "builtin:configs/" + key;
  return true;
}

}  // namespace mobisim
