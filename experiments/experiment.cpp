#include "experiments/experiment.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>
#include <variant>

#include "sim/atomic_file.h"
#include "sim/build_id.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "sim/rng.h"
#include "sim/version.h"

#include <unistd.h>

#ifndef MOBISIM_SOURCE_DIR_DEFAULT
#define MOBISIM_SOURCE_DIR_DEFAULT ""
#endif

namespace mobisim::experiments {

Results::Variant& Results::variant(const std::string& name) {
  for (auto& v : variants_)
    if (v->name == name) return *v;
  variants_.push_back(std::make_unique<Variant>());
  variants_.back()->name = name;
  return *variants_.back();
}

void RunContext::progress(const std::string& message) const {
  if (!quiet) std::cerr << "[" << name << "] " << message << "\n";
}

sim::TimelineProcess* RunContext::timeline_process(const std::string& process_name,
                                                   const std::map<std::string, std::string>& labels) {
  return timeline ? timeline->process(process_name, labels) : nullptr;
}

std::string source_root() {
  if (const char* home = std::getenv("MOBISIM_HOME")) return home;
  return MOBISIM_SOURCE_DIR_DEFAULT;
}

static ParamSchema run_schema() {
  ParamSchema s;
  s.text("name", std::string(""), "run name (default: the config file's stem)");
  s.text("description", std::string(""), "what this experiment shows");
  s.integer("seed", 1, "master seed of every random stream").non_negative();
  s.integer("run", 0, "run number (independent replication with the same seed)").non_negative();
  s.text("output", std::string(""), "HDF5 result path (default: results/<name>.h5)");
  s.text("timeline", std::string(""), "write a Chrome-trace/Perfetto JSON timeline to this path");
  s.text("plot", std::string(""), "plot script under plots/ (default: the experiment's own; 'none' to skip)");
  s.node("experiment", "the experiment driver: {impl: NAME, ...its parameters}");
  return s;
}

std::string format_table(const h5::Table& t, std::size_t max_rows) {
  std::vector<std::vector<std::string>> cells(t.rows() + 1);
  for (const auto& n : t.names()) cells[0].push_back(n);
  for (std::size_t r = 0; r < t.rows() && r < max_rows; ++r) {
    for (const auto& n : t.names()) {
      std::visit(
          [&](const auto& c) {
            using V = std::decay_t<decltype(c[0])>;
            if constexpr (std::is_same_v<V, std::string>)
              cells[r + 1].push_back(c[r]);
            else if constexpr (std::is_same_v<V, double>)
              cells[r + 1].push_back(fmt::format("{:.4g}", c[r]));
            else
              cells[r + 1].push_back(fmt::format("{}", c[r]));
          },
          t.column(n));
    }
  }
  cells.resize(std::min(cells.size(), max_rows + 1));
  std::vector<std::size_t> width(t.names().size(), 0);
  for (const auto& row : cells)
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  std::string out;
  for (std::size_t r = 0; r < cells.size(); ++r) {
    for (std::size_t i = 0; i < cells[r].size(); ++i)
      out += fmt::format("{:>{}}{}", cells[r][i], width[i], i + 1 < cells[r].size() ? "  " : "\n");
    if (r == 0) {
      std::size_t total = 0;
      for (auto w : width) total += w + 2;
      out += std::string(total > 2 ? total - 2 : 0, '-') + "\n";
    }
  }
  if (t.rows() > max_rows) out += fmt::format("... ({} rows)\n", t.rows());
  return out;
}

std::string config_hash(const std::string& version, const std::string& resolved_yaml) {
  return fmt::format("{:016x}", sim::fnv1a64(version + "\n" + resolved_yaml));
}

namespace {

// Scalars of a YAML tree by dotted path (sequence entries by index), in document order.
void flatten_yaml(const YAML::Node& n, const std::string& path, std::vector<std::pair<std::string, std::string>>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) flatten_yaml(kv.second, path.empty() ? kv.first.Scalar() : path + "." + kv.first.Scalar(), out);
  } else if (n.IsSequence()) {
    for (std::size_t i = 0; i < n.size(); ++i) flatten_yaml(n[i], path + "." + std::to_string(i), out);
  } else {
    out.emplace_back(path, n.IsScalar() ? n.Scalar() : std::string("null"));
  }
}

}  // namespace

