// `mobisim run`, `mobisim validate` and `mobisim list`.
#include <algorithm>
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/experiment.h"
#include "experiments/sweep.h"
#include "models/model_spec.h"
#include "policies/rag/rag_policy.h"
#include "sim/cli.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "sim/rng.h"

namespace mobisim::experiments {
namespace {

cli::ArgParser run_parser(const std::string& usage, const std::string& doc) {
  cli::ArgParser a(usage, doc);
  a.positional("CONFIG", "experiment YAML file");
  a.repeated("set", "p", "KEY.PATH=VALUE", "override a config value, e.g. -p experiment.pipeline.system_prompt_tokens=128");
  a.option("output", "FILE.h5", "result file (overrides the config's output)");
  a.option("timeline", "FILE.json", "also write a Perfetto/Chrome-trace timeline (one process per simulated run)");
  a.option("timeline-filter", "SPEC",
           "keep only some runs / a time window in the timeline: policy=A|B,user=U,device=D,from_s=S,to_s=S");
  a.flag("dry-run", "print the fully resolved configuration (devices, models, defaults) and stop");
  a.option("threads", "N", "worker threads for independent simulations (results are identical for any N)", "1");
  a.flag("no-plot", "do not draw the plot");
  a.flag("quiet", "no progress or table output");
  return a;
}

// Splits "a,b,[1,2],{x: 1, y: 2}" at the commas outside brackets, braces and quotes.
std::vector<std::string> split_top_level(const std::string& text) {
  std::vector<std::string> parts(1);
  int depth = 0;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 0) {
      parts.emplace_back();
      continue;
    }
    parts.back().push_back(c);
  }
  return parts;
}

// `run CONFIG -m KEY=a,b -m KEY2=x,y`: the grid sweep of those values (Hydra's multirun), each
// run its own result file under results/multirun/<name>-<hash of the -m/-p arguments>/.
int multirun(const cli::ArgParser& a, const RunOptions& o) {
  sweep::Spec spec;
  spec.file = a.get("CONFIG");
  spec.base = spec.file;
  spec.fixed = o.overrides;
  std::string signature;
  for (const auto& m : a.all("multirun")) {
    const auto eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size())
      throw UsageError(fmt::format("-m '{}': expected KEY.PATH=VALUE,VALUE,... (e.g. -m experiment.device=pixel7,oneplus-12)", m));
    sweep::Axis axis;
    axis.keys = {m.substr(0, eq)};
    for (const auto& v : split_top_level(m.substr(eq + 1))) {
      if (v.empty()) throw UsageError(fmt::format("-m '{}': an empty value between commas", m));
      axis.values.push_back({v});
    }
    spec.axes.push_back(std::move(axis));
    signature.append(m).append("\n");
  }
  for (const auto& f : spec.fixed) signature.append("-p ").append(f).append("\n");
  spec.output = o.output_override.empty()
                    ? fmt::format("results/multirun/{}-{:08x}", std::filesystem::path(spec.file).stem().string(),
                                  sim::fnv1a64(signature) & 0xffffffffULL)
                    : o.output_override;
  sweep::Options so;
  so.threads = o.threads;
  so.in_process = true;  // one process: generated workloads are shared by the points
  so.quiet = o.quiet;
  so.dry_run = o.dry_run;
  so.resume = !o.force;  // points already run with the same configuration are kept
  return sweep::run_sweep(spec, so);
}

int cmd_run(const std::vector<std::string>& args) {
  auto a = run_parser("mobisim run CONFIG [-p key=value]... [-m key=a,b,c]... [--output FILE.h5] [--timeline FILE.json]",
                      "Runs an experiment: prints its summary table, writes an HDF5 result file, a CSV summary\n"
                      "and (unless --no-plot) a PNG plot next to it. With overrides (-p) and no --output, the result\n"
                      "goes to <output>-<config hash>.h5 so it never replaces the plain run's; an existing result file\n"
                      "is replaced only when it holds the same configuration (or with --force).\n"
                      "With -m, runs every combination of the listed values as a sweep (index.csv with one row per\n"
                      "point and policy; --output names its directory).");
  a.flag("force", "replace the result file even when it holds another configuration's results");
  a.repeated("multirun", "m", "KEY.PATH=A,B,C",
             "run once per value (several -m: every combination), as a sweep in results/multirun/ (see mobisim sweep)");
  if (!a.parse(args)) return kExitOk;
  RunOptions o;
  o.protect_results = true;
  o.force = a.flag_set("force");
  o.overrides = a.all("set");
  o.output_override = a.maybe("output").value_or("");
  o.timeline_override = a.maybe("timeline").value_or("");
  o.timeline_filter = a.maybe("timeline-filter").value_or("");
  o.dry_run = a.flag_set("dry-run");
  o.no_plot = a.flag_set("no-plot");
  o.quiet = a.flag_set("quiet");
  o.threads = static_cast<int>(a.get_int("threads"));
  if (o.threads < 1) throw UsageError("--threads must be >= 1");
  if (!a.all("multirun").empty()) {
    if (!o.timeline_override.empty()) throw UsageError("--timeline writes one run's timeline: not with -m");
    return multirun(a, o);
  }
  return run_experiment_file(a.get("CONFIG"), o);
}

