#pragma once
// A labelled list of plug-ins in an experiment's YAML, the way every driver compares variants:
//
//   policies:
//     - impl: percache                 # the registered name
//       label: "tau=0.9"               # optional: names the variant (default: the impl name)
//       tau_query: 0.9                 # the plug-in's own parameters
//
// Each entry is validated against its schema before any simulation, and labels must be unique
// (they name result groups). resolved() gives the list with every default filled in, as stored
// in the result file's resolved configuration.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "sim/error.h"
#include "sim/params.h"
#include "sim/registry.h"

namespace mobisim::experiments {

template <class Interface>
struct LabelledPlugin {
  std::string label;
  YAML::Node node;  // the entry without its label
  ConfigSource source;
};

template <class Interface>
std::vector<LabelledPlugin<Interface>> parse_labelled_plugins(const Params& p, const std::string& key) {
  const YAML::Node list = p.node(key);
  if (!list.IsSequence() || list.size() == 0)
    p.fail(key, fmt::format("expected a non-empty list [{{impl: NAME, label: TEXT, ...}}] of {} (known: {})",
                            Interface::kRegistryKind, fmt::join(Registry<Interface>::instance().names(), ", ")));
  std::vector<LabelledPlugin<Interface>> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    YAML::Node node = yaml_clone(list[i]);
    const ConfigSource src = p.source_of(key).element(i);
    std::string label;
    if (node.IsMap() && node["label"]) {
      if (!node["label"].IsScalar())
        throw ConfigError(fmt::format("{}: 'label' must be a text", src.child("label").where(list[i]["label"])));
      label = node["label"].Scalar();
      node.remove("label");
    }
    Registry<Interface>::instance().validate(node, src);  // fail before any simulation
    if (label.empty()) label = node.IsMap() ? node["impl"].Scalar() : node.Scalar();
    for (const auto& e : out)
      if (e.label == label)
        throw ConfigError(fmt::format("{}: duplicate label '{}' (add label: to tell them apart)", src.where(list[i]),
                                      label));
    out.push_back({label, node, src});
  }
  return out;
}

template <class Interface>
YAML::Node resolved_plugins(const std::vector<LabelledPlugin<Interface>>& plugins) {
  YAML::Node list(YAML::NodeType::Sequence);
  for (const auto& e : plugins) {
    YAML::Node r = Registry<Interface>::instance().resolve(e.node, e.source);
    r["label"] = e.label;
    list.push_back(r);
  }
  return list;
}

}  // namespace mobisim::experiments
