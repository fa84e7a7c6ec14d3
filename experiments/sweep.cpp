#include "experiments/sweep.h"

#include <fmt/format.h>
#include <gsl/gsl_cdf.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <set>

#include "experiments/child_process.h"
#include "experiments/experiment.h"
#include "experiments/workload_cache.h"
#include "sim/atomic_file.h"
#include "sim/build_id.h"
#include "sim/error.h"
#include "sim/params.h"
#include "sim/rng.h"
#include "sim/version.h"


namespace mobisim::experiments::sweep {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// The sweep file
// ---------------------------------------------------------------------------
namespace {

ParamSchema sweep_schema() {
  ParamSchema s;
  s.text("base", std::nullopt, "the experiment YAML every run starts from");
  s.text("description", std::string(""), "what this sweep shows");
  s.node("grid", "{key.path: [values...]}: the cartesian product of these (first key varies slowest)");
  s.node("zip", "{key.path: [values...]}: keys that vary together (equal lengths), one more axis");
  s.int_list("seeds", std::vector<std::int64_t>{}, "replications: every point runs at each seed (empty: the base's seed)")
      .non_negative();
  s.node("set", "{key.path: value}: overrides applied to every run");
  s.text("output", std::string(""), "directory of the sweep's files (default results/sweeps/<file stem>/)");
  s.node("search", "bisect one numeric parameter per variant instead of a grid (see SearchSpec)");
  return s;
}

ParamSchema search_schema() {
  ParamSchema s;
  s.text("parameter", std::nullopt, "the key path to vary (numeric)");
  s.text("metric", std::nullopt, "the summary column to hold to the target (e.g. mean_latency_s)");
  s.real("below", 0.0, "the metric must be below this").optional();
  s.real("above", 0.0, "the metric must be above this").optional();
  s.real("lo", std::nullopt, "lower end of the interval searched");
  s.real("hi", std::nullopt, "upper end of the interval searched");
  s.real("tolerance", 0.0, "stop when the bracket is this narrow (0: 1/1000 of hi - lo)").non_negative();
  s.boolean("integer", false, "probe integer values only");
  s.text("find", std::string("largest"), "the largest or the smallest value meeting the target").in({"largest", "smallest"});
  s.integer("max_probes", 20, "probes per variant at most").range(2, 200);
  return s;
}

std::string flow(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

// Keys of a {key: [values]} mapping in file order, each with its values as text.
std::vector<std::pair<std::string, std::vector<std::string>>> keyed_lists(const Params& p, const std::string& name) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  const YAML::Node n = p.node(name);
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsMap()) p.fail(name, "expected a mapping {key.path: [values...]}");
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    const ConfigSource at = p.source_of(name).child(key);
    if (!kv.second.IsSequence() || kv.second.size() == 0)
      throw ConfigError(fmt::format("{}: expected a non-empty list of values", at.where(kv.second)));
    std::vector<std::string> values;
    for (const auto& v : kv.second) values.push_back(flow(v));
    for (const auto& [k, _] : out)
      if (k == key) throw ConfigError(fmt::format("{}: key given twice", at.where(kv.first)));
    out.emplace_back(key, std::move(values));
  }
  return out;
}

std::string find_base(const std::string& base, const std::string& sweep_file) {
  if (path_exists(base)) return base;
  const fs::path beside = fs::path(sweep_file).parent_path() / base;
  if (path_exists(beside.string())) return beside.string();
  const fs::path in_source = fs::path(source_root()) / base;
  if (path_exists(in_source.string())) return in_source.string();
  return base;
}

}  // namespace

