#include "experiments/fidelity/ondevice_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "sim/cli.h"
#include "sim/error.h"
#include "sim/registry.h"

namespace mobisim::fidelity {

namespace {

ParamSchema point_schema() {
  ParamSchema s;
  s.text("id", std::nullopt, "ondevice.<phone>.<engine>.<model>.<unit>.<phase>");
  s.text("source", std::nullopt, "citation");
  s.text("quantity", std::string(""), "what was measured");
  s.real("published", std::nullopt, "the published value").positive();
  s.text("unit", std::string("tokens_per_s"), "unit of `published`");
  s.text("role", std::nullopt, "calibration or validation").in({"calibration", "validation"});
  s.node("probe", "{impl: ondevice, ...}");
  s.text_list("fitted", std::vector<std::string>{}, "parameters fitted to this point (calibration)");
  s.text("cause", std::string(""), "why the residual is large (validation points over 50%)");
  return s;
}

// Which engine's parameter a fitted path belongs to: "engine.cpu...." is relative to the point's engine.
std::string qualified(const OnDevicePoint& p, const std::string& path) {
  return path.rfind("engine.", 0) == 0 ? p.query.engine + ":" + path : p.query.device + ":" + path;
}

}  // namespace

std::vector<OnDevicePoint> load_ondevice_points(const std::string& path) {
  const YAML::Node root = load_yaml_file(path);
  const ConfigSource src{std::make_shared<std::string>(path), ""};
  if (!root.IsMap() || !root["points"].IsDefined() || !root["points"].IsSequence())
    throw ConfigError(fmt::format("{}: expected a mapping with `document` and a list `points`", path));
  std::vector<OnDevicePoint> out;
  std::set<std::string> ids;
  ParamSchema ps = point_schema();
  const YAML::Node pts = root["points"];
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const Params p(pts[i], ps, src.child("points").element(i), {});
    OnDevicePoint pt;
    pt.id = p.text("id");
    if (!ids.insert(pt.id).second) p.fail("id", fmt::format("duplicate point id '{}'", pt.id));
    pt.source = p.text("source");
    pt.quantity = p.text("quantity");
    pt.published = p.real("published");
    pt.unit = p.text("unit");
    pt.role = p.text("role");
    pt.cause = p.text("cause");
    pt.fitted = p.text_list("fitted");
    if (pt.role == "validation" && !pt.fitted.empty()) p.fail("fitted", "a validation point cannot be fitted to");
    const YAML::Node probe = p.node("probe");
    auto made = Registry<Probe>::instance().create(probe, p.source_of("probe"));
    const auto* od = dynamic_cast<const OnDeviceProbe*>(made.get());
    if (!od) p.fail("probe", "expected impl: ondevice");
    pt.query = od->query();
    if (pt.unit != pt.query.metric) p.fail("unit", fmt::format("unit '{}' differs from the probe's metric '{}'", pt.unit, pt.query.metric));
    out.push_back(pt);
  }
  return out;
}

std::vector<OnDeviceRow> evaluate_ondevice(const std::vector<OnDevicePoint>& points,
                                           const std::vector<std::string>& overrides) {
  std::vector<OnDeviceRow> rows;
  for (const auto& p : points) {
    OnDeviceRow r{&p};
    r.simulated = ondevice_prediction(p.query, overrides);
    r.error = (r.simulated - p.published) / p.published;
    rows.push_back(r);
  }
  return rows;
}

std::vector<std::string> fit_ondevice(const std::vector<OnDevicePoint>& points, double lo, double hi) {
  // Parameters in the order first named, with their calibration points.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const OnDevicePoint*>> users;
  std::map<std::string, std::string> path_of;
  for (const auto& p : points) {
    if (p.role != "calibration") continue;
    for (const auto& f : p.fitted) {
      const std::string q = qualified(p, f);
      if (!users.count(q)) order.push_back(q);
      users[q].push_back(&p);
      path_of[q] = f;
    }
  }
  std::map<std::string, std::string> fitted;  // qualified -> "path=value"
  std::vector<std::string> out;
  for (const auto& q : order) {
    auto log_ratio = [&](double value) {
      double s = 0;
      for (const OnDevicePoint* p : users[q]) {
        std::vector<std::string> ov;
        for (const auto& [other, assign] : fitted)
          if (other.substr(0, other.find(':')) == q.substr(0, q.find(':'))) ov.push_back(assign);
        ov.push_back(fmt::format("{}={}", path_of[q], value));
        s += std::log(ondevice_prediction(p->query, ov) / p->published);
      }
      return s / static_cast<double>(users[q].size());
    };
    // Solve log_ratio = 0 by bisection on a log scale: the direction (does the prediction grow with the
    // parameter?) comes from the ends of the range. Efficiencies live in (0, 1], overheads (_ms, _us) above.
    const std::string& path = path_of[q];
    const bool overhead = path.size() > 3 && (path.ends_with("_ms") || path.ends_with("_us"));
    double a = std::log(lo), b = std::log(overhead ? 1e3 : hi);
    const double ra = log_ratio(std::exp(a)), rb = log_ratio(std::exp(b));
    if ((ra < 0) == (rb < 0)) {
      a = b = std::abs(ra) < std::abs(rb) ? a : b;  // no root in range: the closer end
    } else {
      for (int it = 0; it < 60; ++it) {
        const double m = 0.5 * (a + b);
        if ((log_ratio(std::exp(m)) < 0) == (ra < 0)) a = m; else b = m;
      }
    }
    const std::string assign = fmt::format("{}={:.4g}", path_of[q], std::exp(0.5 * (a + b)));
    fitted[q] = assign;
    out.push_back(q.substr(0, q.find(':')) + " " + assign);
  }
  return out;
}

