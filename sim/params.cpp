#include "sim/params.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <type_traits>

#include "sim/error.h"

namespace mobisim {

const char* to_string(ParamType t) {
  switch (t) {
    case ParamType::kBool: return "bool";
    case ParamType::kInt: return "int";
    case ParamType::kReal: return "real";
    case ParamType::kText: return "text";
    case ParamType::kRealList: return "list<real>";
    case ParamType::kIntList: return "list<int>";
    case ParamType::kTextList: return "list<text>";
    case ParamType::kNode: return "mapping";
  }
  return "?";
}

std::string ParamDef::default_text() const {
  if (!default_value) return optional_ ? "(none)" : "";
  YAML::Emitter out;
  out << YAML::Flow << *default_value;
  return out.c_str();
}

// ---------------------------------------------------------------------------
// ParamSchema
// ---------------------------------------------------------------------------
ParamDef& ParamSchema::add(ParamDef d) {
  for (auto& existing : defs_) {
    if (existing.name == d.name) {  // a later definition refines an inherited one
      existing = std::move(d);
      return existing;
    }
  }
  defs_.push_back(std::move(d));
  return defs_.back();
}

static ParamDef make_def(const std::string& name, ParamType type, const std::string& doc,
                         std::optional<YAML::Node> def) {
  ParamDef d;
  d.name = name;
  d.type = type;
  d.doc = doc;
  d.default_value = std::move(def);
  return d;
}

// Reals as their shortest round-trip text (3.87, not 3.8700000000000001): defaults are printed by
// `mobisim list` and stored in resolved configurations.
static YAML::Node real_node(double v) { return YAML::Node(fmt::format("{}", v)); }

template <class T>
static std::optional<YAML::Node> to_node(const std::optional<T>& v) {
  if (!v) return std::nullopt;
  if constexpr (std::is_same_v<T, double>) {
    return real_node(*v);
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    YAML::Node list(YAML::NodeType::Sequence);
    for (double x : *v) list.push_back(real_node(x));
    return list;
  } else {
    return YAML::Node(*v);
  }
}

ParamDef& ParamSchema::real(const std::string& name, std::optional<double> def, const std::string& doc) {
  return add(make_def(name, ParamType::kReal, doc, to_node(def)));
}
ParamDef& ParamSchema::integer(const std::string& name, std::optional<std::int64_t> def, const std::string& doc) {
  return add(make_def(name, ParamType::kInt, doc, to_node(def)));
}
ParamDef& ParamSchema::boolean(const std::string& name, std::optional<bool> def, const std::string& doc) {
  return add(make_def(name, ParamType::kBool, doc, to_node(def)));
}
ParamDef& ParamSchema::text(const std::string& name, std::optional<std::string> def, const std::string& doc) {
  return add(make_def(name, ParamType::kText, doc, to_node(def)));
}
ParamDef& ParamSchema::real_list(const std::string& name, std::optional<std::vector<double>> def,
                                 const std::string& doc) {
  return add(make_def(name, ParamType::kRealList, doc, to_node(def)));
}
ParamDef& ParamSchema::int_list(const std::string& name, std::optional<std::vector<std::int64_t>> def,
                                const std::string& doc) {
  return add(make_def(name, ParamType::kIntList, doc, to_node(def)));
}
ParamDef& ParamSchema::text_list(const std::string& name, std::optional<std::vector<std::string>> def,
                                 const std::string& doc) {
  return add(make_def(name, ParamType::kTextList, doc, to_node(def)));
}
ParamDef& ParamSchema::node(const std::string& name, const std::string& doc) {
  ParamDef d = make_def(name, ParamType::kNode, doc, std::nullopt);
  d.optional_ = true;
  return add(std::move(d));
}

const ParamDef* ParamSchema::find(const std::string& name) const {
  for (const auto& d : defs_)
    if (d.name == name) return &d;
  return nullptr;
}

ParamSchema& ParamSchema::merge(const ParamSchema& other) {
  for (const auto& d : other.defs_) add(d);
  return *this;
}

// ---------------------------------------------------------------------------
// ConfigSource
// ---------------------------------------------------------------------------
void NotModelledKeys::add(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  keys_.insert(key);
}

std::vector<std::string> NotModelledKeys::keys() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {keys_.begin(), keys_.end()};
}