int cmd_validate(const std::vector<std::string>& args) {
  auto a = run_parser("mobisim validate CONFIG [-p key=value]...",
                      "Checks an experiment file (keys, types, ranges, plug-in names, device and model\n"
                      "profiles) without running it.");
  if (!a.parse(args)) return kExitOk;
  RunOptions o;
  o.overrides = a.all("set");
  o.validate_only = true;
  return run_experiment_file(a.get("CONFIG"), o);
}

int cmd_config(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim config CONFIG [-p key=value]...",
                   "Prints the fully resolved configuration of an experiment: device and model profiles with every\n"
                   "field, every default filled in, overrides applied. This is the YAML stored in each result file\n"
                   "(attribute /config); running it again reproduces that file.");
  a.positional("CONFIG", "experiment YAML file");
  a.repeated("set", "p", "KEY.PATH=VALUE", "override a config value");
  if (!a.parse(args)) return kExitOk;
  RunOptions o;
  o.overrides = a.all("set");
  o.dry_run = true;
  return run_experiment_file(a.get("CONFIG"), o);
}

void list_device_schema() {
  std::cout << "\ndevice profile fields (configs/devices/*.yaml; 'base: NAME' inherits a profile, then overrides):\n";
  for (const auto& section : devices::device_profile_schema()) {
    std::cout << fmt::format("  {}: {}\n", section.path.empty() ? "(top level)" : section.path, section.doc);
    for (const auto& d : section.schema.defs()) {
      const std::string def = d.required() ? "required" : d.type == ParamType::kNode ? "section" : "default " + d.default_text();
      std::cout << fmt::format("      {:<26} {:<8} {:<10} {:<16} {}{}\n", d.name, to_string(d.type),
                               d.unit.empty() ? "-" : d.unit, def, d.doc,
                               d.zero_not_modelled ? " (0: not modelled, flagged in results)" : "");
    }
  }
}

void list_rag_pipeline_schema() {
  std::cout << "\nRAG pipeline fields (`pipeline:` of the rag_qa, percache_overhead and phone (rag app) experiments):\n";
  ParamSchema schema = policies::PipelineConfig::schema();
  for (const auto& d : schema.defs()) {
    const std::string def = d.required() ? "required" : "default " + d.default_text();
    std::cout << fmt::format("      {:<26} {:<8} {:<10} {:<16} {}{}\n", d.name, to_string(d.type),
                             d.unit.empty() ? "-" : d.unit, def, d.doc,
                             d.zero_not_modelled ? " (0: not modelled, flagged in results)" : "");
  }
}

void list_devices() {
  std::cout << "devices (configs/devices/, built in):\n";
  for (const auto& name : devices::builtin_device_names()) {
    auto d = devices::load_device_profile(name);
    std::vector<std::string> units;
    for (const auto& [u, spec] : d.compute) units.push_back(u);
    if (d.npu) units.push_back(fmt::format("npu {:.0f} TOPS", d.npu->peak_tops_int8));
    std::cout << fmt::format("  {:<24} {}\n  {:<24}   units: {}; DRAM {:.0f} GB @ {:.1f} GB/s; storage: {}\n", name,
                             d.description, "", fmt::join(units, ", "), d.dram.capacity_gb, d.dram.bandwidth_gbps,
                             d.storage ? d.storage->kind : std::string("none"));
  }
}