namespace {

int cmd_ondevice(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim ondevice [FILE.yaml]... [--fit] [-p engine.KEY=V]...",
                   "Sets mobisim's prediction beside every published on-device point (phone x runtime x unit x "
                   "phase) of the fidelity registry, with the median validation error; --fit solves the "
                   "parameters named by the calibration points.");
  a.positional("FILES", "registry files (default: experiments/published/ondevice_*.yaml)", false);
  a.flag("fit", "fit the calibration points' parameters and print them");
  a.repeated("set", "p", "PATH=VALUE", "override applied to every probe (device./engine./model.)");
  if (!a.parse(args)) return kExitOk;
  std::vector<std::string> files;
  if (auto f = a.maybe("FILES")) {
    files.push_back(*f);
  } else {
    namespace fs = std::filesystem;
    const fs::path dir = "experiments/published";
    if (fs::is_directory(dir))
      for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string().rfind("ondevice_", 0) == 0 && e.path().extension() == ".yaml")
          files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) throw UsageError("no experiments/published/ondevice_*.yaml here: run from the source tree or name a file");
  }
  std::vector<OnDevicePoint> points;
  for (const auto& f : files) {
    auto p = load_ondevice_points(f);
    points.insert(points.end(), p.begin(), p.end());
  }
  if (a.flag_set("fit")) {
    for (const auto& line : fit_ondevice(points)) std::cout << line << "\n";
    return kExitOk;
  }
  const auto rows = evaluate_ondevice(points, a.all("set"));
  std::cout << fmt::format("{:<58} {:>11} {:>11} {:>8}  {}\n", "point", "published", "simulated", "error", "role");
  std::vector<double> val;
  std::set<std::string> phones, engines, units;
  int calibration = 0, within25 = 0, over50_unexplained = 0;
  for (const auto& r : rows) {
    const auto& p = *r.point;
    std::cout << fmt::format("{:<58} {:>11.4g} {:>11.4g} {:>+7.1f}%  {}{}\n", p.id, p.published, r.simulated,
                             100 * r.error, p.role, std::abs(r.error) > 0.5 && !p.cause.empty() ? " (cause given)" : "");
    phones.insert(p.query.device);
    engines.insert(p.query.engine);
    units.insert(p.query.unit);
    if (p.role == "calibration") {
      ++calibration;
      continue;
    }
    val.push_back(std::abs(r.error));
    if (std::abs(r.error) <= 0.25) ++within25;
    if (std::abs(r.error) > 0.5 && p.cause.empty()) ++over50_unexplained;
  }
  std::sort(val.begin(), val.end());
  auto pct = [&](double q) { return val.empty() ? 0.0 : val[static_cast<std::size_t>(q * (val.size() - 1) + 0.5)]; };
  std::cout << fmt::format(
      "{} points ({} calibration, {} validation) over {} phones, {} runtimes, units {}; validation |error|: median "
      "{:.1f}%, p90 {:.1f}%, {} within 25%, {} over 50% without a cause\n",
      rows.size(), calibration, val.size(), phones.size(), engines.size(), fmt::join(units, "/"), 100 * pct(0.5),
      100 * pct(0.9), within25, over50_unexplained);
  return kExitOk;
}

}  // namespace
}  // namespace mobisim::fidelity

MOBISIM_REGISTER_COMMAND("ondevice", "published on-device throughputs (phones x runtimes x units) beside mobisim's",
                         "mobisim ondevice [FILE] [--fit]", mobisim::fidelity::cmd_ondevice)
