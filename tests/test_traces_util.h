#pragma once
// Helpers shared by the tests/test_traces_*.cpp files.
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "test_util.h"

namespace mobisim::traces::trace_testing {

using mobisim::testing::shared_dir;  // ../shared (QMSum data, tokenizer), "" when absent

// A fresh directory for one test's files.
inline std::string temp_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("mobisim-traces-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace mobisim::traces::trace_testing
