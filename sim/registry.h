#pragma once
// Plug-ins by name (as Ramulator 2.0 registers implementations behind interfaces).
//
// An interface declares `static constexpr const char* kRegistryKind = "rag_policy";`.
// An implementation provides `static ParamSchema schema();` and a constructor
// `Impl(const Params&)`, and registers itself in its own .cpp file:
//
//     MOBISIM_REGISTER(RagPolicy, NaivePolicy, "naive", "No caching: full RAG pipeline per query.");
//
// A YAML node `{impl: naive, ...}` then builds it through
// `Registry<RagPolicy>::instance().create(node, source)`, with the parameters
// validated against the schema (unknown keys are errors). Adding a policy
// touches one file pair and nothing else.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sim/error.h"
#include "sim/params.h"

namespace mobisim {

// Type-erased view of one registry, so `mobisim list` can enumerate all of them.
struct RegistryEntryInfo {
  std::string name;
  std::string doc;
  ParamSchema schema;
};

class RegistryCatalog {
 public:
  using Lister = std::function<std::vector<RegistryEntryInfo>()>;
  static RegistryCatalog& instance() {
    static RegistryCatalog catalog;
    return catalog;
  }
  void add_kind(const std::string& kind, Lister lister) { kinds_.emplace(kind, std::move(lister)); }
  const std::map<std::string, Lister>& kinds() const { return kinds_; }

 private:
  std::map<std::string, Lister> kinds_;
};

template <class Interface>
class Registry {
 public:
  using Factory = std::function<std::unique_ptr<Interface>(const Params&)>;
  struct Entry {
    std::string name;
    std::string doc;
    std::function<ParamSchema()> schema;
    Factory make;
  };

  static Registry& instance() {
    static Registry registry;
    return registry;
  }

  bool add(Entry entry) {
    if (entries_.empty()) {
      RegistryCatalog::instance().add_kind(Interface::kRegistryKind, [this] { return describe(); });
    }
    const std::string name = entry.name;
    if (!entries_.emplace(name, std::move(entry)).second)
      throw Error(fmt::format("{} '{}' is registered twice", Interface::kRegistryKind, name));
    return true;
  }

  bool contains(const std::string& name) const { return entries_.count(name) > 0; }

  const Entry& find(const std::string& name, const ConfigSource& where, const YAML::Node& at) const {
    auto it = entries_.find(name);
    if (it == entries_.end())
      throw ConfigError(fmt::format("{}: unknown {} '{}' (known: {})", where.where(at), Interface::kRegistryKind,
                                    name, fmt::join(names(), ", ")));
    return it->second;
  }

  // Builds the implementation named by `node.impl` (or `default_impl` when absent).
  std::unique_ptr<Interface> create(const YAML::Node& node, const ConfigSource& source,
                                    const std::string& default_impl = "") const {
    std::string impl = default_impl;
    if (node.IsMap() && node["impl"].IsDefined()) {
      if (!node["impl"].IsScalar())
        throw ConfigError(fmt::format("{}: 'impl' must be a name", source.child("impl").where(node["impl"])));
      impl = node["impl"].Scalar();
    } else if (node.IsScalar()) {
      impl = node.Scalar();  // shorthand: `policy: naive`
    }
    if (impl.empty())
      throw ConfigError(fmt::format("{}: missing 'impl' (a {}; known: {})", source.where(node),
                                    Interface::kRegistryKind, fmt::join(names(), ", ")));
    const Entry& e = find(impl, source.child("impl"), node.IsMap() ? node["impl"] : node);
    ParamSchema schema = e.schema();
    Params params(node.IsMap() ? node : YAML::Node(), schema, source);
    auto obj = e.make(params);
    return obj;
  }

  // The parameters of `node` with every default filled in (and `impl`), as stored with results.
  YAML::Node resolve(const YAML::Node& node, const ConfigSource& source, const std::string& default_impl = "") const {
    std::string impl = default_impl;
    if (node.IsMap() && node["impl"].IsDefined() && node["impl"].IsScalar()) impl = node["impl"].Scalar();
    if (node.IsScalar()) impl = node.Scalar();
    const Entry& e = find(impl, source.child("impl"), node.IsMap() ? node["impl"] : node);
    ParamSchema schema = e.schema();
    YAML::Node out = Params(node.IsMap() ? node : YAML::Node(), schema, source).resolved();
    out["impl"] = impl;
    return out;
  }

  // Validates without building (used by `mobisim validate`).
  void validate(const YAML::Node& node, const ConfigSource& source) const { (void)create(node, source); }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, e] : entries_) out.push_back(name);
    return out;
  }

  std::vector<RegistryEntryInfo> describe() const {
    std::vector<RegistryEntryInfo> out;
    for (const auto& [name, e] : entries_) out.push_back({name, e.doc, e.schema()});
    return out;
  }

 private:
  std::map<std::string, Entry> entries_;  // ordered: listing and error messages are deterministic
};

#define MOBISIM_CONCAT_INNER(a, b) a##b
#define MOBISIM_CONCAT(a, b) MOBISIM_CONCAT_INNER(a, b)

// Registers `Impl` (constructor Impl(const Params&), static ParamSchema schema()) under `name`.
#define MOBISIM_REGISTER(Interface, Impl, name, doc)                                                   \
  namespace {                                                                                          \
  [[maybe_unused]] const bool MOBISIM_CONCAT(mobisim_registered_, __COUNTER__) =                          \
      ::mobisim::Registry<Interface>::instance().add(                                                  \
          {name, doc, [] { return Impl::schema(); },                                                   \
           [](const ::mobisim::Params& p) -> std::unique_ptr<Interface> { return std::make_unique<Impl>(p); }}); \
  }

}  // namespace mobisim
