#include "experiments/fidelity/ondevice_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "experiments/experiment.h"
#include "experiments/fidelity/calibrate.h"
#include "experiments/fidelity/fidelity.h"
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
  s.text("notes", std::string(""), "free text: the measured run, the evidence behind a mechanism it depends on");
  s.text("cause_kind", std::string(""), "workload | mechanism | document (the fidelity registry's rule)")
      .in({"", "workload", "mechanism", "document"});
  // The fidelity registry's grouping keys (registry.h); checked there.
  s.text("statement", std::string(""), "the published statement several points score (registry.h)");
  s.boolean("representative", false, "the statement group's member that counts (registry.h)");
  s.boolean("headline", false, "an abstract / introduction / conclusion number (registry.h)");
  s.text("cell", std::string(""), "the table cell quoted when one source repeats a value (registry.h)");
  return s;
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

namespace {

// `mobisim ondevice` is a view of `mobisim fidelity --set ondevice` (the same loader, evaluation and
// summary), and `--fit` is `mobisim calibrate` restricted to the on-device parameters of
// experiments/published/calibration.yaml: one registry, one fitter (GSL).
namespace fid = ::mobisim::experiments::fidelity;

int cmd_ondevice(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim ondevice [FILE.yaml] [--fit [--profile NAME]... [--only KEY]... [--out DIR]] [-p engine.KEY=V]...",
                   "The on-device section of `mobisim fidelity` (sets ondevice and transfer): every published on-device point "
                   "(phone x runtime x unit x phase) beside mobisim's prediction, with the median validation error overall and per engine x unit; "
                   "--fit runs `mobisim calibrate` on the on-device parameters of calibration.yaml only, against the calibration "
                   "points of both sets (a parameter with points in both is fitted to all of them).");
  a.positional("FILES", "registry file (default: the ondevice and transfer sets of experiments/published)", false);
  a.flag("fit", "fit the on-device calibration points' parameters (mobisim calibrate) and print them");
  a.repeated("profile", "", "NAME", "--fit: fit only the parameters of this engine/device profile (the others keep their initial value)");
  a.repeated("only", "", "KEY", "--fit: fit only this parameter (KEY or PROFILE:KEY), as mobisim calibrate --only");
  a.option("out", "DIR", "--fit: where the fitted engine/device profiles go", "results/fidelity/calibrated-ondevice");
  a.repeated("set", "p", "PATH=VALUE", "override applied to every probe (device./engine./model.)");
  if (!a.parse(args)) return kExitOk;
  const std::string root = ::mobisim::experiments::source_root() + "/experiments/published";
  // Both sets: the ondevice set and the transfer set (ondevice_transfer.yaml, ondevice_cells.yaml; issue 37), whose
  // rule-chosen calibration points are fitted too (docs/ondevice_data.md), so --fit reads both.
  const std::vector<fid::Point> points = a.maybe("FILES") ? fid::load_registry_file(*a.maybe("FILES"))
                                                          : fid::load_registry(root, {"ondevice", "transfer"});
  if (a.flag_set("fit")) {
    const auto spec = fid::CalibrationSpec::load(root + "/calibration.yaml").restricted_to(points);
    fid::CalibrateOptions o;
    o.evaluate.runs.quiet = true;
    o.only = fid::parameters_of_profiles(spec, a.all("profile"));
    for (const auto& key : a.all("only")) o.only.push_back(key);
    const fid::FitResult fit = fid::calibrate(spec, points, o);
    for (std::size_t j = 0; j < spec.parameters.size(); ++j)
      if (fit.free[j])
        std::cout << fmt::format("{} {}={:.6g} (was {:.6g})\n", spec.parameters[j].profile, spec.parameters[j].key,
                                 fit.fitted[j], fit.initial[j]);
    for (std::size_t i = 0; i < fit.points.size(); ++i)
      std::cout << fmt::format("  {} published {}: {:.4g} -> {:.4g} ({:+.1f}%)\n", fit.points[i]->id,
                               fit.points[i]->published_text(), fit.before[i], fit.after[i],
                               100 * fid::relative_error(*fit.points[i], fit.after[i]));
    for (const auto& path : fid::write_fitted_profiles(spec, fit, a.get("out"))) std::cout << "wrote " << path << "\n";
    return kExitOk;
  }
  fid::EvaluateOptions o;
  o.runs.quiet = true;
  for (const auto& p : points) o.candidates[p.id] = a.all("set");
  const auto ev = fid::evaluate(points, o);
  std::cout << fid::format_report(ev);
  std::cout << fid::ondevice_coverage(ev).line() << "\n";
  // Per engine x unit: every set together, then each set apart when several are loaded.
  std::vector<std::string> sets;
  for (const auto& p : points)
    if (std::find(sets.begin(), sets.end(), p.set_name) == sets.end()) sets.push_back(p.set_name);
  for (const auto& l : fid::ondevice_groups(ev).lines()) std::cout << l << "\n";
  if (sets.size() > 1)
    for (const auto& set : sets) {
      std::vector<fid::Evaluation> part;
      for (const auto& e : ev)
        if (e.point->set_name == set) part.push_back(e);
      const auto lines = fid::ondevice_groups(part).lines();
      if (lines.empty()) continue;
      std::cout << "set " << set << ": ";
      for (const auto& l : lines) std::cout << l << "\n";
    }
  const fid::Summary s = fid::summarize(ev);
  std::cout << s.causes_line() << "\n" << s.line() << "\n";
  return s.failed ? kExitFailure : kExitOk;
}

}  // namespace
}  // namespace mobisim::fidelity

MOBISIM_REGISTER_COMMAND("ondevice", "published on-device throughputs (phones x runtimes x units) beside mobisim's",
                         "mobisim ondevice [FILE] [--fit [--profile NAME]]", mobisim::fidelity::cmd_ondevice)