ConfigSource ConfigSource::child(const std::string& key) const {
  return {file, key_path.empty() ? key : key_path + "." + key, overrides, not_modelled, inherited, derived_from_soc};
}

ConfigSource ConfigSource::element(std::size_t index) const {
  return {file, fmt::format("{}[{}]", key_path, index), overrides, not_modelled, inherited, derived_from_soc};
}

static std::vector<std::string> key_steps(const std::string& path) {
  std::vector<std::string> steps;
  std::string cur;
  for (char c : path) {
    if (c == '.' || c == '[' || c == ']') {
      if (!cur.empty()) steps.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) steps.push_back(cur);
  return steps;
}

std::vector<std::string> override_path_steps(const std::string& assignment) {
  return key_steps(assignment.substr(0, assignment.find('=')));
}

bool ConfigSource::from_override() const {
  if (!overrides) return false;
  const auto here = key_steps(key_path);
  for (const auto& o : *overrides) {
    const auto steps = override_path_steps(o);
    if (!steps.empty() && steps.size() <= here.size() && std::equal(steps.begin(), steps.end(), here.begin()))
      return true;
  }
  return false;
}

std::string resolve_input_path(const std::string& value, const ConfigSource& where) {
  constexpr std::string_view kCwd = "{cwd}/";
  if (value.starts_with(kCwd)) return value.substr(kCwd.size());
  if (value.empty() || value.front() == '{' || std::filesystem::path(value).is_absolute()) return value;
  if (!where.file || where.file->starts_with("builtin:") || where.from_override()) return value;
  const std::filesystem::path dir = std::filesystem::path(*where.file).parent_path();
  if (dir.empty()) return value;
  return (dir / value).lexically_normal().string();
}

std::string ConfigSource::where(const YAML::Node& node) const {
  if (overrides) {
    const auto here = key_steps(key_path);
    for (auto it = overrides->rbegin(); it != overrides->rend(); ++it) {  // the last override wins
      const auto steps = override_path_steps(*it);
      if (!steps.empty() && steps.size() <= here.size() && std::equal(steps.begin(), steps.end(), here.begin()))
        return fmt::format("-p '{}': key '{}'", *it, key_path);
    }
  }
  std::string loc = file ? *file : std::string("<config>");
  if (node.IsDefined() && !node.Mark().is_null())
    loc += fmt::format(":{}:{}", node.Mark().line + 1, node.Mark().column + 1);
  if (!key_path.empty()) loc += fmt::format(": key '{}'", key_path);
  return loc;
}

// ---------------------------------------------------------------------------
// Params
// ---------------------------------------------------------------------------
namespace {

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  return "a mapping";
}

bool parse_bool(const YAML::Node& n, bool& out) {
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  if (s == "true" || s == "True" || s == "yes" || s == "on") { out = true; return true; }
  if (s == "false" || s == "False" || s == "no" || s == "off") { out = false; return true; }
  return false;
}

bool parse_real(const YAML::Node& n, double& out) {
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(out);
}

bool parse_int(const YAML::Node& n, std::int64_t& out) {
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() + s.size()) {
    if (errno == ERANGE) return false;  // beyond int64: never clamp silently
    out = v;
    return true;
  }
  // Accept integral reals written as 1e6.
  double d = 0;
  if (parse_real(n, d) && d == std::floor(d) && std::fabs(d) < 9.0e18) {
    out = static_cast<std::int64_t>(d);
    return true;
  }
  return false;
}

}  // namespace

Params::Params(const YAML::Node& node, const ParamSchema& schema, ConfigSource source,
               std::vector<std::string> passthrough)
    : node_(node), schema_(std::make_shared<const ParamSchema>(schema)), source_(std::move(source)) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap())
    throw ConfigError(fmt::format("{}: expected a mapping of parameters, got {}", source_.where(node_),
                                  describe(node_)));
  if (node_.IsMap()) {
    for (const auto& kv : node_) {
      const std::string key = kv.first.as<std::string>();
      bool known = schema.find(key) != nullptr;
      for (const auto& p : passthrough) known = known || p == key;
      if (!known) {
        std::string expected;
        for (const auto& d : schema.defs()) expected += (expected.empty() ? "" : ", ") + d.name;
        throw ConfigError(fmt::format("{}: unknown key '{}' (expected one of: {})",
                                      source_.child(key).where(kv.first), key,
                                      expected.empty() ? "no keys" : expected));
      }
    }
  }
  // Type- and range-check every declared parameter now, so errors surface before any simulation.
  for (const auto& d : schema.defs()) {
    if (d.type == ParamType::kNode) continue;
    if (!has(d.name)) {
      if (d.required())
        throw ConfigError(fmt::format("{}: missing required key '{}' ({}: {})", source_.where(node_),
                                      source_.child(d.name).key_path, to_string(d.type), d.doc));
      continue;
    }
    switch (d.type) {
      case ParamType::kBool: boolean(d.name); break;
      case ParamType::kInt: integer(d.name); break;
      case ParamType::kReal: real(d.name); break;
      case ParamType::kText: text(d.name); break;
      case ParamType::kRealList: real_list(d.name); break;
      case ParamType::kIntList: int_list(d.name); break;
      case ParamType::kTextList: text_list(d.name); break;
      case ParamType::kNode: break;
    }
  }
}