void list_engines() {
  std::cout << "\nengines (configs/engines/, built in; `engine:` beside `device:`, default mllm):\n";
  for (const auto& name : devices::builtin_engine_names()) {
    const auto e = devices::load_engine_profile(name);
    std::vector<std::string> units;
    for (const auto& [u, spec] : e.units) units.push_back(u);
    const auto& n = e.npu;
    if (n.max_utilization || n.half_utilization_chunk || n.exec_overhead_ms || n.graph_chunk ||
        n.decode_bandwidth_efficiency || n.mixed_precision_fraction)
      units.push_back("npu");
    if (e.storage.read_command_overhead_us || e.storage.load_ns_per_byte) units.push_back("storage");
    std::vector<std::string> inherits;
    for (const auto& [selector, reason] : e.inherit_device) inherits.push_back(selector);
    std::cout << fmt::format("  {:<12} {} [sets: {}; inherits from the device: {}]\n", name, e.description,
                             units.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(units, ", ")),
                             inherits.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(inherits, ", ")));
  }
  std::cout << "\nengine profile fields (every key optional; a value a run needs that the engine neither sets nor\n"
               "inherits by `inherit_device` is a configuration error naming it):\n";
  for (const auto& section : devices::engine_profile_schema()) {
    std::cout << fmt::format("  {}: {}\n", section.path.empty() ? "(top level)" : section.path, section.doc);
    for (const auto& d : section.schema.defs())
      std::cout << fmt::format("      {:<28} {:<8} {:<8} {}\n", d.name, to_string(d.type), d.unit.empty() ? "-" : d.unit, d.doc);
  }
}

void list_models() {
  std::cout << "\nmodels (configs/models/, built in):\n";
  const std::vector<std::string> names = models::builtin_model_names();
  std::size_t width = 4;  // "name"; the column fits the longest profile name
  for (const auto& name : names) width = std::max(width, name.size());
  std::cout << fmt::format("  {:<{}} {:>7} {:>6} {:>6} {:>9} {:>6} {:>7} {:<5} {:>8} {:>14}\n", "name", width, "params",
                           "layers", "hidden", "heads/kv", "head", "ffn", "kind", "vocab", "KV B/token fp16");
  for (const auto& name : names) {
    auto m = models::load_model_spec(name);
    std::cout << fmt::format("  {:<{}} {:>6.2f}B {:>6} {:>6} {:>5}/{:<3} {:>6} {:>7} {:<5} {:>8} {:>14.0f}\n", name, width,
                             m.total_params() / 1e9, m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.head_dim,
                             m.ffn_hidden, models::to_string(m.ffn), m.vocab, m.kv_bytes_per_token(models::DType::kF16));
  }
}

void list_plugins(bool verbose) {
  for (const auto& [kind, lister] : RegistryCatalog::instance().kinds()) {
    std::cout << fmt::format("\n{} plug-ins (impl: NAME):\n", kind);
    for (const auto& e : lister()) {
      std::cout << fmt::format("  {:<24} {}\n", e.name, e.doc);
      if (!verbose) continue;
      for (const auto& d : e.schema.defs()) {
        std::string def = d.required() ? "required" : "default " + d.default_text();
        std::cout << fmt::format("      {:<28} {:<10} {:<18} {}{}{}\n", d.name, to_string(d.type), def, d.doc,
                                 d.unit.empty() ? "" : " [" + d.unit + "]",
                                 d.zero_not_modelled ? " (0: not modelled, flagged in results)" : "");
      }
    }
  }
}

int cmd_list(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim list [devices|engines|models|plugins] [--brief]",
                   "Lists built-in device and model profiles and registered plug-ins with their parameters.");
  a.positional("WHAT", "devices, engines, models or plugins (default: all)", false);
  a.flag("brief", "plug-in names only, without parameters");
  if (!a.parse(args)) return kExitOk;
  const std::string what = a.maybe("WHAT").value_or("all");
  if (what != "all" && what != "devices" && what != "engines" && what != "models" && what != "plugins")
    throw UsageError(fmt::format("unknown list '{}': expected devices, engines, models or plugins", what));
  if (what == "all" || what == "devices") {
    list_devices();
    list_device_schema();
  }
  if (what == "all" || what == "engines") list_engines();
  if (what == "all" || what == "models") list_models();
  if (what == "all" || what == "plugins") {
    list_plugins(!a.flag_set("brief"));
    if (!a.flag_set("brief")) list_rag_pipeline_schema();
  }
  return kExitOk;
}

}  // namespace
}  // namespace mobisim::experiments

MOBISIM_REGISTER_COMMAND("run", "run an experiment YAML (HDF5 + CSV + PNG results)", "mobisim run CONFIG",
                         mobisim::experiments::cmd_run)
MOBISIM_REGISTER_COMMAND("validate", "check an experiment YAML without running it", "mobisim validate CONFIG",
                         mobisim::experiments::cmd_validate)
MOBISIM_REGISTER_COMMAND("config", "print the fully resolved configuration of an experiment YAML",
                         "mobisim config CONFIG", mobisim::experiments::cmd_config)
MOBISIM_REGISTER_COMMAND("list", "list devices, models and plug-ins with their parameters", "mobisim list",
                         mobisim::experiments::cmd_list)