Spec Spec::load(const std::string& path, const std::vector<std::string>& cli_overrides) {
  const YAML::Node root = load_yaml_file(path);
  const ConfigSource src{std::make_shared<std::string>(path), ""};
  if (!root.IsMap() || !root["sweep"])
    throw ConfigError(fmt::format("{}: expected a top-level 'sweep:' mapping (base, grid, zip, seeds, output)",
                                  src.where(root)));
  for (const auto& kv : root)
    if (kv.first.as<std::string>() != "sweep")
      throw ConfigError(fmt::format("{}: unknown key '{}' (expected: sweep)", src.child(kv.first.as<std::string>()).where(kv.first),
                                    kv.first.as<std::string>()));
  ParamSchema schema = sweep_schema();
  const Params p(root["sweep"], schema, src.child("sweep"), {});
  Spec s;
  s.file = path;
  s.base = find_base(p.text("base"), path);
  if (!path_exists(s.base)) p.fail("base", fmt::format("experiment file '{}' not found", p.text("base")));
  for (const auto& [key, values] : keyed_lists(p, "grid")) {
    Axis axis;
    axis.keys.push_back(key);
    for (const auto& v : values) axis.values.push_back({v});
    s.axes.push_back(std::move(axis));
  }
  const auto zipped = keyed_lists(p, "zip");
  if (!zipped.empty()) {
    Axis zip;
    const std::size_t n = zipped.front().second.size();
    for (const auto& [key, values] : zipped) {
      if (values.size() != n)
        p.fail("zip", fmt::format("'{}' has {} values but '{}' has {}: zipped keys need equal lengths", key,
                                  values.size(), zipped.front().first, n));
      zip.keys.push_back(key);
    }
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<std::string> row;
      for (const auto& kv : zipped) row.push_back(kv.second[i]);
      zip.values.push_back(std::move(row));
    }
    s.axes.push_back(std::move(zip));
  }
  std::set<std::string> seen;
  for (const auto& a : s.axes)
    for (const auto& k : a.keys)
      if (!seen.insert(k).second) p.fail("zip", fmt::format("'{}' is both in grid and in zip", k));
  for (auto v : p.int_list("seeds")) s.seeds.push_back(static_cast<std::uint64_t>(v));
  if (std::set<std::uint64_t>(s.seeds.begin(), s.seeds.end()).size() != s.seeds.size())
    p.fail("seeds", "a seed is listed twice");
  if (const YAML::Node set = p.node("set"); set.IsDefined() && !set.IsNull()) {
    if (!set.IsMap()) p.fail("set", "expected a mapping {key.path: value}");
    for (const auto& kv : set) s.fixed.push_back(kv.first.as<std::string>() + "=" + flow(kv.second));
  }
  for (const auto& o : cli_overrides) s.fixed.push_back(o);
  s.output = p.text("output");
  if (s.output.empty()) s.output = "results/sweeps/" + fs::path(path).stem().string();
  if (const YAML::Node sn = p.node("search"); sn.IsDefined() && !sn.IsNull()) {
    if (!s.axes.empty()) p.fail("search", "a search sweep varies one parameter: remove grid and zip");
    ParamSchema ss = search_schema();
    const Params sp(sn, ss, p.source_of("search"), {});
    SearchSpec q;
    q.parameter = sp.text("parameter");
    q.metric = sp.text("metric");
    if (sp.has("below") == sp.has("above")) sp.fail("below", "give exactly one of 'below: TARGET' or 'above: TARGET'");
    q.below = sp.has("below");
    q.target = q.below ? sp.real("below") : sp.real("above");
    q.lo = sp.real("lo");
    q.hi = sp.real("hi");
    if (!(q.lo < q.hi)) sp.fail("hi", fmt::format("hi ({}) must be above lo ({})", q.hi, q.lo));
    q.tolerance = sp.real("tolerance");
    if (q.tolerance == 0) q.tolerance = (q.hi - q.lo) / 1000.0;
    q.integer = sp.boolean("integer");
    if (q.integer) q.tolerance = std::max(q.tolerance, 1.0);
    q.max_probes = static_cast<int>(sp.integer("max_probes"));
    q.find_smallest = sp.text("find") == "smallest";
    s.search = q;
  }
  return s;
}

std::vector<std::string> Spec::parameter_keys() const {
  std::vector<std::string> keys;
  for (const auto& a : axes) keys.insert(keys.end(), a.keys.begin(), a.keys.end());
  if (search) keys.push_back(search->parameter);
  return keys;
}

std::vector<Point> expand(const Spec& spec) {
  std::vector<Point> points;
  std::size_t total = 1;
  for (const auto& a : spec.axes) total *= a.size();
  if (total > 100000) throw ConfigError(fmt::format("{}: {} points (at most 100000)", spec.file, total));
  for (std::size_t id = 0; id < total; ++id) {
    Point p;
    p.id = id;
    std::size_t rest = id, stride = total;
    for (const auto& a : spec.axes) {  // mixed radix, first axis most significant
      stride /= a.size();
      const std::size_t i = rest / stride;
      rest %= stride;
      p.values.insert(p.values.end(), a.values[i].begin(), a.values[i].end());
    }
    points.push_back(std::move(p));
  }
  return points;
}

