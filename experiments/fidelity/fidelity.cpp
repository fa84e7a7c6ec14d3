#include "experiments/fidelity/fidelity.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <set>

#include "experiments/experiment.h"
#include "experiments/fidelity/extract.h"
#include "experiments/fidelity/probe.h"
#include "experiments/sweep.h"
#include "experiments/workload_inputs.h"
#include "sim/atomic_file.h"
#include "sim/build_id.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "sim/rng.h"
#include "sim/version.h"

namespace mobisim::experiments::fidelity {
namespace {

namespace fs = std::filesystem;

std::string absolute_experiment(const std::string& experiment) {
  if (fs::path(experiment).is_absolute() || path_exists(experiment)) return experiment;
  return source_root() + "/" + experiment;
}

// The same key as sweep runs: mobisim's version and the resolved configuration's text.
std::string resolved_hash(const std::string& version, const std::string& resolved_yaml) {
  return fmt::format("{:016x}", sim::fnv1a64(version + "\n" + resolved_yaml));
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  // Linear interpolation between order statistics (numpy's default).
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) throw Error(fmt::format("cannot write {}", tmp));
  }
  fs::rename(tmp, path);
}

}  // namespace

// ---------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------
std::string RunCache::request(const std::string& experiment, const std::vector<std::string>& overrides) {
  const std::string base = absolute_experiment(experiment);
  std::string key = base;
  for (const auto& o : overrides) key.append("\n").append(o);
  if (entries_.count(key)) return key;
  Entry e;
  e.base = base;
  e.overrides = overrides;
  try {
    const YAML::Node root = load_yaml_file(base);
    if (const std::string trace = workload_trace(root, base); !trace.empty()) ensure_qmsum_trace(trace, shared_dir(o_.shared));
    RunOptions ro;
    ro.overrides = overrides;
    const YAML::Node resolved = resolve_experiment_config(load_yaml_file(base), base, ro);
    e.hash = resolved_hash(kVersion, yaml_to_string(resolved));
    e.outcome.result = (fs::path(o_.dir) / "runs" / (fs::path(base).stem().string() + "-" + e.hash + ".h5")).string();
    e.outcome.status = "planned";
    if (!o_.force && path_exists(e.outcome.result)) {
      try {
        h5::Reader r(e.outcome.result);
        // The same configuration simulated by this very build (sim/build_id.h): a rebuilt model reruns.
        if (resolved_hash(r.attr_string("/", "mobisim_version"), r.attr_string("/", "config")) == e.hash &&
            is_this_build(r.attr_string("/", "mobisim_build")))
          e.outcome.status = "reused";
      } catch (const Error&) {
        // unreadable: run it again
      }
    }
  } catch (const Error& err) {
    e.outcome.status = "failed";
    e.outcome.error = err.what();
  }
  entries_.emplace(key, std::move(e));
  return key;
}

std::size_t RunCache::execute() {
  // One execute_local per experiment file (it spawns `mobisim run BASE -p ...`).
  std::map<std::string, std::vector<std::string>> by_base;
  for (auto& [key, e] : entries_)
    if (e.outcome.status == "planned") by_base[e.base].push_back(key);
  std::size_t total = 0, done = 0, failed = 0;
  for (const auto& [base, keys] : by_base) total += keys.size();
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& group : by_base) {
    const std::string& base = group.first;
    const std::vector<std::string>& keys = group.second;  // named: clang 14 cannot capture bindings
    std::vector<sweep::Run> runs;
    for (const auto& key : keys) {
      const Entry& e = entries_.at(key);
      sweep::Run r;
      r.index = runs.size();
      r.overrides = e.overrides;
      r.result = e.outcome.result;
      r.log = (fs::path(o_.dir) / "logs" / (fs::path(e.outcome.result).stem().string() + ".log")).string();
      r.config_hash = e.hash;
      runs.push_back(std::move(r));
    }
    sweep::execute_local(base, runs, o_.threads, [&](sweep::Run& r) {
      Entry& e = entries_.at(keys[r.index]);
      e.outcome.status = r.status == "ok" ? "ran" : "failed";
      e.outcome.error = r.error;
      ++done;
      if (r.status != "ok") ++failed;
      if (!o_.quiet) {
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double left = elapsed / static_cast<double>(done) * static_cast<double>(total - done);
        std::cerr << fmt::format("[fidelity] {}/{} runs ({:.0f} s, about {:.0f} s left): {} {}{}\n", done, total, elapsed,
                                 left, fs::path(r.result).filename().string(), r.status,
                                 r.error.empty() ? "" : ": " + r.error);
      }
    });
  }
  return failed;
}

