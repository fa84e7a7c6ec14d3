// The `mobisim` command-line entry point. Subcommands live next to the code they
// drive and register themselves (see sim/cli.h); this file only dispatches and
// turns errors into one message and a documented exit code.
#include <fmt/format.h>
#include <yaml-cpp/exceptions.h>

#include <iostream>

#include "sim/cli.h"
#include "sim/error.h"
#include "sim/version.h"

namespace {

void print_help() {
  std::cout << fmt::format(
      "mobisim {} - simulator and trace-driven evaluation harness for on-device LLM inference\n\n"
      "usage: mobisim COMMAND [options]     (mobisim COMMAND --help for details)\n\ncommands:\n",
      mobisim::kVersion);
  for (const auto& [name, cmd] : mobisim::cli::CommandRegistry::instance().all())
    std::cout << fmt::format("  {:<12} {}\n", name, cmd.summary);
  std::cout << "\nexit codes: 0 success, 1 simulation failure, 2 usage error, 3 configuration error,\n"
               "            4 bad input data file (trace, checkpoint, HDF5)\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_help();
    return args.empty() ? mobisim::kExitUsage : mobisim::kExitOk;
  }
  if (args[0] == "--version") {
    std::cout << "mobisim " << mobisim::kVersion << "\n";
    return mobisim::kExitOk;
  }
  const auto* cmd = mobisim::cli::CommandRegistry::instance().find(args[0]);
  if (!cmd) {
    std::cerr << fmt::format("mobisim: unknown command '{}' (see mobisim --help)\n", args[0]);
    return mobisim::kExitUsage;
  }
  try {
    return cmd->run(std::vector<std::string>(args.begin() + 1, args.end()));
  } catch (const mobisim::Error& e) {
    std::cerr << "mobisim " << args[0] << ": error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const YAML::Exception& e) {
    // A config value of the wrong YAML kind (a list where a name belongs) read without a schema
    // check: a config error, not a failure of the simulation.
    std::cerr << "mobisim " << args[0] << ": config error: a value has the wrong type: " << e.what() << "\n";
    return mobisim::kExitConfig;
  } catch (const std::exception& e) {
    std::cerr << "mobisim " << args[0] << ": internal error: " << e.what() << "\n";
    return mobisim::kExitFailure;
  }
}
