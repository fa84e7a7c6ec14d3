#pragma once
// Error types shared by every layer. Each carries enough context (file, key,
// line) for the CLI to print one clear message and pick a documented exit code.
#include <stdexcept>
#include <string>

namespace mobisim {

// Exit codes of the `mobisim` CLI (documented in README.md and `mobisim --help`).
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,      // the simulation itself failed (bug, resource exhausted)
  kExitUsage = 2,        // bad command line
  kExitConfig = 3,       // bad YAML experiment/device/model config
  kExitInput = 4,        // bad input data file (trace, checkpoint, HDF5)
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, int exit_code = kExitFailure)
      : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// A configuration problem: malformed YAML, unknown or missing key, out-of-range value.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& what) : Error(what, kExitConfig) {}
};

// A problem with an input data file: truncated/corrupt HDF5, bad checkpoint, bad JSON.
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what, kExitInput) {}
};

// Wrong command-line usage.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what, kExitUsage) {}
};

}  // namespace mobisim
