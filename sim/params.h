#pragma once
// Typed, documented, validated parameters read from YAML.
//
// Every configurable component declares its parameters once, in a static
// `schema()` (name, type, default, unit, range, doc). `Params` checks a YAML
// mapping against that schema: unknown keys, missing required keys, wrong types
// and out-of-range values are ConfigErrors naming file, line, column and the
// full key path. The same schema drives `mobisim list`.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mobisim {

enum class ParamType { kBool, kInt, kReal, kText, kRealList, kIntList, kTextList, kNode };
const char* to_string(ParamType t);

struct ParamDef {
  std::string name;
  ParamType type = ParamType::kReal;
  std::string doc;
  std::string unit;                        // informational, shown by `mobisim list`
  std::optional<YAML::Node> default_value; // absent => required unless `optional_` is set
  bool optional_ = false;                  // may be absent with no default (check has())
  std::optional<double> min, max;
  bool min_exclusive = false;
  std::vector<std::string> choices;        // for kText: allowed values

  ParamDef& positive() { min = 0.0; min_exclusive = true; return *this; }
  ParamDef& non_negative() { min = 0.0; min_exclusive = false; return *this; }
  ParamDef& range(double lo, double hi) { min = lo; max = hi; min_exclusive = false; return *this; }
  ParamDef& at_least(double lo) { min = lo; min_exclusive = false; return *this; }
  ParamDef& in(std::vector<std::string> allowed) { choices = std::move(allowed); return *this; }
  ParamDef& with_unit(std::string u) { unit = std::move(u); return *this; }
  ParamDef& optional() { optional_ = true; return *this; }
  // A cost whose 0 stands for "not modelled" (not for "free"): `list` says so, and a run whose
  // value is 0 names the key in its result file and on the terminal.
  ParamDef& zero_means_not_modelled() { zero_not_modelled = true; return *this; }
  bool zero_not_modelled = false;
  // A file to read: a relative path written in a YAML file resolves against that file's folder
  // (resolve_input_path); Params::text and Params::resolved give the resolved path.
  ParamDef& input_path() { is_input_path = true; return *this; }
  bool is_input_path = false;
  // For lists: an empty list is an error (the value sizes or drives work).
  ParamDef& non_empty() { non_empty_ = true; return *this; }
  bool non_empty_ = false;
  std::string default_text() const;  // "" when required, "(none)" when optional
  bool required() const { return !default_value && !optional_; }
};

class ParamSchema {
 public:
  // A required parameter has no default: pass std::nullopt (or use the overload without default).
  ParamDef& real(const std::string& name, std::optional<double> def, const std::string& doc);
  ParamDef& integer(const std::string& name, std::optional<std::int64_t> def, const std::string& doc);
  ParamDef& boolean(const std::string& name, std::optional<bool> def, const std::string& doc);
  ParamDef& text(const std::string& name, std::optional<std::string> def, const std::string& doc);
  ParamDef& real_list(const std::string& name, std::optional<std::vector<double>> def, const std::string& doc);
  ParamDef& int_list(const std::string& name, std::optional<std::vector<std::int64_t>> def, const std::string& doc);
  ParamDef& text_list(const std::string& name, std::optional<std::vector<std::string>> def, const std::string& doc);
  // A nested mapping or sequence validated later by its owner (e.g. a child plug-in with its own `impl:`).
  ParamDef& node(const std::string& name, const std::string& doc);

  const std::vector<ParamDef>& defs() const { return defs_; }
  const ParamDef* find(const std::string& name) const;
  // Adds every parameter of `other` (used by plug-ins that share a common base schema).
  ParamSchema& merge(const ParamSchema& other);

 private:
  ParamDef& add(ParamDef d);
  std::vector<ParamDef> defs_;
};

// Where a YAML node came from: the file and the dotted key path inside it.
// The keys a run read as "0: not modelled" (ParamDef::zero_means_not_modelled), collected while
// its components read their parameters (some do so on worker threads, hence the lock).
class NotModelledKeys {
 public:
  void add(const std::string& key);
  std::vector<std::string> keys() const;  // sorted

 private:
  mutable std::mutex mutex_;
  std::set<std::string> keys_;
};