std::vector<std::string> config_differences(const YAML::Node& before, const YAML::Node& after, std::size_t max) {
  std::vector<std::pair<std::string, std::string>> a, b;
  flatten_yaml(before, "", a);
  flatten_yaml(after, "", b);
  const std::map<std::string, std::string> old_values(a.begin(), a.end());
  const std::map<std::string, std::string> new_values(b.begin(), b.end());
  std::vector<std::string> diffs;
  auto note = [&](const std::string& key, const std::string& x, const std::string& y) {
    if (diffs.size() < max) diffs.push_back(fmt::format("{}: {} -> {}", key, x, y));
  };
  for (const auto& [key, value] : b) {
    const auto it = old_values.find(key);
    if (it == old_values.end())
      note(key, "(absent)", value);
    else if (it->second != value)
      note(key, it->second, value);
  }
  for (const auto& [key, value] : a)
    if (!new_values.count(key)) note(key, value, "(absent)");
  return diffs;
}

std::string write_results(const RunContext& ctx) {
  h5::Writer w(ctx.output);
  {  // every HDF5 handle must be closed before commit() so the file is really closed
  H5::Group root = w.root();
  h5::write_attr(root, "mobisim_version", kVersion);
  h5::write_attr(root, "mobisim_build", build_id());
  h5::write_attr(root, "format", "mobisim-results/1");
  h5::write_attr(root, "name", ctx.name);
  h5::write_attr(root, "seed", static_cast<std::int64_t>(ctx.seed));
  h5::write_attr(root, "run", static_cast<std::int64_t>(ctx.run));
  h5::write_attr(root, "config", yaml_to_string(ctx.resolved));
  // Where it came from: the experiment file as named on the command line and the overrides.
  h5::write_attr(root, "config_file", ctx.config_path);
  h5::write_attr(root, "overrides", ctx.overrides);
  // Costs this run took as 0 because they are not modelled (ParamDef::zero_means_not_modelled).
  h5::write_attr(root, "not_modelled", ctx.not_modelled->keys());
  // Device-profile values the engine inherits by name (its `inherit_device`), not values of its own.
  h5::write_attr(root, "inherited_from_device", ctx.inherited->keys());
  // Values engines derived from the SoC's description: the CPU kernels' ISA path, threads and peak.
  h5::write_attr(root, "derived_from_soc", ctx.derived_from_soc->keys());
  if (ctx.resolved["experiment"]["impl"])
    h5::write_attr(root, "experiment", ctx.resolved["experiment"]["impl"].as<std::string>());
  ctx.results.summary.write(root, "summary");
  H5::Group runs = w.group("runs");
  std::vector<std::string> order;
  for (const auto& v : ctx.results.variants()) {
    H5::Group g = h5::make_group(runs, v->name);
    if (v->spooled_records)
      v->spooled_records->write(g, "records");
    else
      v->records.write(g, "records");
    v->stats.write(g);
    order.push_back(v->name);
  }
  h5::write_attr(runs, "order", order);
  if (!ctx.results.tables.empty()) {
    H5::Group tg = w.group("tables");
    for (const auto& [name, t] : ctx.results.tables) t.write(tg, name);
  }
  }
  w.commit();
  std::string csv = ctx.output;
  if (csv.ends_with(".h5")) csv.resize(csv.size() - 3);
  csv += "_summary.csv";
  write_file_atomic(csv, ctx.results.summary.to_csv());
  return csv;
}

