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
  cli::ArgParser a("mobisim ondevice [FILE.yaml] [--fit [--out DIR]] [-p engine.KEY=V]...",
                   "The on-device section of `mobisim fidelity` (set ondevice): every published on-device point "
                   "(phone x runtime x unit x phase) beside mobisim's prediction, with the median validation error overall and per engine x unit; "
                   "--fit runs `mobisim calibrate` on the on-device parameters of calibration.yaml only.");
  a.positional("FILES", "registry file (default: the ondevice and transfer sets of experiments/published; --fit: the "
                         "ondevice set)", false);
  a.flag("fit", "fit the on-device calibration points' parameters (mobisim calibrate) and print them");
  a.option("out", "DIR", "--fit: where the fitted engine/device profiles go", "results/fidelity/calibrated-ondevice");
  a.repeated("set", "p", "PATH=VALUE", "override applied to every probe (device./engine./model.)");
  if (!a.parse(args)) return kExitOk;
  const std::string root = ::mobisim::experiments::source_root() + "/experiments/published";
  // The report covers the fitted registry (set ondevice) and the transfer set (ondevice_transfer.yaml: points no
  // parameter was fitted on, issue 37); --fit stays on the ondevice set, whose values the engine profiles hold.
  const std::vector<fid::Point> points =
      a.maybe("FILES")       ? fid::load_registry_file(*a.maybe("FILES"))
      : a.flag_set("fit")    ? fid::load_registry(root, {"ondevice"})
                             : fid::load_registry(root, {"ondevice", "transfer"});
  if (a.flag_set("fit")) {
    const auto spec = fid::CalibrationSpec::load(root + "/calibration.yaml").restricted_to(points);
    fid::CalibrateOptions o;
    o.evaluate.runs.quiet = true;
    const fid::FitResult fit = fid::calibrate(spec, points, o);
    for (std::size_t j = 0; j < spec.parameters.size(); ++j)
      std::cout << fmt::format("{} {}={:.4g}\n", spec.parameters[j].profile, spec.parameters[j].key, fit.fitted[j]);
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
                         "mobisim ondevice [FILE] [--fit]", mobisim::fidelity::cmd_ondevice)
