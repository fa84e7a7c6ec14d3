#pragma once
// YAML profiles compiled into the binary from configs/ (devices/, models/, workloads/),
// keyed by their path relative to configs/, e.g. "devices/pixel7.yaml".
#include <map>
#include <string>
#include <vector>

namespace mobisim {

const std::map<std::string, std::string>& builtin_configs();

// Names (file stems) of the built-in profiles in one folder, e.g. builtin_names("devices").
std::vector<std::string> builtin_names(const std::string& folder);

// Finds a profile by name in `folder` or, when `name_or_path` names an existing
// file, reads that file. Sets `origin` to the path or "builtin:devices/x.yaml".
// Returns false when neither exists.
bool find_config(const std::string& folder, const std::string& name_or_path, std::string& text,
                 std::string& origin);

}  // namespace mobisim