bool Params::has(const std::string& name) const {
  return node_.IsMap() && node_[name].IsDefined() && !node_[name].IsNull();
}

void Params::fail(const std::string& name, const std::string& message) const {
  YAML::Node at = has(name) ? node_[name] : node_;
  throw ConfigError(fmt::format("{}: {}", source_.child(name).where(at), message));
}

YAML::Node Params::value_of(const std::string& name, ParamType expected) const {
  const ParamDef* d = schema_->find(name);
  if (!d) throw Error(fmt::format("internal: parameter '{}' is not declared in the schema of {}", name,
                                  source_.key_path));
  if (d->type != expected)
    throw Error(fmt::format("internal: parameter '{}' declared as {} but read as {}", name, to_string(d->type),
                            to_string(expected)));
  if (has(name)) return node_[name];
  if (d->default_value) return *d->default_value;
  fail(name, fmt::format("missing required key '{}' ({})", name, d->doc));
}

static void check_range(const Params& p, const ParamDef& d, double v) {
  if (d.min && (d.min_exclusive ? !(v > *d.min) : !(v >= *d.min)))
    p.fail(d.name, fmt::format("value {} must be {} {}", v, d.min_exclusive ? ">" : ">=", *d.min));
  if (d.max && !(v <= *d.max)) p.fail(d.name, fmt::format("value {} must be <= {}", v, *d.max));
}

double Params::real(const std::string& name) const {
  YAML::Node n = value_of(name, ParamType::kReal);
  double v = 0;
  if (!parse_real(n, v)) fail(name, fmt::format("expected a number, got {}", describe(n)));
  const ParamDef& def = *schema_->find(name);
  check_range(*this, def, v);
  if (v == 0 && def.zero_not_modelled && source_.not_modelled) source_.not_modelled->add(source_.child(name).key_path);
  return v;
}

std::int64_t Params::integer(const std::string& name) const {
  YAML::Node n = value_of(name, ParamType::kInt);
  std::int64_t v = 0;
  if (!parse_int(n, v)) fail(name, fmt::format("expected an integer, got {}", describe(n)));
  check_range(*this, *schema_->find(name), static_cast<double>(v));
  return v;
}

bool Params::boolean(const std::string& name) const {
  YAML::Node n = value_of(name, ParamType::kBool);
  bool v = false;
  if (!parse_bool(n, v)) fail(name, fmt::format("expected true or false, got {}", describe(n)));
  return v;
}

std::string Params::text(const std::string& name) const {
  YAML::Node n = value_of(name, ParamType::kText);
  if (!n.IsScalar()) fail(name, fmt::format("expected a string, got {}", describe(n)));
  const ParamDef& d = *schema_->find(name);
  if (!d.choices.empty()) {
    bool ok = false;
    for (const auto& c : d.choices) ok = ok || c == n.Scalar();
    if (!ok) fail(name, fmt::format("'{}' is not one of: {}", n.Scalar(), fmt::join(d.choices, ", ")));
  }
  return d.is_input_path ? resolve_input_path(n.Scalar(), source_.child(name)) : n.Scalar();
}

template <class T, class ParseFn>
static std::vector<T> read_list(const Params& p, const YAML::Node& n, const std::string& name, const char* what,
                                ParseFn parse) {
  if (!n.IsSequence()) p.fail(name, fmt::format("expected a list of {}, got {}", what, describe(n)));
  std::vector<T> out;
  for (std::size_t i = 0; i < n.size(); ++i) {
    T v{};
    if (!parse(n[i], v)) p.fail(name, fmt::format("element {} : expected {}, got {}", i, what, describe(n[i])));
    out.push_back(v);
  }
  return out;
}