namespace {

std::string python_command() {
  const char* py = std::getenv("MOBISIM_PYTHON");
  // Debian installs matplotlib/h5py for /usr/bin/python3; another python3 on PATH may lack them.
  return py ? py : (path_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3");
}

std::string shell_quote(const std::string& s) {
  std::string q(1, '\'');
  for (char c : s) {
    if (c == '\'')
      q.append("'\\''");
    else
      q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

}  // namespace

bool run_plots(const std::vector<PlotJob>& jobs, int processes, std::string& error) {
  if (jobs.empty()) return true;
  const std::string batch = source_root() + "/plots/batch.py";
  if (!path_exists(batch)) {
    error = fmt::format("plot script {} not found (set MOBISIM_HOME to the mobisim source tree)", batch);
    return false;
  }
  // Round-robin shares, one job list per process (script and arguments, tab-separated).
  const std::size_t n = std::min<std::size_t>(jobs.size(), static_cast<std::size_t>(std::max(1, processes)));
  std::vector<std::string> lists(n);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const PlotJob& j = jobs[i];
    std::string line = source_root() + "/plots/" + j.script;
    for (const auto& f : std::vector<std::string>{j.h5_path, j.png_path}) line.append("\t").append(f);
    for (const auto& e : j.extra) line.append("\t").append(e);
    lists[i % n].append(line).append("\n");
  }
  const auto dir = std::filesystem::temp_directory_path();
  std::vector<std::string> paths(n), commands(n);
  std::vector<int> codes(n, 0);
  for (std::size_t k = 0; k < n; ++k) {
    paths[k] = (dir / fmt::format("mobisim-plots-{}-{}.tsv", ::getpid(), k)).string();
    write_file_atomic(paths[k], lists[k]);
    commands[k] = fmt::format("{} {} {}", shell_quote(python_command()), shell_quote(batch), shell_quote(paths[k]));
  }
  std::vector<std::thread> pool;
  for (std::size_t k = 0; k < n; ++k) pool.emplace_back([&, k] { codes[k] = std::system(commands[k].c_str()); });
  for (auto& t : pool) t.join();
  std::vector<std::string> failed;
  for (std::size_t k = 0; k < n; ++k) {
    std::filesystem::remove(paths[k]);
    if (codes[k] != 0) failed.push_back(commands[k]);
  }
  if (failed.empty()) return true;
  error = fmt::format("some plots failed (see the messages above): {}", fmt::join(failed, "; "));
  return false;
}

bool run_plot(const std::string& script, const std::string& h5_path, const std::string& png_path, std::string& error,
              const std::vector<std::string>& extra) {
  const std::string script_path = source_root() + "/plots/" + script;
  if (!path_exists(script_path)) {
    error = fmt::format("plot script {} not found (set MOBISIM_HOME to the mobisim source tree)", script_path);
    return false;
  }
  const std::string python = python_command();
  const auto quote = shell_quote;
  std::string cmd = fmt::format("{} {} {} {}", quote(python), quote(script_path), quote(h5_path), quote(png_path));
  for (const auto& e : extra) cmd.append(1, ' ').append(quote(e));
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    error = fmt::format("plot command failed (exit {}): {}", rc, cmd);
    return false;
  }
  return true;
}

namespace {

// An experiment file loaded, overridden, checked and resolved, ready to run.
struct LoadedExperiment {
  std::unique_ptr<Experiment> experiment;
  std::string impl;
  std::string plot;
};

std::string with_stem_suffix(const std::string& path, const std::string& suffix) {
  const std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + suffix + p.extension().string())).string();
}

bool overrides_name_output(const std::vector<std::string>& overrides) {
  return std::any_of(overrides.begin(), overrides.end(), [](const std::string& o) { return o.starts_with("output="); });
}