// ---------------------------------------------------------------------------
// Planning and validation
// ---------------------------------------------------------------------------
namespace {

std::string run_name(std::size_t point, std::optional<std::uint64_t> seed) {
  return seed ? fmt::format("p{:04d}_s{}", point, *seed) : fmt::format("p{:04d}", point);
}

std::string describe_point(const std::vector<std::string>& keys, const Point& p) {
  std::vector<std::string> parts;
  for (std::size_t k = 0; k < keys.size(); ++k) parts.push_back(keys[k] + "=" + p.values[k]);
  return parts.empty() ? std::string("the base configuration") : fmt::format("{}", fmt::join(parts, ", "));
}

Run make_run(const Spec& spec, const Point& point, std::optional<std::uint64_t> seed, std::size_t index) {
  Run r;
  r.index = index;
  r.point = point.id;
  r.overrides = spec.fixed;
  const auto keys = spec.parameter_keys();
  for (std::size_t k = 0; k < keys.size(); ++k) r.overrides.push_back(keys[k] + "=" + point.values[k]);
  if (seed) {
    r.seed = *seed;
    r.overrides.push_back(fmt::format("seed={}", *seed));
  }
  r.result = (fs::path(spec.output) / "runs" / (run_name(point.id, seed) + ".h5")).string();
  r.log = (fs::path(spec.output) / "logs" / (run_name(point.id, seed) + ".log")).string();
  // Validate now (a bad value at point 17 stops the sweep before point 0 runs) and hash what runs.
  RunOptions o;
  o.overrides = r.overrides;
  YAML::Node resolved;
  try {
    // Parsed again per run (a few ms): a yaml-cpp clone would lose the line numbers errors cite.
    resolved = resolve_experiment_config(load_yaml_file(spec.base), spec.base, o);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: point {} ({}){}: {}", spec.file, point.id, describe_point(keys, point),
                            seed ? fmt::format(", seed {}", *seed) : "", e.what()),
                e.exit_code());
  }
  if (!seed) r.seed = resolved["seed"].as<std::uint64_t>();
  r.config_hash = config_hash(kVersion, yaml_to_string(resolved));
  return r;
}

}  // namespace

std::vector<Run> plan(const Spec& spec, const std::vector<Point>& points) {
  std::vector<Run> runs;
  for (const auto& p : points) {
    if (spec.seeds.empty()) {
      runs.push_back(make_run(spec, p, std::nullopt, runs.size()));
    } else {
      for (auto s : spec.seeds) runs.push_back(make_run(spec, p, s, runs.size()));
    }
  }
  return runs;
}

// ---------------------------------------------------------------------------
// Statistics
// ---------------------------------------------------------------------------
double ci95_half_width(const std::vector<double>& v) {
  const std::size_t n = v.size();
  if (n < 2) return 0.0;
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(n);
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  const double sd = std::sqrt(ss / static_cast<double>(n - 1));
  return gsl_cdf_tdist_Pinv(0.975, static_cast<double>(n - 1)) * sd / std::sqrt(static_cast<double>(n));
}

// ---------------------------------------------------------------------------
// Result files and the index
// ---------------------------------------------------------------------------
h5::Table read_summary(const std::string& h5_path) {
  h5::Reader r(h5_path);
  h5::Table t;
  const auto columns = r.children("/summary");
  // Identifier (string) columns first, then the metrics; each group in name order.
  std::vector<std::string> text_cols, num_cols;
  std::map<std::string, std::vector<std::string>> texts;
  std::map<std::string, std::vector<double>> nums;
  for (const auto& c : columns) {
    const std::string path = "/summary/" + c;
    try {
      texts[c] = r.strings(path);
      text_cols.push_back(c);
    } catch (const InputError&) {
      nums[c] = r.doubles(path);
      num_cols.push_back(c);
    }
  }
  for (const auto& c : text_cols) t.add(c, texts[c]);
  for (const auto& c : num_cols) t.add(c, nums[c]);
  return t;
}