static void check_not_empty(const Params& p, const ParamDef& d, std::size_t size) {
  if (d.non_empty_ && size == 0) p.fail(d.name, "expected a non-empty list");
}

std::vector<double> Params::real_list(const std::string& name) const {
  auto v = read_list<double>(*this, value_of(name, ParamType::kRealList), name, "numbers", parse_real);
  check_not_empty(*this, *schema_->find(name), v.size());
  for (double x : v) check_range(*this, *schema_->find(name), x);
  return v;
}

std::vector<std::int64_t> Params::int_list(const std::string& name) const {
  auto v = read_list<std::int64_t>(*this, value_of(name, ParamType::kIntList), name, "integers", parse_int);
  check_not_empty(*this, *schema_->find(name), v.size());
  for (auto x : v) check_range(*this, *schema_->find(name), static_cast<double>(x));
  return v;
}

std::vector<std::string> Params::text_list(const std::string& name) const {
  auto v = read_list<std::string>(*this, value_of(name, ParamType::kTextList), name, "strings",
                                  [](const YAML::Node& n, std::string& out) {
                                    if (!n.IsScalar()) return false;
                                    out = n.Scalar();
                                    return true;
                                  });
  check_not_empty(*this, *schema_->find(name), v.size());
  return v;
}

YAML::Node Params::node(const std::string& name) const {
  const ParamDef* d = schema_->find(name);
  if (!d || d->type != ParamType::kNode)
    throw Error(fmt::format("internal: '{}' is not declared as a node parameter", name));
  return has(name) ? node_[name] : YAML::Node();
}

YAML::Node Params::resolved() const {
  YAML::Node out(YAML::NodeType::Map);
  if (node_.IsMap() && node_["impl"].IsDefined()) out["impl"] = yaml_clone(node_["impl"]);
  for (const auto& d : schema_->defs()) {
    if (has(d.name) && d.is_input_path && node_[d.name].IsScalar())
      out[d.name] = resolve_input_path(node_[d.name].Scalar(), source_.child(d.name));
    else if (has(d.name))
      out[d.name] = yaml_clone(node_[d.name]);
    else if (d.default_value)
      out[d.name] = yaml_clone(*d.default_value);
  }
  return out;
}

// ---------------------------------------------------------------------------
// YAML helpers
// ---------------------------------------------------------------------------
YAML::Node load_yaml_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot open file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return load_yaml_string(ss.str(), path);
}

// yaml-cpp keeps both entries of a repeated key and answers look-ups with one of them: a
// config that says `seed:` twice would run on a value its author may not have meant.
static void reject_duplicate_keys(const YAML::Node& node, const std::string& name) {
  if (node.IsMap()) {
    std::map<std::string, YAML::Mark> seen;
    for (const auto& kv : node) {
      if (kv.first.IsScalar()) {
        const auto [it, fresh] = seen.emplace(kv.first.Scalar(), kv.first.Mark());
        if (!fresh)
          throw ConfigError(fmt::format("{}:{}:{}: duplicate key '{}' (first given at line {})", name,
                                        kv.first.Mark().line + 1, kv.first.Mark().column + 1, kv.first.Scalar(),
                                        it->second.line + 1));
      }
      reject_duplicate_keys(kv.second, name);
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) reject_duplicate_keys(item, name);
  }
}

YAML::Node load_yaml_string(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}:{}:{}: malformed YAML: {}", name, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  reject_duplicate_keys(root, name);
  return root;
}

YAML::Node yaml_clone(const YAML::Node& node) { return YAML::Clone(node); }

std::string yaml_to_string(const YAML::Node& node) {
  YAML::Emitter out;
  out << node;
  return out.c_str();
}

// The name a list entry answers to in an override path: its label, else its impl, else the entry
// itself when it is a plain name.
static std::string list_entry_name(const YAML::Node& entry) {
  if (entry.IsScalar()) return entry.Scalar();
  if (!entry.IsMap()) return "";
  if (entry["label"] && entry["label"].IsScalar()) return entry["label"].Scalar();
  if (entry["impl"] && entry["impl"].IsScalar()) return entry["impl"].Scalar();
  return "";
}