// A run with overrides writes next to the plain run, not over it: <stem>-<config hash>.h5 (and
// the same suffix on a timeline the YAML names), unless the command line names the file.
void give_overridden_run_its_own_files(const RunOptions& options, RunContext& ctx) {
  if (options.overrides.empty() || !options.output_override.empty() || overrides_name_output(options.overrides))
    return;
  const std::string suffix = fmt::format("-{:08x}", sim::fnv1a64(yaml_to_string(ctx.resolved)) & 0xffffffffULL);
  ctx.output = with_stem_suffix(ctx.output, suffix);
  if (options.timeline_override.empty() && !ctx.timeline_path.empty())
    ctx.timeline_path = with_stem_suffix(ctx.timeline_path, suffix);
}

LoadedExperiment load_experiment(YAML::Node root, const std::string& origin, const RunOptions& options,
                                 RunContext& ctx) {
  auto overrides = std::make_shared<const std::vector<std::string>>(options.overrides);
  for (const auto& o : options.overrides) apply_override(root, o);
  ConfigSource src{std::make_shared<std::string>(origin), "", overrides, ctx.not_modelled, ctx.inherited,
                   ctx.derived_from_soc};
  ParamSchema schema = run_schema();
  Params p(root, schema, src, {});
  YAML::Node exp_node = p.node("experiment");
  if (!exp_node.IsDefined() || exp_node.IsNull())
    throw ConfigError(fmt::format("{}: missing required key 'experiment' (a driver: {})", src.where(root),
                                  fmt::join(Registry<Experiment>::instance().names(), ", ")));
  LoadedExperiment loaded;
  loaded.experiment = Registry<Experiment>::instance().create(exp_node, src.child("experiment"));
  loaded.impl = exp_node.IsMap() && exp_node["impl"] ? exp_node["impl"].as<std::string>() : exp_node.as<std::string>();
  loaded.plot = p.text("plot");

  ctx.config_path = origin;
  ctx.name = p.text("name");
  if (ctx.name.empty()) ctx.name = std::filesystem::path(origin).stem().string();
  ctx.seed = static_cast<std::uint64_t>(p.integer("seed"));
  ctx.run = static_cast<std::uint64_t>(p.integer("run"));
  ctx.output = options.output_override.empty() ? p.text("output") : options.output_override;
  if (ctx.output.empty()) ctx.output = "results/" + ctx.name + ".h5";
  ctx.timeline_path = options.timeline_override.empty() ? p.text("timeline") : options.timeline_override;
  if (!options.timeline_filter.empty() && ctx.timeline_path.empty())
    throw UsageError("--timeline-filter needs a timeline (--timeline FILE.json)");
  if (!ctx.timeline_path.empty())
    ctx.timeline = std::make_unique<sim::Timeline>(sim::TimelineFilter::parse(options.timeline_filter, timeline_labels()));
  ctx.quiet = options.quiet;
  ctx.threads = std::max(1, options.threads);  // timelines are per run: any thread count is safe
  ctx.workloads = options.workloads;

  // The resolved configuration: what was simulated, every default filled in. Where the results
  // go (output, timeline) is not part of it, so the stored YAML reruns to an identical file.
  YAML::Node resolved = p.resolved();
  resolved["name"] = ctx.name;
  resolved["output"] = "";
  resolved["timeline"] = "";
  resolved["experiment"] =
      loaded.experiment->resolved_config(Registry<Experiment>::instance().resolve(exp_node, src.child("experiment")));
  // Normalised through text, so a rerun of the stored YAML stores exactly the same text.
  ctx.resolved = YAML::Load(yaml_to_string(resolved));
  ctx.overrides = options.overrides;
  if (options.protect_results) give_overridden_run_its_own_files(options, ctx);
  if (ctx.timeline)
    ctx.timeline->set_metadata({{"mobisim_version", kVersion},
                                {"config_file", origin},
                                {"overrides", fmt::format("{}", fmt::join(options.overrides, " "))},
                                {"name", ctx.name},
                                {"results", ctx.output}});
  return loaded;
}