namespace {

// The variant key of each summary row: its identifier columns joined ("naive", "pixel7/lru").
std::vector<std::string> variant_keys(const h5::Table& t) {
  std::vector<std::string> keys(t.rows());
  for (const auto& name : t.names())
    if (const auto* col = std::get_if<std::vector<std::string>>(&t.column(name)))
      for (std::size_t i = 0; i < col->size(); ++i) keys[i] += (keys[i].empty() ? "" : "/") + (*col)[i];
  for (auto& k : keys)
    if (k.empty()) k = "all";
  return keys;
}

std::vector<std::string> metric_names(const std::vector<Run>& runs) {
  std::vector<std::string> names;
  for (const auto& r : runs)
    for (const auto& n : r.summary.names())
      if (std::holds_alternative<std::vector<double>>(r.summary.column(n)) &&
          std::find(names.begin(), names.end(), n) == names.end())
        names.push_back(n);
  return names;
}

double metric_of(const Run& r, const std::string& metric, std::size_t row) {
  for (const auto& n : r.summary.names())
    if (n == metric)
      if (const auto* col = std::get_if<std::vector<double>>(&r.summary.column(n))) return (*col)[row];
  return std::numeric_limits<double>::quiet_NaN();
}

bool finished_ok(const Run& r) { return r.status == "ok" || r.status == "skipped"; }

std::string relative_to(const std::string& path, const std::string& dir) {
  return fs::path(path).lexically_relative(dir).string();
}

}  // namespace

void write_index(const Spec& spec, const std::vector<Point>& points, const std::vector<Run>& runs,
                 const std::optional<h5::Table>& search_table) {
  const auto keys = spec.parameter_keys();
  const auto metrics = metric_names(runs);
  // /runs: one row per run x variant (one row with no variant for a run without results).
  h5::Table rt;
  {
    std::vector<std::int64_t> run_col, point_col, seed_col;
    std::vector<std::vector<std::string>> params(keys.size());
    std::vector<std::string> status, error, hash, result, variant;
    std::vector<std::vector<double>> values(metrics.size());
    for (const auto& r : runs) {
      const auto variants = finished_ok(r) ? variant_keys(r.summary) : std::vector<std::string>{};
      const std::size_t rows = std::max<std::size_t>(1, variants.size());
      for (std::size_t v = 0; v < rows; ++v) {
        run_col.push_back(static_cast<std::int64_t>(r.index));
        point_col.push_back(static_cast<std::int64_t>(r.point));
        seed_col.push_back(static_cast<std::int64_t>(r.seed));
        for (std::size_t k = 0; k < keys.size(); ++k) params[k].push_back(points.at(r.point).values[k]);
        status.push_back(r.status == "skipped" ? "ok" : r.status);
        error.push_back(r.error);
        hash.push_back(r.config_hash);
        result.push_back(relative_to(r.result, spec.output));
        variant.push_back(variants.empty() ? "" : variants[v]);
        for (std::size_t m = 0; m < metrics.size(); ++m)
          values[m].push_back(variants.empty() ? std::numeric_limits<double>::quiet_NaN() : metric_of(r, metrics[m], v));
      }
    }
    rt.add("run", run_col);
    rt.add("point", point_col);
    rt.add("seed", seed_col);
    for (std::size_t k = 0; k < keys.size(); ++k) rt.add(keys[k], params[k]);
    rt.add("status", status);
    rt.add("error", error);
    rt.add("config_hash", hash);
    rt.add("result", result);
    rt.add("variant", variant);
    for (std::size_t m = 0; m < metrics.size(); ++m) rt.add(metrics[m], values[m]);
  }
  // /points: one row per point x variant, means and 95% CIs over the seeds that finished.
  h5::Table pt;
  {
    std::vector<std::int64_t> point_col, seeds_ok;
    std::vector<std::vector<std::string>> params(keys.size());
    std::vector<std::string> variant;
    std::vector<std::vector<double>> mean(metrics.size()), ci(metrics.size());
    for (const auto& p : points) {
      std::vector<std::string> order;  // variants in first-seen order
      std::map<std::string, std::vector<std::pair<const Run*, std::size_t>>> rows;
      for (const auto& r : runs) {
        if (r.point != p.id || !finished_ok(r)) continue;
        const auto vk = variant_keys(r.summary);
        for (std::size_t i = 0; i < vk.size(); ++i) {
          if (!rows.count(vk[i])) order.push_back(vk[i]);
          rows[vk[i]].push_back({&r, i});
        }
      }
      for (const auto& v : order) {
        point_col.push_back(static_cast<std::int64_t>(p.id));
        for (std::size_t k = 0; k < keys.size(); ++k) params[k].push_back(p.values[k]);
        variant.push_back(v);
        seeds_ok.push_back(static_cast<std::int64_t>(rows[v].size()));
        for (std::size_t m = 0; m < metrics.size(); ++m) {
          std::vector<double> xs;
          for (const auto& [run, row] : rows[v]) xs.push_back(metric_of(*run, metrics[m], row));
          double s = 0;
          for (double x : xs) s += x;
          mean[m].push_back(xs.empty() ? std::numeric_limits<double>::quiet_NaN() : s / static_cast<double>(xs.size()));
          ci[m].push_back(ci95_half_width(xs));
        }
      }
    }
    pt.add("point", point_col);
    for (std::size_t k = 0; k < keys.size(); ++k) pt.add(keys[k], params[k]);
    pt.add("variant", variant);
    pt.add("seeds_ok", seeds_ok, "count");
    for (std::size_t m = 0; m < metrics.size(); ++m) {
      pt.add(metrics[m] + "_mean", mean[m]);
      pt.add(metrics[m] + "_ci95", ci[m]);
    }
  }
  create_dirs(spec.output);
  const std::string index = (fs::path(spec.output) / "index.h5").string();
  h5::Writer w(index);
  {
    H5::Group root = w.root();
    h5::write_attr(root, "format", "mobisim-sweep-index/1");
    h5::write_attr(root, "mobisim_version", kVersion);
    h5::write_attr(root, "mobisim_build", build_id());
    h5::write_attr(root, "sweep", spec.file);
    h5::write_attr(root, "base", spec.base);
    h5::write_attr(root, "parameters", keys);
    h5::write_attr(root, "fixed_overrides", spec.fixed);
    rt.write(root, "runs");
    pt.write(root, "points");
    if (search_table) search_table->write(root, "search");
  }
  w.commit();
  write_file_atomic((fs::path(spec.output) / "index.csv").string(), pt.to_csv());
  write_file_atomic((fs::path(spec.output) / "runs.csv").string(), rt.to_csv());
  if (search_table) write_file_atomic((fs::path(spec.output) / "search.csv").string(), search_table->to_csv());
}

