#pragma once
// The `mobisim` command line: subcommands register themselves by name, so each
// layer (experiments, kernel, traces, reproduce) adds its commands in its own file:
//
//     MOBISIM_REGISTER_COMMAND("kernel", "Run the real transformer kernel",
//                              "mobisim kernel {generate|check|trace} [options]", kernel_main);
//
// A command receives the arguments after its name and returns an exit code
// (see ExitCode in sim/error.h). Errors thrown as mobisim::Error are printed
// once by main() with their exit code.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mobisim::cli {

using CommandFn = std::function<int(const std::vector<std::string>& args)>;

struct Command {
  std::string name;
  std::string summary;
  std::string usage;
  CommandFn run;
};

class CommandRegistry {
 public:
  static CommandRegistry& instance();
  bool add(Command c);
  const Command* find(const std::string& name) const;
  const std::map<std::string, Command>& all() const { return commands_; }

 private:
  std::map<std::string, Command> commands_;
};

// Minimal option parser shared by every subcommand: `--name value`, `--name=value`,
// `--flag`, repeatable options (e.g. `-p a.b=1 -p c=2`) and positionals.
// Unknown options are usage errors; `--help` prints the generated help.
class ArgParser {
 public:
  ArgParser(std::string usage, std::string description);
  ArgParser& option(const std::string& name, const std::string& value_name, const std::string& help,
                    std::optional<std::string> default_value = std::nullopt);
  ArgParser& repeated(const std::string& name, const std::string& short_name, const std::string& value_name,
                      const std::string& help);
  ArgParser& flag(const std::string& name, const std::string& help);
  ArgParser& positional(const std::string& name, const std::string& help, bool required = true);

  // Returns false when --help was printed (the caller should return kExitOk).
  bool parse(const std::vector<std::string>& args);

  std::string get(const std::string& name) const;               // option or positional (default applied)
  std::optional<std::string> maybe(const std::string& name) const;
  bool has(const std::string& name) const;
  bool flag_set(const std::string& name) const;
  const std::vector<std::string>& all(const std::string& name) const;  // repeated option values
  long get_int(const std::string& name) const;
  double get_real(const std::string& name) const;
  std::string help() const;

 private:
  struct Opt {
    std::string name, short_name, value_name, help;
    std::optional<std::string> default_value;
    bool is_flag = false, is_repeated = false;
  };
  struct Pos { std::string name, help; bool required; };
  const Opt* find_opt(const std::string& token) const;
  std::string usage_, description_;
  std::vector<Opt> opts_;
  std::vector<Pos> positionals_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> repeated_values_;
  std::map<std::string, bool> flags_;
};

}  // namespace mobisim::cli

#define MOBISIM_REGISTER_COMMAND(name, summary, usage, fn)                                         \
  namespace {                                                                                      \
  [[maybe_unused]] const bool MOBISIM_CLI_CONCAT(mobisim_command_, __COUNTER__) =                     \
      ::mobisim::cli::CommandRegistry::instance().add({name, summary, usage, fn});                 \
  }
#define MOBISIM_CLI_CONCAT_INNER(a, b) a##b
#define MOBISIM_CLI_CONCAT(a, b) MOBISIM_CLI_CONCAT_INNER(a, b)
