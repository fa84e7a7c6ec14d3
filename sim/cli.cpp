#include "sim/cli.h"

#include <fmt/format.h>

#include <cstdlib>
#include <iostream>

#include "sim/error.h"

namespace mobisim::cli {

CommandRegistry& CommandRegistry::instance() {
  static CommandRegistry registry;
  return registry;
}

bool CommandRegistry::add(Command c) {
  const std::string name = c.name;
  if (!commands_.emplace(name, std::move(c)).second)
    throw Error(fmt::format("command '{}' is registered twice", name));
  return true;
}

const Command* CommandRegistry::find(const std::string& name) const {
  auto it = commands_.find(name);
  return it == commands_.end() ? nullptr : &it->second;
}

ArgParser::ArgParser(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

ArgParser& ArgParser::option(const std::string& name, const std::string& value_name, const std::string& help,
                             std::optional<std::string> default_value) {
  opts_.push_back({name, "", value_name, help, std::move(default_value)});
  return *this;
}

ArgParser& ArgParser::repeated(const std::string& name, const std::string& short_name,
                               const std::string& value_name, const std::string& help) {
  Opt o{name, short_name, value_name, help, std::nullopt};
  o.is_repeated = true;
  opts_.push_back(o);
  return *this;
}

ArgParser& ArgParser::flag(const std::string& name, const std::string& help) {
  Opt o{name, "", "", help, std::nullopt};
  o.is_flag = true;
  opts_.push_back(o);
  return *this;
}

ArgParser& ArgParser::positional(const std::string& name, const std::string& help, bool required) {
  positionals_.push_back({name, help, required});
  return *this;
}

const ArgParser::Opt* ArgParser::find_opt(const std::string& token) const {
  for (const auto& o : opts_) {
    if (token == "--" + o.name) return &o;
    if (!o.short_name.empty() && token == "-" + o.short_name) return &o;
  }
  return nullptr;
}

bool ArgParser::parse(const std::vector<std::string>& args) {
  std::size_t next_pos = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string tok = args[i];
    if (tok == "--help" || tok == "-h") {
      std::cout << help();
      return false;
    }
    if (tok.size() > 1 && tok[0] == '-' && !(tok.size() > 1 && std::isdigit(static_cast<unsigned char>(tok[1])))) {
      std::string inline_value;
      bool has_inline = false;
      if (auto eq = tok.find('='); eq != std::string::npos && tok.rfind("--", 0) == 0) {
        inline_value = tok.substr(eq + 1);
        tok = tok.substr(0, eq);
        has_inline = true;
      }
      const Opt* o = find_opt(tok);
      if (!o) throw UsageError(fmt::format("unknown option '{}'\n{}", tok, usage_));
      if (o->is_flag) {
        flags_[o->name] = true;
        continue;
      }
      std::string value;
      if (has_inline) {
        value = inline_value;
      } else {
        if (i + 1 >= args.size()) throw UsageError(fmt::format("option '{}' needs a value ({})", tok, o->value_name));
        value = args[++i];
      }
      if (o->is_repeated)
        repeated_values_[o->name].push_back(value);
      else
        values_[o->name] = value;
      continue;
    }
    if (next_pos >= positionals_.size())
      throw UsageError(fmt::format("unexpected argument '{}'\nusage: {}", tok, usage_));
    values_[positionals_[next_pos++].name] = tok;
  }
  for (std::size_t p = next_pos; p < positionals_.size(); ++p)
    if (positionals_[p].required)
      throw UsageError(fmt::format("missing argument {}\nusage: {}", positionals_[p].name, usage_));
  return true;
}

bool ArgParser::has(const std::string& name) const { return values_.count(name) > 0; }
bool ArgParser::flag_set(const std::string& name) const { return flags_.count(name) > 0; }

std::optional<std::string> ArgParser::maybe(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  for (const auto& o : opts_)
    if (o.name == name && o.default_value) return o.default_value;
  return std::nullopt;
}

std::string ArgParser::get(const std::string& name) const {
  auto v = maybe(name);
  if (!v) throw UsageError(fmt::format("missing required option --{}\nusage: {}", name, usage_));
  return *v;
}

const std::vector<std::string>& ArgParser::all(const std::string& name) const {
  static const std::vector<std::string> empty;
  auto it = repeated_values_.find(name);
  return it == repeated_values_.end() ? empty : it->second;
}

long ArgParser::get_int(const std::string& name) const {
  const std::string v = get(name);
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') throw UsageError(fmt::format("--{}: expected an integer, got '{}'", name, v));
  return x;
}

double ArgParser::get_real(const std::string& name) const {
  const std::string v = get(name);
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') throw UsageError(fmt::format("--{}: expected a number, got '{}'", name, v));
  return x;
}

std::string ArgParser::help() const {
  std::string out = fmt::format("usage: {}\n\n{}\n", usage_, description_);
  if (!positionals_.empty()) {
    out += "\narguments:\n";
    for (const auto& p : positionals_) out += fmt::format("  {:<26} {}\n", p.name, p.help);
  }
  out += "\noptions:\n";
  for (const auto& o : opts_) {
    std::string lhs = (o.short_name.empty() ? "" : "-" + o.short_name + ", ") + "--" + o.name;
    if (!o.is_flag) lhs += " " + o.value_name;
    std::string rhs = o.help;
    if (o.default_value) rhs += fmt::format(" (default: {})", *o.default_value);
    if (o.is_repeated) rhs += " (repeatable)";
    out += fmt::format("  {:<26} {}\n", lhs, rhs);
  }
  out += fmt::format("  {:<26} {}\n", "-h, --help", "show this help");
  return out;
}

}  // namespace mobisim::cli