struct ConfigSource {
  std::shared_ptr<const std::string> file;  // may be null for built-in or command-line nodes
  std::string key_path;                     // e.g. "policies[2].qa_bank"
  // Command-line overrides ("a.b[2].c=value") applied to this document: a key at or below an
  // overridden path is reported as coming from the override, not from the file.
  std::shared_ptr<const std::vector<std::string>> overrides = nullptr;
  std::shared_ptr<NotModelledKeys> not_modelled = nullptr;  // null: not collected
  // The device-profile values an engine profile inherits explicitly (devices/engine.h
  // `inherit_device`), collected the same way and recorded in the result file. null: not collected.
  std::shared_ptr<NotModelledKeys> inherited = nullptr;
  // Values an engine derived from the SoC's description rather than stated (its CPU kernels' ISA path,
  // threads and int8 peak), collected the same way and recorded in the result. null: not collected.
  std::shared_ptr<NotModelledKeys> derived_from_soc = nullptr;

  ConfigSource child(const std::string& key) const;
  ConfigSource element(std::size_t index) const;
  // True when a -p override set this key or one above it (its text came from the command line).
  bool from_override() const;
  // "file.yaml:12:5: key 'a.b'" (line/column when the node carries a mark).
  std::string where(const YAML::Node& node) const;
};

// Where an input file named in a config lives. A relative path written in a YAML file resolves
// against that file's folder (so a config and its data move together); one given on the command
// line (-p) or in a built-in profile stays relative to the working directory, as does one written
// `{cwd}/PATH` (files other runs write under the working directory, e.g. `{cwd}/results/x.h5`).
// `{shared}/...` and absolute paths are left as they are. The result is relative to the working
// directory when the YAML's folder is.
std::string resolve_input_path(const std::string& value, const ConfigSource& where);

// A validated view of one YAML mapping.
class Params {
 public:
  // Validates `node` (must be a mapping, or null/absent meaning "all defaults").
  // Keys listed in `passthrough` (e.g. "impl") are allowed without a schema entry.
  Params(const YAML::Node& node, const ParamSchema& schema, ConfigSource source,
         std::vector<std::string> passthrough = {"impl"});

  double real(const std::string& name) const;
  std::int64_t integer(const std::string& name) const;
  bool boolean(const std::string& name) const;
  std::string text(const std::string& name) const;
  std::vector<double> real_list(const std::string& name) const;
  std::vector<std::int64_t> int_list(const std::string& name) const;
  std::vector<std::string> text_list(const std::string& name) const;
  YAML::Node node(const std::string& name) const;   // raw child node (kNode params); null when absent
  bool has(const std::string& name) const;          // present in YAML (not merely defaulted)

  const ConfigSource& source() const { return source_; }
  ConfigSource source_of(const std::string& name) const { return source_.child(name); }
  const YAML::Node& yaml() const { return node_; }
  // The effective values (YAML values merged with defaults), for storing with results.
  YAML::Node resolved() const;
  // Throws a ConfigError pointing at `name` (or at the mapping when absent).
  [[noreturn]] void fail(const std::string& name, const std::string& message) const;

 private:
  YAML::Node value_of(const std::string& name, ParamType expected) const;
  YAML::Node node_;
  std::shared_ptr<const ParamSchema> schema_;  // a copy: Params may outlive the caller's schema
  ConfigSource source_;
};

// Loads a YAML file; a syntax error becomes a ConfigError with file:line:column.
YAML::Node load_yaml_file(const std::string& path);
YAML::Node load_yaml_string(const std::string& text, const std::string& name);

// Applies a command-line override "a.b[2].c=value" (or "a.b.2.c=value") to a YAML tree (value
// parsed as YAML). A scalar met on the way stands for a profile name and becomes {base: NAME}, so
// `-p experiment.device.storage.seq_read_gbps=4` works on `device: pixel7`. Errors name the override.
void apply_override(YAML::Node& root, const std::string& assignment);
// The key path of an override, split into steps ("a.b[2].c" and "a.b.2.c" -> a, b, 2, c).
std::vector<std::string> override_path_steps(const std::string& assignment);

// Deep copy (yaml-cpp nodes otherwise alias).
YAML::Node yaml_clone(const YAML::Node& node);
std::string yaml_to_string(const YAML::Node& node);

}  // namespace mobisim