const RunCache::Outcome& RunCache::outcome(const std::string& key) const { return entries_.at(key).outcome; }

// ---------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------
double relative_error(const Point& p, double simulated) {
  if (p.kind == PublishedKind::kRange) {
    // Relative to the nearer end (to the high end when the low one is 0, as in "under hi").
    if (simulated < p.lo) return (simulated - p.lo) / (p.lo != 0 ? p.lo : p.hi);
    if (simulated > p.hi) return (simulated - p.hi) / p.hi;
    return 0.0;
  }
  return (simulated - p.published) / p.published;
}

double midpoint_error(const Point& p, double simulated) {
  if (p.kind == PublishedKind::kRange && std::isinf(p.hi)) return relative_error(p, simulated);
  return (simulated - p.reference()) / p.reference();
}

std::vector<std::string> experiment_overrides(const Point& p, const std::vector<std::string>& candidates) {
  std::vector<std::string> out;
  for (const auto& c : candidates) {
    if (c.starts_with("device."))
      out.push_back(p.device_at + c.substr(6));
    else if (c.starts_with("engine."))
      out.push_back(p.engine_at + c.substr(6));
    else
      out.push_back(c);
  }
  return out;
}

std::vector<Evaluation> evaluate(const std::vector<Point>& points, const EvaluateOptions& o) {
  RunCache cache(o.runs);
  std::vector<std::string> keys(points.size());
  std::vector<std::vector<std::string>> vary_keys(points.size());  // trends over runs
  auto candidates_of = [&](const Point& p) {
    auto it = o.candidates.find(p.id);
    return it == o.candidates.end() ? std::vector<std::string>{} : it->second;
  };
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    if (p.experiment.empty()) continue;
    auto overrides = p.run_overrides;
    for (auto& c : experiment_overrides(p, candidates_of(p))) overrides.push_back(std::move(c));
    if (p.vary_values.empty()) keys[i] = cache.request(p.experiment, overrides);
    for (const auto& v : p.vary_values) {
      auto o2 = overrides;
      o2.push_back(p.vary_key + "=" + v);
      vary_keys[i].push_back(cache.request(p.experiment, o2));
    }
  }
  cache.execute();
  std::vector<Evaluation> out;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    Evaluation ev;
    ev.point = &p;
    try {
      if (!p.vary_values.empty()) {
        for (const auto& k : vary_keys[i]) {
          const auto& oc = cache.outcome(k);
          if (oc.status == "failed") throw Error(oc.error);
          ev.series.push_back(extract_value(oc.result, p.extract));
          ev.run_file = oc.result;
        }
      } else if (!p.experiment.empty()) {
        const auto& oc = cache.outcome(keys[i]);
        ev.run_file = oc.result;
        if (oc.status == "failed") throw Error(oc.error);
        if (p.kind == PublishedKind::kTrend)
          ev.series = extract_series(oc.result, p.extract);
        else
          ev.simulated = extract_value(oc.result, p.extract);
      } else {
        const std::string impl = p.probe["impl"].as<std::string>();
        if (!Registry<::mobisim::fidelity::Probe>::instance().contains(impl)) {
          ev.status = "unavailable";
          ev.error = fmt::format("probe '{}' is not built into this mobisim", impl);
        } else {
          ConfigSource src{std::make_shared<std::string>(p.file), p.id + ".probe", nullptr};
          const auto probe = Registry<::mobisim::fidelity::Probe>::instance().create(p.probe, src);
          ::mobisim::fidelity::ProbeContext ctx{candidates_of(p), shared_dir(o.shared)};
          ev.simulated = probe->evaluate(ctx);
        }
      }
    } catch (const Error& e) {
      ev.status = "failed";
      ev.error = e.what();
    }
    if (ev.status == "ok") {
      if (p.kind == PublishedKind::kTrend) {
        ev.trend_pass = trend_holds(ev.series, p.trend);
        ev.simulated = ev.series.size() > 1 ? ev.series.back() / ev.series.front() : 0.0;
        ev.verdict = ev.trend_pass ? "pass" : "FAIL";
      } else if (!std::isfinite(ev.simulated)) {
        ev.status = "failed";
        ev.error = "the extracted value is not a finite number";
      } else {
        ev.rel_error = relative_error(p, ev.simulated);
        ev.mid_error = midpoint_error(p, ev.simulated);
        ev.verdict = std::abs(ev.rel_error) <= p.tolerance_rel + 1e-12 ? "ok" : "off";
      }
    }
    if (ev.status == "failed") ev.verdict = "error";
    if (ev.status == "unavailable") ev.verdict = "n/a";
    out.push_back(std::move(ev));
  }
  return out;
}

