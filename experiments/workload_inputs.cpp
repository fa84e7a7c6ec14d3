#include "experiments/workload_inputs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string_view>

#include "devices/device.h"
#include "experiments/experiment.h"
#include "models/kernel/checkpoint.h"
#include "policies/specdec/kernel_requests.h"
#include "sim/atomic_file.h"
#include "sim/builtin_configs.h"
#include "traces/cag_requests.h"
#include "sim/error.h"
#include "traces/qmsum.h"
#include "traces/rag_trace_io.h"

namespace mobisim::experiments {

namespace fs = std::filesystem;

std::string shared_dir(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* e = std::getenv("MOBISIM_SHARED_DIR"); e && *e) return e;
  return source_root() + "/../shared";
}

std::string expand_shared(const std::string& path) {
  constexpr std::string_view kToken = "{shared}";
  if (path.compare(0, kToken.size(), kToken) != 0) return path;
  return shared_dir("") + path.substr(kToken.size());
}

void export_shared_flag(const std::string& flag) {
  if (flag.empty()) return;
  setenv("MOBISIM_SHARED_DIR", fs::absolute(flag).string().c_str(), 1);
}

ResolvedWorkload resolve_workload_config(const YAML::Node& node, const ConfigSource& source) {
  if (!node.IsScalar()) return {devices::expand_profile_bases(node, source, "workloads"), source.key_path, source};
  std::string text, origin;
  if (!find_config("workloads", node.Scalar(), text, origin))
    throw ConfigError(fmt::format("{}: no workload config '{}' (built-in: {}; or give a path to a YAML file)",
                                  source.where(node), node.Scalar(), fmt::join(builtin_names("workloads"), ", ")));
  const ConfigSource file{std::make_shared<const std::string>(origin), ""};
  return {devices::expand_profile_bases(load_yaml_string(text, origin), file, "workloads"), origin, file};
}

std::string workload_trace(const YAML::Node& root, const std::string& origin) {
  // A missing key yields an invalid node whose type may not be asked: test IsDefined() first.
  auto child = [](const YAML::Node& n, const char* key) {
    return n.IsDefined() && n.IsMap() && n[key].IsDefined() ? n[key] : YAML::Node();
  };
  const YAML::Node trace = child(child(root, "experiment"), "workload");
  const YAML::Node t = child(trace, "trace");
  if (!t.IsDefined() || !t.IsScalar()) return "";
  // Where the experiment will read it (sim/params.h resolve_input_path): against the file's folder.
  return resolve_input_path(t.Scalar(), ConfigSource{std::make_shared<std::string>(origin), "experiment.workload.trace"});
}

void ensure_qmsum_trace(const std::string& trace_path, const std::string& shared) {
  if (path_exists(trace_path)) return;
  const std::string dir = shared + "/data/qmsum";
  if (!is_dir(dir + "/val"))
    throw InputError(fmt::format(
        "{} is missing and cannot be imported: no QMSum data at {} (pass --shared DIR or set MOBISIM_SHARED_DIR to "
        "the folder holding data/qmsum/val)",
        trace_path, dir));
  traces::QmsumOptions o;
  o.dir = dir;
  o.split = "val";
  const std::string tok = shared + "/models/llama2-tokenizer.model";
  if (path_exists(tok)) o.tokenizer_path = tok;
  std::cout << fmt::format("importing QMSum val from {} -> {}\n", dir, trace_path);
  const auto t = traces::import_qmsum(o);
  create_dirs(fs::path(trace_path).parent_path().string());
  traces::write_rag_trace(trace_path, t);
}

namespace {

void check_example_tasks(const std::vector<std::string>& tasks) {
  std::vector<std::string> known;
  for (const auto& e : kExampleRequests) known.emplace_back(e.task);
  for (const auto& t : tasks)
    if (std::find(known.begin(), known.end(), t) == known.end())
      throw InputError(fmt::format("no example request task '{}' (the tasks: {})", t, fmt::join(known, ", ")));
}

}  // namespace

void ensure_example_requests(const std::string& dir, const std::string& shared, const std::vector<std::string>& tasks) {
  check_example_tasks(tasks);
  const std::string model_path = shared + "/models/stories260K.bin";
  for (const auto& e : kExampleRequests) {
    if (!tasks.empty() && std::find(tasks.begin(), tasks.end(), e.task) == tasks.end()) continue;
    const std::string out = fmt::format("{}/{}_stories260K.jsonl", dir, e.task);
    if (path_exists(out)) continue;
    if (!path_exists(model_path))
      throw InputError(fmt::format("{} is missing and cannot be made: no checkpoint at {} (pass --shared DIR or set "
                                   "MOBISIM_SHARED_DIR to the folder holding models/stories260K.bin)",
                                   out, model_path));
    policies::specdec::KernelRequestOptions o;
    o.task = e.task;
    o.users = kExampleRequestUsers;
    o.requests = kExampleRequestsPerUser;
    o.context_tokens = e.context_tokens;
    o.output_tokens = e.output_tokens;
    const auto model = kernel::load_model(model_path);
    create_dirs(dir);
    std::cout << fmt::format("making {} from {}\n", out, model_path);
    traces::write_cag_requests(
        out, policies::specdec::make_kernel_requests(model, o, fmt::format("kernel:stories260K.bin greedy, task {}", e.task)));
  }
}

}  // namespace mobisim::experiments