// ---------------------------------------------------------------------------
// Local execution: each run is a `mobisim run` process
// ---------------------------------------------------------------------------
namespace {

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  if (last.size() > 500) last = last.substr(0, 500) + "...";
  return last;
}

pid_t spawn_run(const std::string& base, const Run& r) {
  std::vector<std::string> args{"run", base};
  for (const auto& o : r.overrides) {
    args.push_back("-p");
    args.push_back(o);
  }
  for (const char* a : {"--quiet", "--no-plot", "--threads", "1", "--output"}) args.emplace_back(a);
  args.push_back(r.result);
  try {
    return spawn_self(args, r.log);
  } catch (const Error& e) {
    throw Error(fmt::format("sweep: {}", e.what()));
  }
}

// A run that ended well is ok once its result file's summary reads.
void take_summary(Run& r) {
  try {
    r.summary = read_summary(r.result);
    r.status = "ok";
    r.error.clear();
  } catch (const Error& e) {
    r.status = "failed";
    r.error = e.what();
  }
}

void finish_run(Run& r, int wait_status) {
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) {
    take_summary(r);
    return;
  }
  r.status = "failed";
  r.summary = h5::Table{};
  r.error = WIFSIGNALED(wait_status) ? fmt::format("killed by signal {}", WTERMSIG(wait_status))
                                     : fmt::format("exit {}: {}", WEXITSTATUS(wait_status), last_line(r.log));
}

}  // namespace

void execute_local(const std::string& base, std::vector<Run>& runs, int threads,
                   const std::function<void(Run&)>& done) {
  run_children(
      runs.size(), threads,
      [&](std::size_t i) -> pid_t {
        Run& r = runs[i];
        if (r.status == "ok" || r.status == "skipped") return -1;
        create_dirs(fs::path(r.result).parent_path().string());
        create_dirs(fs::path(r.log).parent_path().string());
        return spawn_run(base, r);
      },
      [&](std::size_t i, int status) {
        finish_run(runs[i], status);
        done(runs[i]);
        return true;
      });
}