// ---------------------------------------------------------------------------
// Summary and report
// ---------------------------------------------------------------------------
Summary summarize(const std::vector<Evaluation>& ev) {
  Summary s;
  std::vector<double> val, cal, not_workload;
  for (const auto& k : kCauseKinds) s.cause_kinds[k] = 0;
  s.cause_kinds["none"] = 0;
  for (const auto& e : ev) {
    const Point& p = *e.point;
    if (!p.calibration()) ++s.cause_kinds[p.cause_kind.empty() ? "none" : p.cause_kind];
    if (p.kind == PublishedKind::kTrend) {
      ++s.trends;
      if (e.status == "ok" && e.trend_pass) ++s.trends_passed;
    } else if (p.calibration()) {
      ++s.calibration;
    } else {
      ++s.validation;
    }
    if (e.status == "failed") ++s.failed;
    if (e.status == "unavailable") ++s.unavailable;
    if (e.status != "ok" || p.kind == PublishedKind::kTrend) continue;
    const double a = std::abs(e.rel_error);
    if (p.calibration()) {
      cal.push_back(a);
      continue;
    }
    val.push_back(a);
    if (p.cause_kind != "workload") not_workload.push_back(a);
    if (a <= p.tolerance_rel + 1e-12) ++s.within_tolerance;
    if (a > 0.25) {
      ++s.over_25;
      if (p.cause.empty()) ++s.over_25_unexplained;
    }
  }
  s.validation_numeric = val.size();
  s.median_validation = percentile(val, 0.5);
  s.p90_validation = percentile(val, 0.9);
  s.median_calibration = percentile(cal, 0.5);
  s.not_workload = not_workload.size();
  s.median_not_workload = percentile(not_workload, 0.5);
  s.p90_not_workload = percentile(not_workload, 0.9);
  return s;
}

ErrorStats error_stats(const std::vector<double>& abs_errors) {
  ErrorStats s;
  s.n = abs_errors.size();
  s.median = percentile(abs_errors, 0.5);
  s.p90 = percentile(abs_errors, 0.9);
  for (double a : abs_errors)
    if (a <= 0.10 + 1e-12) ++s.within_10;
  return s;
}

std::string ErrorStats::text() const {
  if (n == 0) return "no points";
  return fmt::format("median {:.1f}% over {} (p90 {:.1f}%, {} within 10%)", 100 * median, n, 100 * p90, within_10);
}

bool in_medians(const Evaluation& e) {
  const Point& p = *e.point;
  return e.status == "ok" && p.kind != PublishedKind::kTrend && p.point_class() == "validation" && p.counted();
}