static std::size_t list_entry_by_name(const YAML::Node& list, const std::string& name, const std::string& assignment) {
  std::vector<std::string> names;
  std::vector<std::size_t> found;
  for (std::size_t i = 0; i < list.size(); ++i) {
    names.push_back(list_entry_name(list[i]));
    if (names.back() == name) found.push_back(i);
  }
  if (found.size() == 1) return found.front();
  if (found.empty())
    throw UsageError(fmt::format("override '{}': no entry of the list is named '{}' (entries: {}; or give an index "
                                 "0-{})",
                                 assignment, name, fmt::join(names, ", "), list.size() - 1));
  throw UsageError(fmt::format("override '{}': {} entries of the list are named '{}' (give them labels, or use an "
                               "index: {})",
                               assignment, found.size(), name, fmt::join(found, ", ")));
}

void apply_override(YAML::Node& root, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError(fmt::format("override '{}': expected KEY.PATH=VALUE", assignment));
  const std::string path = assignment.substr(0, eq);
  YAML::Node value;
  try {
    value = load_yaml_string(assignment.substr(eq + 1), "value");
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("-p '{}': {}", assignment, e.what()));
  }

  // Split "a.b[2].c" into steps; each step is a key or an index.
  struct Step { std::string key; long index = -1; };
  std::vector<Step> steps;
  std::string cur;
  for (std::size_t i = 0; i <= path.size(); ++i) {
    char c = i < path.size() ? path[i] : '.';
    if (c == '.' || c == '[') {
      if (!cur.empty()) steps.push_back({cur});
      cur.clear();
      if (c == '[') {
        auto close = path.find(']', i);
        if (close == std::string::npos) throw UsageError(fmt::format("override '{}': missing ']'", assignment));
        const std::string idx = path.substr(i + 1, close - i - 1);
        if (idx.empty() || idx.size() > 9 || idx.find_first_not_of("0123456789") != std::string::npos)
          throw UsageError(fmt::format("override '{}': '[{}]' is not a list index", assignment, idx));
        steps.push_back({"", std::stol(idx)});
        i = close;
      }
    } else {
      cur += c;
    }
  }
  if (steps.empty()) throw UsageError(fmt::format("override '{}': empty key path", assignment));

  // yaml-cpp nodes are handles: walk with a vector of handles and assign at the end.
  YAML::Node node = root;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const bool last = i + 1 == steps.size();
    const Step& s = steps[i];
    if (s.index >= 0) {
      if (!node.IsSequence() || static_cast<std::size_t>(s.index) >= node.size())
        throw UsageError(fmt::format("override '{}': index [{}] does not exist", assignment, s.index));
      if (last) { node[s.index] = value; return; }
      node.reset(node[s.index]);
    } else if (node.IsSequence() && !s.key.empty() && s.key.find_first_not_of("0123456789") == std::string::npos &&
               s.key.size() <= 9) {
      // "policies.6.tau_query": a numeric step into a list is an index.
      const auto index = std::stoul(s.key);
      if (index >= node.size())
        throw UsageError(fmt::format("override '{}': index {} does not exist (the list has {} entries)", assignment,
                                     index, node.size()));
      if (last) { node[index] = value; return; }
      node.reset(node[index]);
    } else if (node.IsSequence() && !s.key.empty()) {
      // "policies.percache.tau_query": a list entry by its label (an entry without one is named
      // by its impl, as results name it).
      const std::size_t index = list_entry_by_name(node, s.key, assignment);
      if (last) { node[index] = value; return; }
      node.reset(node[index]);
    } else {
      if (node.IsScalar()) {
        // A profile given by name: `device: pixel7` + `-p experiment.device.storage.x=1`.
        YAML::Node expanded(YAML::NodeType::Map);
        expanded["base"] = node.Scalar();
        node = expanded;  // assigns through the handle into the parent
      }
      if (node.IsDefined() && !node.IsNull() && !node.IsMap())
        throw UsageError(fmt::format("override '{}': '{}' is not inside a mapping", assignment, s.key));
      if (last) { node[s.key] = value; return; }
      YAML::Node next = node[s.key];
      if (!next.IsDefined() || next.IsNull()) {
        node[s.key] = YAML::Node(YAML::NodeType::Map);
        next = node[s.key];
      }
      node.reset(next);
    }
  }
}

}  // namespace mobisim