void execute_in_process(const std::string& base, std::vector<Run>& runs, int threads,
                        const std::function<void(Run&)>& done) {
  WorkloadCache workloads;
  for (Run& r : runs) {
    if (r.status == "ok" || r.status == "skipped") continue;
    create_dirs(fs::path(r.log).parent_path().string());
    run_in_process(base, r, threads, &workloads);
    if (r.status == "ok") take_summary(r);
    // The log says what a run process would have ended with (its last line is the error).
    write_file_atomic(r.log, r.status == "ok" ? "ok (in process)\n" : fmt::format("failed: {}\n", r.error));
    done(r);
  }
}

// ---------------------------------------------------------------------------
// The sweep
// ---------------------------------------------------------------------------
namespace {

// Marks runs finished by an earlier (interrupted) invocation: a run's result file exists only once
// complete (atomic rename) and stores the configuration it simulated, so the file itself says
// whether it is still valid. The index is a view that is rebuilt from them.
std::size_t resume_from_results(std::vector<Run>& runs) {
  std::size_t resumed = 0;
  for (auto& run : runs) {
    if (run.status != "pending" || !path_exists(run.result)) continue;
    try {
      h5::Reader r(run.result);
      if (config_hash(r.attr_string("/", "mobisim_version"), r.attr_string("/", "config")) != run.config_hash ||
          !is_this_build(r.attr_string("/", "mobisim_build")))
        continue;  // simulated another configuration, or by another build (sim/build_id.h): run it again
      run.summary = read_summary(run.result);
      run.status = "skipped";
      ++resumed;
    } catch (const Error&) {
      // unreadable: run it again
    }
  }
  return resumed;
}

// Rewrites the index at most once per `interval` (and always when told to): a kill loses no run,
// since finished runs are recovered from their own files by --resume.
class IndexWriter {
 public:
  explicit IndexWriter(std::chrono::milliseconds interval) : interval_(interval) {}
  template <class Write>
  void maybe(Write&& write, bool force = false) {
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < interval_) return;
    write();
    last_ = now;
  }

 private:
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point last_{};
};

class Progress {
 public:
  Progress(std::size_t total, bool quiet) : total_(total), quiet_(quiet), t0_(std::chrono::steady_clock::now()) {}
  void update(const std::vector<Run>& runs, const Run& last) {
    std::size_t done = 0, failed = 0, fresh = 0;
    for (const auto& r : runs) {
      if (r.status == "pending") continue;
      ++done;
      if (r.status == "failed") ++failed;
      if (r.status == "ok" || r.status == "failed") ++fresh;
    }
    if (quiet_) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const double eta = fresh ? elapsed / static_cast<double>(fresh) * static_cast<double>(total_ - done) : 0.0;
    std::cerr << fmt::format("[sweep] {}/{} runs done, {} failed, elapsed {:.1f} s, ETA {:.1f} s  (last: {} {}{})\n",
                             done, total_, failed, elapsed, eta, fs::path(last.result).stem().string(), last.status,
                             last.error.empty() ? "" : ": " + last.error);
  }

 private:
  std::size_t total_;
  bool quiet_;
  std::chrono::steady_clock::time_point t0_;
};

void execute(const Spec& spec, const Options& options, std::vector<Run>& runs, const std::function<void(Run&)>& done) {
  if (options.mpi)
    execute_mpi(spec.base, runs, done);
  else if (options.in_process)
    execute_in_process(spec.base, runs, options.threads, done);
  else
    execute_local(spec.base, runs, options.threads, done);
}

std::string format_value(double v, bool integer) {
  if (integer) return fmt::format("{}", static_cast<long long>(std::llround(v)));
  return fmt::format("{}", v);
}