HonestSummary honest_summary(const std::vector<Evaluation>& ev) {
  HonestSummary h;
  std::map<std::string, std::vector<double>> headline, seed_by_document;
  std::vector<double> all_headline, seed, external, sustained, derived, interpolated, sensitivity;
  std::map<std::string, std::vector<double>> sustained_by_phone;
  for (const auto& e : ev) {
    const Point& p = *e.point;
    if (!p.external && std::find(h.documents.begin(), h.documents.end(), p.set_name) == h.documents.end())
      h.documents.push_back(p.set_name);
    if (p.headline) ++h.headline_tagged;
    if (e.status != "ok" || p.kind == PublishedKind::kTrend) {
      if (p.headline) ++h.headline_not_counted;
      continue;
    }
    const double a = std::abs(e.mid_error);
    if (in_medians(e)) {
      if (p.set_name == "sustained") {
        sustained.push_back(a);
        const std::string phone = p.probe.IsMap() && p.probe["device"].IsDefined() ? p.probe["device"].as<std::string>() : "";
        sustained_by_phone[phone].push_back(a);
        continue;
      }
      (p.external ? external : seed).push_back(a);
      if (!p.external) seed_by_document[p.set_name].push_back(a);
      if (p.headline && !p.external) {
        headline[p.set_name].push_back(a);
        all_headline.push_back(a);
      }
      continue;
    }
    if (p.headline) ++h.headline_not_counted;
    if (p.calibration()) continue;
    if (p.point_class() == "derived")
      derived.push_back(a);
    else if (p.point_class() == "interpolated")
      interpolated.push_back(a);
    else
      sensitivity.push_back(a);  // a statement group's other members
  }
  for (const auto& d : h.documents) {
    h.headline[d] = error_stats(headline[d]);
    h.seed_by_document[d] = error_stats(seed_by_document[d]);
  }
  h.headline_all = error_stats(all_headline);
  h.seed = error_stats(seed);
  h.external = error_stats(external);
  h.sustained = error_stats(sustained);
  for (const auto& [phone, v] : sustained_by_phone) h.sustained_by_phone[phone] = error_stats(v);
  h.derived = error_stats(derived);
  h.interpolated = error_stats(interpolated);
  h.sensitivity = error_stats(sensitivity);
  return h;
}

std::vector<std::string> HonestSummary::lines() const {
  std::vector<std::string> out;
  out.push_back("Errors against the published value, or a published range's midpoint; validation points only, each "
                "statement once (its representative), derived and interpolated points apart.");
  out.push_back(fmt::format("HEADLINE (abstract, introduction, conclusion numbers): {}", headline_all.text()));
  for (const auto& d : documents)
    if (headline.count(d)) out.push_back(fmt::format("  headline {}: {}", d, headline.at(d).text()));
  if (headline_not_counted)
    out.push_back(fmt::format("  ({} of {} tagged headline points are in no median: calibration, derived, "
                              "interpolated, trends or another run of their statement)",
                              headline_not_counted, headline_tagged));
  out.push_back(fmt::format("SEED DOCUMENTS, all validation points: {}", seed.text()));
  for (const auto& d : documents)
    if (seed_by_document.count(d)) out.push_back(fmt::format("  seed {}: {}", d, seed_by_document.at(d).text()));
  out.push_back(fmt::format("EXTERNAL on-device measurements (apart): {}", external.text()));
  if (sustained.n) {
    out.push_back(fmt::format("SUSTAINED use, public measurements (apart): {}", sustained.text()));
    for (const auto& [phone, s] : sustained_by_phone) out.push_back(fmt::format("  sustained {}: {}", phone, s.text()));
  }
  out.push_back(fmt::format("not in any median: derived {}; interpolated {}; other runs of a statement (sensitivity) {}",
                            derived.text(), interpolated.text(), sensitivity.text()));
  return out;
}

OnDeviceCoverage ondevice_coverage(const std::vector<Evaluation>& ev) {
  OnDeviceCoverage c;
  std::set<std::string> phones, runtimes, units;
  std::vector<double> val;
  for (const auto& e : ev) {
    const Point& p = *e.point;
    if (!p.probe.IsDefined() || !p.probe.IsMap() || p.probe["impl"].as<std::string>() != "ondevice") continue;
    ++c.points;
    auto field = [&](const char* key, const std::string& fallback) {
      return p.probe[key].IsDefined() ? p.probe[key].as<std::string>() : fallback;
    };
    phones.insert(field("device", ""));
    runtimes.insert(field("engine", "mllm"));  // the probe's default engine
    units.insert(field("unit", ""));
    if (p.calibration()) {
      ++c.calibration;
      continue;
    }
    ++c.validation;
    if (e.status != "ok" || p.kind == PublishedKind::kTrend) continue;
    const double a = std::abs(e.rel_error);
    val.push_back(a);
    if (a <= 0.25 + 1e-12) ++c.within_25;
    if (a > 0.5) {
      ++c.over_50;
      if (p.cause.empty()) ++c.over_50_unexplained;
    }
  }
  c.phones.assign(phones.begin(), phones.end());
  c.runtimes.assign(runtimes.begin(), runtimes.end());
  c.units.assign(units.begin(), units.end());
  c.median_validation = percentile(val, 0.5);
  c.p90_validation = percentile(val, 0.9);
  return c;
}

