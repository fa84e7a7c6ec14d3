// `mobisim stages CONFIG`: every policy of a rag_qa experiment as the `pipeline` app stages it
// becomes (policies/apps/rag_policy_stages.h), so a researcher can see the translation.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "experiments/experiment.h"
#include "policies/apps/rag_policy_stages.h"
#include "sim/cli.h"
#include "sim/error.h"
#include "sim/params.h"

namespace mobisim::experiments {
namespace {

int cmd_stages(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim stages CONFIG",
                   "Prints, for every policy of a rag_qa experiment (e.g. experiments/percache/fig14.yaml), the\n"
                   "`pipeline` app stages it is made of: answer_cache, kv_reuse, prefill, decode, idle and the fixed\n"
                   "costs, each policy parameter in the stage that owns it (without the model and workload, which\n"
                   "are the experiment's). A parameter or policy with no stage counterpart is a configuration error.");
  a.positional("CONFIG", "rag_qa experiment YAML file");
  if (!a.parse(args)) return kExitOk;
  const std::string path = a.get("CONFIG");
  const YAML::Node file = load_yaml_file(path);
  const ConfigSource source{std::make_shared<const std::string>(path), ""};
  const policies::RagQaPolicies all = policies::rag_qa_policies(file, source);
  // Every policy that translates is printed; each one that does not is reported (exit code 3).
  std::vector<std::string> errors;
  for (const auto& [entry, where] : all.entries) {
    try {
      const policies::PolicyStages p = policies::pipeline_stages_for(entry, where, all.pipeline);
      YAML::Emitter out;
      YAML::Node doc(YAML::NodeType::Map);
      doc[p.label] = p.app;
      out << doc;
      std::cout << out.c_str() << "\n";
    } catch (const ConfigError& e) {
      errors.push_back(e.what());
    }
  }
  for (const auto& e : errors) std::cerr << "mobisim stages: error: " << e << "\n";
  return errors.empty() ? kExitOk : kExitConfig;
}

}  // namespace
}  // namespace mobisim::experiments

MOBISIM_REGISTER_COMMAND("stages", "print a rag_qa experiment's policies as pipeline app stages",
                         "mobisim stages CONFIG", mobisim::experiments::cmd_stages)