// Bisection per variant over one numeric parameter (assumed monotone in the metric).
int run_search(const Spec& spec, const Options& options) {
  const SearchSpec& q = *spec.search;
  std::vector<Point> points;
  std::vector<Run> runs;
  std::map<std::string, std::size_t> point_of_value;
  Progress progress(0, options.quiet);
  // Probes a set of values (new ones run, in parallel), returning their point ids.
  auto probe = [&](const std::vector<double>& values) {
    std::vector<std::size_t> ids;
    std::vector<Run> fresh;
    for (double v : values) {
      const std::string text = format_value(v, q.integer);
      auto it = point_of_value.find(text);
      if (it == point_of_value.end()) {
        Point p{points.size(), {text}};
        points.push_back(p);
        it = point_of_value.emplace(text, p.id).first;
        auto planned = plan(spec, {p});
        for (auto& r : planned) {
          r.index = runs.size() + fresh.size();
          fresh.push_back(std::move(r));
        }
      }
      ids.push_back(it->second);
    }
    const std::size_t first = runs.size();
    for (auto& r : fresh) runs.push_back(std::move(r));
    if (options.resume) resume_from_results(runs);
    std::vector<Run> batch(runs.begin() + static_cast<std::ptrdiff_t>(first), runs.end());
    Progress p(batch.size(), options.quiet);
    execute(spec, options, batch, [&](Run& r) { p.update(batch, r); });
    std::move(batch.begin(), batch.end(), runs.begin() + static_cast<std::ptrdiff_t>(first));
    write_index(spec, points, runs, std::nullopt);
    return ids;
  };
  // metric(variant, point): mean over the point's finished runs.
  auto metric = [&](const std::string& variant, std::size_t point) {
    double s = 0;
    int n = 0;
    for (const auto& r : runs) {
      if (r.point != point || !finished_ok(r)) continue;
      const auto vk = variant_keys(r.summary);
      for (std::size_t i = 0; i < vk.size(); ++i)
        if (vk[i] == variant) {
          s += metric_of(r, q.metric, i);
          ++n;
        }
    }
    return n ? s / n : std::numeric_limits<double>::quiet_NaN();
  };
  auto meets = [&](double m) { return std::isfinite(m) && (q.below ? m < q.target : m > q.target); };

  const auto ends = probe({q.lo, q.hi});
  std::vector<std::string> variants;
  for (const auto& r : runs)
    if (finished_ok(r))
      for (const auto& v : variant_keys(r.summary))
        if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
  if (variants.empty()) throw Error(fmt::format("{}: the search's first probes failed (see {}/logs)", spec.file, spec.output));
  struct Bracket {
    double good, bad;  // the target is met at `good`, not at `bad`
    bool done = false, found = false;
    int probes = 2;
  };
  std::vector<Bracket> br(variants.size());
  for (std::size_t v = 0; v < variants.size(); ++v) {
    const bool lo_ok = meets(metric(variants[v], ends[0])), hi_ok = meets(metric(variants[v], ends[1]));
    const double want_end = q.find_smallest ? q.lo : q.hi, other_end = q.find_smallest ? q.hi : q.lo;
    const bool want_ok = q.find_smallest ? lo_ok : hi_ok, other_ok = q.find_smallest ? hi_ok : lo_ok;
    if (want_ok) {
      br[v] = {want_end, want_end, true, true};
    } else if (!other_ok) {
      br[v] = {other_end, want_end, true, false};  // never met in [lo, hi]
    } else {
      br[v] = {other_end, want_end, false, true};
    }
  }
  for (;;) {
    std::vector<double> mids;
    std::vector<std::size_t> who;
    for (std::size_t v = 0; v < br.size(); ++v) {
      Bracket& b = br[v];
      if (b.done) continue;
      double mid = 0.5 * (b.good + b.bad);
      if (q.integer) mid = std::floor(mid);
      if (std::fabs(b.bad - b.good) <= q.tolerance || b.probes >= q.max_probes || mid == b.good || mid == b.bad) {
        b.done = true;
        continue;
      }
      mids.push_back(mid);
      who.push_back(v);
    }
    if (mids.empty()) break;
    const auto ids = probe(mids);
    for (std::size_t i = 0; i < who.size(); ++i) {
      Bracket& b = br[who[i]];
      ++b.probes;
      (meets(metric(variants[who[i]], ids[i])) ? b.good : b.bad) = mids[i];
    }
  }
  h5::Table st;
  std::vector<std::string> names, metric_names_col, met;
  std::vector<double> value, metric_value, target;
  std::vector<std::int64_t> probes;
  for (std::size_t v = 0; v < variants.size(); ++v) {
    names.push_back(variants[v]);
    value.push_back(br[v].found ? br[v].good : std::numeric_limits<double>::quiet_NaN());
    const auto it = point_of_value.find(format_value(br[v].good, q.integer));
    metric_value.push_back(br[v].found && it != point_of_value.end() ? metric(variants[v], it->second)
                                                                      : std::numeric_limits<double>::quiet_NaN());
    met.push_back(br[v].found ? "yes" : "no");
    probes.push_back(br[v].probes);
  }
  st.add("variant", names);
  st.add(q.parameter, value);
  st.add(q.metric, metric_value);
  st.add("target_met", met);
  st.add("probes", probes, "count");
  write_index(spec, points, runs, st);
  if (!options.quiet) {
    std::cout << fmt::format("{} {} {} {}: the {} {} per variant\n", q.metric, q.below ? "<" : ">", q.target,
                             q.find_smallest ? "(smallest)" : "(largest)", q.find_smallest ? "smallest" : "largest",
                             q.parameter)
              << format_table(st);
  }
  bool failed = false;
  for (const auto& r : runs) failed = failed || r.status == "failed";
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

std::string seeds_note(std::size_t seeds) {
  if (seeds >= 3) return "";
  if (seeds <= 1)
    return "note: one seed per point, so the index has no confidence intervals (the *_ci95 columns are 0); "
           "list 3 or more seeds (seeds: [1, 2, 3]) to see the spread";
  return fmt::format("note: {} seeds per point: a 95% interval with {} degree(s) of freedom is {:.1f} standard errors "
                     "wide on each side; use 3 or more seeds for intervals a reader can use",
                     seeds, seeds - 1, gsl_cdf_tdist_Pinv(0.975, static_cast<double>(seeds - 1)));
}

int run_sweep(const Spec& spec, const Options& options) {
  if (spec.search) {
    if (options.dry_run) {
      std::cout << fmt::format("search over {} in [{}, {}]: runs are planned as the bisection goes\n",
                               spec.search->parameter, spec.search->lo, spec.search->hi);
      plan(spec, {Point{0, {format_value(spec.search->lo, spec.search->integer)}}});  // validates one end
      return kExitOk;
    }
    return run_search(spec, options);
  }
  const auto points = expand(spec);
  auto runs = plan(spec, points);  // validates every run before any starts
  if (options.dry_run) {
    h5::Table t;
    std::vector<std::int64_t> idx, pt, seed;
    std::vector<std::string> over, hash, result;
    for (const auto& r : runs) {
      idx.push_back(static_cast<std::int64_t>(r.index));
      pt.push_back(static_cast<std::int64_t>(r.point));
      seed.push_back(static_cast<std::int64_t>(r.seed));
      std::vector<std::string> mine(r.overrides.begin() + static_cast<std::ptrdiff_t>(spec.fixed.size()), r.overrides.end());
      over.push_back(fmt::format("{}", fmt::join(mine, " ")));
      hash.push_back(r.config_hash);
      result.push_back(r.result);
    }
    t.add("run", idx);
    t.add("point", pt);
    t.add("seed", seed);
    t.add("overrides", over);
    t.add("config_hash", hash);
    t.add("result", result);
    std::cout << fmt::format("{}: {} points x {} seeds = {} runs, all valid\n", spec.file, points.size(),
                             std::max<std::size_t>(1, spec.seeds.size()), runs.size())
              << format_table(t, 1000);
    if (const std::string note = seeds_note(spec.seeds.size()); !note.empty()) std::cout << note << "\n";
    return kExitOk;
  }
  const std::size_t resumed = options.resume ? resume_from_results(runs) : 0;
  if (!options.quiet)
    std::cerr << fmt::format("[sweep] {}: {} points, {} runs{}, {}\n", spec.file, points.size(), runs.size(),
                             resumed ? fmt::format(" ({} finished earlier, kept)", resumed) : "",
                             options.mpi          ? std::string("over MPI")
                             : options.in_process ? fmt::format("in process, {} workers each", options.threads)
                                                  : fmt::format("{} at a time", options.threads));
  Progress progress(runs.size(), options.quiet);
  IndexWriter index(std::chrono::seconds(2));
  const auto write = [&] { write_index(spec, points, runs, std::nullopt); };
  execute(spec, options, runs, [&](Run& r) {
    index.maybe(write);  // throttled: the run's own file is what --resume trusts
    progress.update(runs, r);
  });
  index.maybe(write, true);
  std::size_t failed = 0;
  for (const auto& r : runs) failed += r.status == "failed";
  if (!options.quiet) {
    std::cout << fmt::format("sweep: {} runs, {} failed; index: {}/index.h5 (and index.csv, runs.csv)\n", runs.size(),
                             failed, spec.output);
    if (const std::string note = seeds_note(spec.seeds.size()); !note.empty()) std::cout << note << "\n";
  }
  return failed ? kExitFailure : kExitOk;
}

}  // namespace mobisim::experiments::sweep