std::string OnDeviceCoverage::line() const {
  if (points == 0) return "";
  auto pct = [](double v) { return std::isfinite(v) ? fmt::format("{:.1f}%", 100 * v) : std::string("n/a"); };
  return fmt::format(
      "on-device: {} points ({} calibration, {} validation) over {} phones, {} runtimes ({}), units {}; validation "
      "error median {}, p90 {}, {} within 25%, {} over 50% ({} without a cause)",
      points, calibration, validation, phones.size(), runtimes.size(), fmt::join(runtimes, ", "), fmt::join(units, "/"),
      pct(median_validation), pct(p90_validation), within_25, over_50, over_50_unexplained);
}

OnDeviceGroups ondevice_groups(const std::vector<Evaluation>& ev) {
  std::map<std::pair<std::string, std::string>, OnDeviceGroup> by;
  std::map<std::pair<std::string, std::string>, std::vector<double>> errors;
  OnDeviceGroups g;
  g.all.engine = "all";
  std::vector<double> all_errors;
  for (const auto& e : ev) {
    const Point& p = *e.point;
    if (!p.probe.IsDefined() || !p.probe.IsMap() || !p.probe["impl"].IsDefined() ||
        p.probe["impl"].as<std::string>() != "ondevice")
      continue;
    const std::string engine = p.probe["engine"].IsDefined() ? p.probe["engine"].as<std::string>() : "mllm";
    const std::string unit = p.probe["unit"].IsDefined() ? p.probe["unit"].as<std::string>() : "";
    const auto key = std::make_pair(engine, unit);
    OnDeviceGroup& r = by[key];
    r.engine = engine;
    r.unit = unit;
    ++r.points;
    ++g.all.points;
    if (p.calibration()) {
      ++r.calibration;
      ++g.all.calibration;
      continue;
    }
    if (p.point_class() != "validation" || !p.counted()) {  // derived, interpolated, another run of a statement
      ++r.other;
      ++g.all.other;
      continue;
    }
    ++r.validation;
    ++g.all.validation;
    if (e.status != "ok" || p.kind == PublishedKind::kTrend) continue;
    const double a = std::abs(e.rel_error);
    errors[key].push_back(a);
    all_errors.push_back(a);
    if (a <= 0.25 + 1e-12) {
      ++r.within_25;
      ++g.all.within_25;
    }
  }
  for (auto& [key, r] : by) {
    r.error = error_stats(errors[key]);
    g.rows.push_back(r);
  }
  g.all.error = error_stats(all_errors);
  return g;
}

std::vector<std::string> OnDeviceGroups::lines() const {
  if (all.points == 0) return {};
  auto pct = [](const ErrorStats& s, double v) { return s.n ? fmt::format("{:.1f}%", 100 * v) : std::string("n/a"); };
  auto row = [&](const OnDeviceGroup& r) {
    const std::string name = r.unit.empty() ? r.engine : r.engine + " x " + r.unit;
    return fmt::format("{:<20} {:>6} {:>5} {:>5} {:>5} {:>9} {:>9} {:>9}", name, r.points, r.calibration, r.validation,
                       r.other, pct(r.error, r.error.median), pct(r.error, r.error.p90),
                       fmt::format("{}/{}", r.within_25, r.error.n));
  };
  std::vector<std::string> out;
  out.push_back("on-device validation |error| per engine x unit:");
  out.push_back(fmt::format("{:<20} {:>6} {:>5} {:>5} {:>5} {:>9} {:>9} {:>9}", "engine x unit", "points", "cal", "val",
                            "other", "median", "p90", "<=25%"));
  for (const auto& r : rows) out.push_back(row(r));
  out.push_back(row(all));
  return out;
}

std::vector<std::string> per_set_lines(const std::vector<Evaluation>& ev) {
  std::vector<std::string> sets;
  for (const auto& e : ev)
    if (std::find(sets.begin(), sets.end(), e.point->set_name) == sets.end()) sets.push_back(e.point->set_name);
  std::vector<std::string> out;
  for (const auto& name : sets) {
    std::vector<Evaluation> sub;
    for (const auto& e : ev)
      if (e.point->set_name == name) sub.push_back(e);
    out.push_back(name + ": " + summarize(sub).line());
  }
  return out;
}

