#pragma once
// Helpers shared by the tests/test_traces_*.cpp files.
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

namespace mobisim::traces::trace_testing {

// ../shared (QMSum data, tokenizer): MOBISIM_SHARED_DIR, else <source>/../shared; "" when absent.
inline std::string shared_dir() {
  if (const char* d = std::getenv("MOBISIM_SHARED_DIR"); d && std::filesystem::is_directory(d)) return d;
  const std::string fallback = std::string(MOBISIM_SOURCE_DIR) + "/../shared";
  return std::filesystem::is_directory(fallback) ? fallback : "";
}

// A fresh directory for one test's files.
inline std::string temp_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("mobisim-traces-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace mobisim::traces::trace_testing