// Refuses to replace a result file that holds another configuration's results (see
// RunOptions::protect_results), naming the keys that differ.
void guard_existing_result(const RunContext& ctx, const RunOptions& options) {
  if (!options.protect_results || options.force || !path_exists(ctx.output)) return;
  const std::string how = "pass --force to replace it or --output FILE.h5 to write elsewhere";
  std::string stored;
  try {
    stored = h5::Reader(ctx.output).attr_string("/", "config");
  } catch (const Error& e) {
    throw UsageError(fmt::format("{} exists and is not a readable mobisim result ({}); {}", ctx.output, e.what(), how));
  }
  const std::string current = yaml_to_string(ctx.resolved);
  if (stored == current) return;
  std::vector<std::string> diffs;
  try {
    diffs = config_differences(YAML::Load(stored), ctx.resolved);
  } catch (const YAML::Exception&) {
    diffs = {"its stored configuration is not YAML"};
  }
  if (diffs.empty()) diffs = {"the same values, written differently"};
  throw UsageError(fmt::format("{} holds the results of another configuration ({}); {}", ctx.output,
                               fmt::join(diffs, "; "), how));
}

}  // namespace

YAML::Node resolve_experiment_config(YAML::Node root, const std::string& origin, const RunOptions& options) {
  RunContext ctx;
  load_experiment(std::move(root), origin, options, ctx);
  return ctx.resolved;
}

int run_experiment(YAML::Node root, const std::string& origin, const RunOptions& options) {
  RunContext ctx;
  LoadedExperiment loaded = load_experiment(std::move(root), origin, options, ctx);
  if (options.dry_run) {
    std::cout << "# resolved configuration of " << origin << " (mobisim " << kVersion << ")\n"
              << yaml_to_string(ctx.resolved) << "\n";
    return kExitOk;
  }
  // Workloads and inputs are checked by validate too: "ok" means the run will not fail on them.
  ctx.quiet = ctx.quiet || options.validate_only;
  loaded.experiment->prepare(ctx);
  if (options.validate_only) {
    std::cout << fmt::format("{}: ok (experiment '{}')\n", origin, loaded.impl);
    return kExitOk;
  }

  guard_existing_result(ctx, options);
  loaded.experiment->run(ctx);
  if (ctx.timeline) ctx.timeline->check_filter_matched();
  const std::string csv = write_results(ctx);
  if (ctx.timeline) ctx.timeline->write(ctx.timeline_path);
  if (!ctx.quiet) {
    std::cout << format_table(ctx.results.summary);
    if (const auto keys = ctx.not_modelled->keys(); !keys.empty())
      std::cout << fmt::format("note: not modelled (taken as 0 s): {} (`mobisim list` shows each; set them to model "
                               "those costs)\n", fmt::join(keys, ", "));
    std::cout << fmt::format("results: {} (summary CSV: {})\n", ctx.output, csv);
    if (ctx.timeline)
      std::cout << fmt::format("timeline: {} ({} runs, {} spans)\n", ctx.timeline_path, ctx.timeline->processes(),
                               ctx.timeline->size());
  }
  std::string plot = loaded.plot;
  if (plot.empty()) plot = loaded.experiment->default_plot();
  if (!options.no_plot && !plot.empty() && plot != "none") {
    std::string png = ctx.output;
    if (png.ends_with(".h5")) png.resize(png.size() - 3);
    png += ".png";
    if (options.deferred_plots) {
      options.deferred_plots->push_back({plot, ctx.output, png, {}});
      return kExitOk;
    }
    std::string error;
    if (run_plot(plot, ctx.output, png, error)) {
      if (!ctx.quiet) std::cout << fmt::format("plot: {}\n", png);
    } else {
      std::cerr << "warning: " << error << "\n";
    }
  }
  return kExitOk;
}

int run_experiment_file(const std::string& path, const RunOptions& options) {
  return run_experiment(load_yaml_file(path), path, options);
}

}  // namespace mobisim::experiments