std::string Summary::line() const {
  auto pct = [](double v) { return std::isfinite(v) ? fmt::format("{:.1f}%", 100 * v) : std::string("n/a"); };
  return fmt::format(
      "validation: {} numeric points, median error {}, p90 {}, {} within tolerance, {} over 25% ({} "
      "without a cause); calibration: {} points, median {}; trends {}/{} pass{}{}",
      validation_numeric, pct(median_validation), pct(p90_validation), within_tolerance, over_25,
      over_25_unexplained, calibration, pct(median_calibration), trends_passed, trends,
      failed ? fmt::format("; {} points failed", failed) : "",
      unavailable ? fmt::format("; {} unavailable", unavailable) : "");
}

std::string Summary::causes_line() const {
  auto pct = [](double v) { return std::isfinite(v) ? fmt::format("{:.1f}%", 100 * v) : std::string("n/a"); };
  std::vector<std::string> counts;
  for (const auto& k : kCauseKinds) counts.push_back(fmt::format("{} {}", cause_kinds.count(k) ? cause_kinds.at(k) : 0, k));
  counts.push_back(fmt::format("{} without a cause", cause_kinds.count("none") ? cause_kinds.at("none") : 0));
  return fmt::format("validation residual causes: {}; without the workload-attributed points: {} numeric points, "
                     "median error {}, p90 {}",
                     fmt::join(counts, ", "), not_workload, pct(median_not_workload), pct(p90_not_workload));
}

namespace {

std::string simulated_text(const Evaluation& e) {
  if (e.status != "ok") return "-";
  if (e.point->kind == PublishedKind::kTrend)
    return fmt::format("{} ({} values)", e.trend_pass ? e.point->trend : "no", e.series.size());
  return fmt::format("{:.4g}", e.simulated);
}

std::string error_text(const Evaluation& e) {
  if (e.status != "ok" || e.point->kind == PublishedKind::kTrend) return "";
  return fmt::format("{:+.1f}%", 100 * e.rel_error);
}

std::string mid_error_text(const Evaluation& e) {
  if (e.status != "ok" || e.point->kind == PublishedKind::kTrend) return "";
  return fmt::format("{:+.1f}%", 100 * e.mid_error);
}

}  // namespace

std::string format_report(const std::vector<Evaluation>& ev) {
  std::size_t w = 5;
  for (const auto& e : ev) w = std::max(w, e.point->id.size());
  // error: the distance to a range (0 inside); mid error: against its midpoint (what the medians use).
  // flags: H headline, R statement representative, s another run of a statement (sensitivity).
  std::string out = fmt::format("{:<{}}  {:>13}  {:>16}  {:>8}  {:>8}  {:<6}  {:<12}  {:<5}  {}\n", "point", w, "published",
                                "simulated", "error", "mid err", "unit", "class", "flags", "verdict");
  for (const auto& e : ev) {
    const Point& p = *e.point;
    std::string flags = p.headline ? "H" : "";
    if (!p.statement.empty()) flags.append(p.representative ? "R" : "s");
    out += fmt::format("{:<{}}  {:>13}  {:>16}  {:>8}  {:>8}  {:<6}  {:<12}  {:<5}  {}{}\n", p.id, w, p.published_text(),
                       simulated_text(e), error_text(e), mid_error_text(e), p.unit, p.point_class(), flags, e.verdict,
                       e.status != "ok" ? " (" + e.error.substr(0, 160) + ")" : "");
  }
  return out;
}

namespace {
std::vector<Point> points_of(const std::vector<Evaluation>& ev) {
  std::vector<Point> points;
  for (const auto& e : ev) points.push_back(*e.point);
  return points;
}
}  // namespace

std::string fitted_value_line(const std::vector<Evaluation>& ev) {
  const auto shared = validation_reading_a_fitted_value(points_of(ev));
  if (shared.empty()) return "";
  std::vector<std::string> pairs;
  for (const auto& [validation, calibration] : shared) pairs.push_back(fmt::format("{} (= {})", validation, calibration));
  return fmt::format("validation points that read the value a calibration point is fitted to (not independent of "
                     "the fit): {}: {}",
                     shared.size(), fmt::join(pairs, ", "));
}

h5::Table report_table(const std::vector<Evaluation>& ev) {
  const auto shared = validation_reading_a_fitted_value(points_of(ev));
  std::vector<std::string> id, document, set, source, quantity, unit, role, kind, verdict, status, cause, cause_kind, experiment,
      run_file, error, reads_fitted, cls, statement, scope, derived_from, interpolated_between;
  std::vector<double> published, lo, hi, simulated, rel, abs_rel, tol, mid, abs_mid;
  std::vector<std::int64_t> representative, headline, counted;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto& e : ev) {
    const Point& p = *e.point;
    id.push_back(p.id);
    document.push_back(p.document);
    set.push_back(p.set_name);
    source.push_back(p.source);
    quantity.push_back(p.quantity);
    unit.push_back(p.unit);
    role.push_back(p.role);
    kind.push_back(p.kind == PublishedKind::kValue ? "value" : p.kind == PublishedKind::kRange ? "range" : "trend");
    published.push_back(p.kind == PublishedKind::kTrend ? nan : p.reference());
    lo.push_back(p.kind == PublishedKind::kRange ? p.lo : nan);
    hi.push_back(p.kind == PublishedKind::kRange ? p.hi : nan);
    const bool numeric = e.status == "ok" && p.kind != PublishedKind::kTrend;
    simulated.push_back(e.status == "ok" ? e.simulated : nan);
    rel.push_back(numeric ? e.rel_error : nan);
    abs_rel.push_back(numeric ? std::abs(e.rel_error) : nan);
    tol.push_back(p.tolerance_rel);
    verdict.push_back(e.verdict);
    status.push_back(e.status);
    cause.push_back(p.cause);
    cause_kind.push_back(p.cause_kind);
    experiment.push_back(p.experiment.empty() ? "probe:" + p.probe["impl"].as<std::string>() : p.experiment);
    run_file.push_back(e.run_file);
    error.push_back(e.error);
    reads_fitted.push_back(shared.count(p.id) ? shared.at(p.id) : std::string());
    cls.push_back(p.point_class());
    statement.push_back(p.statement);
    representative.push_back(p.representative ? 1 : 0);
    headline.push_back(p.headline ? 1 : 0);
    scope.push_back(p.external ? "external" : "seed");
    mid.push_back(numeric ? e.mid_error : nan);
    abs_mid.push_back(numeric ? std::abs(e.mid_error) : nan);
    counted.push_back(in_medians(e) ? 1 : 0);
    derived_from.push_back(fmt::format("{}", fmt::join(p.derived_from, " ")));
    interpolated_between.push_back(fmt::format("{}", fmt::join(p.interpolated_between, " ")));
  }
  h5::Table t;
  t.add("id", id);
  t.add("document", document);
  t.add("set", set);
  t.add("source", source);
  t.add("quantity", quantity);
  t.add("unit", unit);
  t.add("role", role);
  t.add("kind", kind);
  t.add("published", published);
  t.add("published_low", lo);
  t.add("published_high", hi);
  t.add("simulated", simulated);
  t.add("rel_error", rel, "fraction");
  t.add("abs_rel_error", abs_rel, "fraction");
  t.add("tolerance_rel", tol, "fraction");
  t.add("verdict", verdict);
  t.add("status", status);
  t.add("cause", cause);
  t.add("cause_kind", cause_kind);
  t.add("experiment", experiment);
  t.add("run_file", run_file);
  t.add("error", error);
  t.add("reads_value_fitted_by", reads_fitted);
  // Issue 38's accounting: class, scope and statement group, flags, and the error against a range's midpoint.
  using Texts = std::vector<std::string>;
  for (const auto& [name, column] : std::vector<std::pair<std::string, const Texts*>>{
           {"class", &cls}, {"scope", &scope}, {"statement", &statement}, {"derived_from", &derived_from},
           {"interpolated_between", &interpolated_between}})
    t.add(name, *column);
  using Flags = std::vector<std::int64_t>;
  for (const auto& [name, column] : std::vector<std::pair<std::string, const Flags*>>{
           {"representative", &representative}, {"headline", &headline}, {"in_medians", &counted}})
    t.add(name, *column);
  t.add("mid_error", mid, "fraction");
  t.add("abs_mid_error", abs_mid, "fraction");
  return t;
}

namespace {

std::string markdown(const std::vector<Evaluation>& ev, const Summary& s) {
  std::string md = "# mobisim fidelity report\n\n";
  md += fmt::format("mobisim {}. Every published point beside mobisim's value; calibration points had a parameter "
                    "fitted to them, validation points did not.\n\n",
                    kVersion);
  for (const auto& l : honest_summary(ev).lines()) md += fmt::format("* {}\n", l);
  md += fmt::format("\nEvery validation-role point pooled, distances to ranges (the old accounting, not a headline): {}\n\n",
                    s.line());
  md += fmt::format("**{}**\n\n", s.causes_line());
  if (const auto f = fitted_value_line(ev); !f.empty()) md += fmt::format("**{}**\n\n", f);
  if (const auto od = ondevice_coverage(ev).line(); !od.empty()) md += fmt::format("**{}**\n\n", od);
  md += "Per document:\n\n";
  for (const auto& l : per_set_lines(ev)) md += "* " + l + "\n";
  md += "\n| point | source | published | simulated | error | mid error | unit | class | headline | statement | verdict | cause kind | cause |\n";
  md += "|---|---|---:|---:|---:|---:|---|---|---|---|---|---|---|\n";
  for (const auto& e : ev) {
    const Point& p = *e.point;
    std::string group = p.statement;
    if (!group.empty()) group.append(p.representative ? " (representative)" : " (sensitivity)");
    md += fmt::format("| `{}` | {}, {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", p.id, p.document,
                      p.source, p.published_text(), simulated_text(e), error_text(e), mid_error_text(e), p.unit,
                      p.point_class(), p.headline ? "yes" : "", group, e.verdict, p.cause_kind,
                      e.status == "ok" ? p.cause : e.error.substr(0, 200));
  }
  return md;
}

}  // namespace

void write_report(const std::vector<Evaluation>& ev, const std::string& out_dir, bool no_plot, bool quiet) {
  create_dirs(out_dir);
  const Summary s = summarize(ev);
  const h5::Table t = report_table(ev);
  const std::string h5_path = (fs::path(out_dir) / "fidelity.h5").string();
  {
    h5::Writer w(h5_path);
    auto root = w.root();
    h5::write_attr(root, "mobisim_version", kVersion);
    h5::write_attr(root, "summary", s.line());
    h5::write_attr(root, "causes_summary", s.causes_line());
    h5::write_attr(root, "fitted_value_summary", fitted_value_line(ev));
    h5::write_attr(root, "median_validation_error_not_workload", s.median_not_workload);
    h5::write_attr(root, "ondevice_summary", ondevice_coverage(ev).line());
    const HonestSummary hs = honest_summary(ev);
    h5::write_attr(root, "honest_summary", fmt::format("{}", fmt::join(hs.lines(), "\n")));
    h5::write_attr(root, "median_headline_error", hs.headline_all.median);
    h5::write_attr(root, "headline_points", static_cast<std::int64_t>(hs.headline_all.n));
    h5::write_attr(root, "median_seed_error", hs.seed.median);
    h5::write_attr(root, "seed_points", static_cast<std::int64_t>(hs.seed.n));
    h5::write_attr(root, "median_external_error", hs.external.median);
    h5::write_attr(root, "external_points", static_cast<std::int64_t>(hs.external.n));
    h5::write_attr(root, "median_validation_error", s.median_validation);
    h5::write_attr(root, "p90_validation_error", s.p90_validation);
    h5::write_attr(root, "validation_points", static_cast<std::int64_t>(s.validation_numeric));
    h5::write_attr(root, "calibration_points", static_cast<std::int64_t>(s.calibration));
    t.write(root, "points");
    w.commit();
  }
  write_text_atomically((fs::path(out_dir) / "fidelity.csv").string(), t.to_csv());
  write_text_atomically((fs::path(out_dir) / "fidelity.md").string(), markdown(ev, s));
  if (!quiet) std::cout << fmt::format("wrote {}, fidelity.csv, fidelity.md", h5_path);
  if (!no_plot) {
    std::string error;
    const std::string png = (fs::path(out_dir) / "fidelity.png").string();
    if (!run_plot("fidelity.py", h5_path, png, error))
      std::cerr << "\nwarning: " << error << "\n";
    else if (!quiet)
      std::cout << ", fidelity.png";
  }
  if (!quiet) std::cout << "\n";
}

}  // namespace mobisim::experiments::fidelity
