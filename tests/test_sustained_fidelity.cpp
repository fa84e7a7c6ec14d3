// The sustained-use fidelity set (experiments/published/sustained_public.yaml): the registry loads it,
// every point's probe runs a phone experiment, at most a third calibrates (only thermal-preset RC values),
// the calibration candidates reach the sustained probes of the preset's phones, and the metrics read a
// hand-made result file as computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "experiments/fidelity/calibrate.h"
#include "experiments/fidelity/probe.h"
#include "experiments/fidelity/registry.h"
#include "experiments/fidelity/sustained_probe.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "sim/registry.h"
#include "test_util.h"

namespace mobisim {
namespace {

using namespace experiments::fidelity;
using testing::TempDir;

const std::string kRegistry = std::string(MOBISIM_SOURCE_DIR) + "/experiments/published";

TEST(SustainedFidelity, RegistryLoadsTheSetApartWithAtMostAThirdCalibrating) {
  const auto points = load_registry(kRegistry, {"sustained"});
  ASSERT_GE(points.size(), 15u);
  std::set<std::string> phones;
  std::size_t numeric = 0, calibration = 0;
  for (const auto& p : points) {
    EXPECT_EQ(p.set_name, "sustained") << p.id;
    EXPECT_TRUE(p.external) << p.id;
    ASSERT_TRUE(p.probe.IsMap()) << p.id;
    EXPECT_EQ(p.probe["impl"].as<std::string>(), "sustained") << p.id;
    phones.insert(p.probe["device"].as<std::string>());
    if (p.kind == PublishedKind::kTrend) continue;
    ++numeric;
    if (!p.calibration()) continue;
    ++calibration;
    // Only the thermal preset's RC values are fitted to sustained points.
    for (const auto& f : p.fitted) EXPECT_TRUE(f.starts_with("device.thermal.")) << p.id << ": " << f;
  }
  EXPECT_GE(phones.size(), 4u);
  EXPECT_GE(calibration, 1u);
  EXPECT_LE(3 * calibration, numeric);
  EXPECT_TRUE(check_roles(points).empty());
  // calibration.yaml fits them as fields of the preset, and the whole registry still passes its checks.
  const auto all = load_registry(kRegistry);
  const auto spec = CalibrationSpec::load(kRegistry + "/calibration.yaml");
  const auto problems = check_calibration(spec, all);
  EXPECT_TRUE(problems.empty()) << (problems.empty() ? "" : problems.front());
  std::size_t thermal = 0;
  for (const auto& f : spec.parameters)
    if (f.key.starts_with("device.thermal.")) {
      ++thermal;
      EXPECT_EQ(f.profile, "phone-passive");
    }
  EXPECT_EQ(thermal, 3u);
}

TEST(SustainedFidelity, EveryPointsProbeRuns) {
  const auto points = load_registry(kRegistry, {"sustained"});
  for (const auto& p : points) {
    ConfigSource src{std::make_shared<std::string>(p.file), p.id + ".probe", nullptr};
    const auto probe = Registry<fidelity::Probe>::instance().create(p.probe, src);
    const double v = probe->evaluate({});
    EXPECT_TRUE(std::isfinite(v)) << p.id;
    EXPECT_GE(v, 0.0) << p.id;
  }
}

TEST(SustainedFidelity, ThermalPresetCandidatesReachTheSustainedProbesOfItsPhones) {
  auto probe = [](const std::string& id, const std::string& yaml) {
    Point p;
    p.id = id;
    p.probe = YAML::Load(yaml);
    return p;
  };
  const Point p7 = probe("p7", "{impl: sustained, device: pixel-7-pro, unit: gpu}");       // pixel7's thermal: section
  const Point s24 = probe("s24", "{impl: sustained, device: galaxy-s24-ultra, unit: gpu}");  // its own, base phone-passive
  const Point od = probe("od", "{impl: ondevice, device: pixel7, unit: cpu, phase: decode}");  // no thermal model
  const Point none = probe("none", "{impl: sustained, device: oneplus-12, unit: gpu}");  // no thermal: section
  FreeParameter f;
  f.key = "device.thermal.skin_to_ambient_k_per_w";
  f.profile = "phone-passive";
  f.points = {"p7"};
  CalibrationSpec spec;
  spec.parameters = {f};
  const auto o = candidates_for(spec, {4.5}, {p7, s24, od, none});
  EXPECT_EQ(o.at("p7"), (std::vector<std::string>{"device.thermal.skin_to_ambient_k_per_w=4.5"}));
  EXPECT_EQ(o.at("s24"), (std::vector<std::string>{"device.thermal.skin_to_ambient_k_per_w=4.5"}));
  EXPECT_EQ(o.count("od"), 0u);
  EXPECT_EQ(o.count("none"), 0u);
  EXPECT_TRUE(fidelity::device_thermal_inherits_from("pixel-8-pro", "phone-passive"));
  EXPECT_FALSE(fidelity::device_thermal_inherits_from("oneplus-12", "phone-passive"));
}

TEST(SustainedFidelity, ACandidateChangesTheRun) {
  // The preset's skin-to-ambient resistance moves a Pixel 7 Pro's peak skin temperature under a long load.
  const YAML::Node node = YAML::Load(
      "{impl: sustained, device: pixel-7-pro, unit: gpu, extra_units: [cpu], model: qwen2.5-1.5b, requests: 40, "
      "prompt_tokens: 64, output_tokens: 256, metric: peak_skin_c}");
  const auto probe = Registry<fidelity::Probe>::instance().create(node, ConfigSource{std::make_shared<std::string>("t"), ""});
  const double low = probe->evaluate({{"device.thermal.skin_to_ambient_k_per_w=2.0"}, ""});
  const double high = probe->evaluate({{"device.thermal.skin_to_ambient_k_per_w=6.0"}, ""});
  EXPECT_GT(high, low + 1.0);
  EXPECT_THROW(probe->evaluate({{"experiment.seed=3"}, ""}), ConfigError);
}

// A hand-made result file: three requests and a six-sample series, every value computed by hand.
TEST(SustainedFidelity, MetricsOfAHandMadeResultFile) {
  const TempDir dir;
  const std::string path = dir.file("r.h5");
  {
    h5::Writer w(path);
    h5::Table rec;
    rec.add("first_token_s", std::vector<double>{1, 12, 33}, "s");
    rec.add("end_s", std::vector<double>{11, 32, 58}, "s");
    rec.add("output_tokens", std::vector<double>{101, 101, 101}, "tokens");
    rec.write(w.group("runs/shared.chat"), "records");
    h5::Table th;
    th.add("t_s", std::vector<double>{0, 1, 20, 30, 40, 60}, "s");
    th.add("junction_c", std::vector<double>{25, 26, 50, 70, 80, 75}, "C");
    th.add("skin_c", std::vector<double>{25, 25, 30, 35, 38, 39}, "C");
    th.add("soc_power_w", std::vector<double>{1, 5, 5, 4, 3, 3}, "W");
    th.add("battery_percent", std::vector<double>{100, 99.9, 99, 98.5, 98, 97}, "%");
    th.add("throttled", std::vector<std::int64_t>{0, 0, 0, 1, 1, 1}, "bool");
    th.add("gpu_mhz", std::vector<double>{300, 900, 900, 600, 300, 300}, "MHz");
    th.write(w.group("tables"), "thermal.shared");
    w.commit();
  }
  fidelity::SustainedRun run = fidelity::read_sustained_run(path, "gpu");
  run.battery_capacity_j = 36000;
  auto metric = [&](const std::string& yaml) {
    const YAML::Node n = YAML::Load(yaml);
    fidelity::SustainedMetric m;
    m.metric = n["metric"].as<std::string>();
    if (n["requests_of"]) m.requests_of = n["requests_of"].as<std::vector<double>>();
    if (n["reference"]) m.reference_requests = n["reference"].as<std::vector<double>>();
    if (n["window"]) m.window = n["window"].as<std::vector<double>>();
    if (n["reference_window"]) m.reference_window = n["reference_window"].as<std::vector<double>>();
    if (n["loss"]) m.loss = n["loss"].as<double>();
    if (n["window_s"]) m.window_s = n["window_s"].as<double>();
    return fidelity::sustained_metric(run, m);
  };
  // Rates: 100 tokens in 10, 20 and 25 s = 10, 5 and 4 tokens/s.
  EXPECT_DOUBLE_EQ(metric("{metric: rate_ratio, requests_of: [2, 3], reference: [1, 1]}"), 4.5 / 10);
  EXPECT_DOUBLE_EQ(metric("{metric: rate, requests_of: [1, 2]}"), 7.5);
  EXPECT_DOUBLE_EQ(metric("{metric: first_request_below, loss: 0.4}"), 2);  // 5 < 0.6 x 10
  // The clock reaches its top (900) at 1 s; the 300 MHz at 0 s is the governor's ramp, no floor. Capped at
  // its floor from 40 s: requests 1 and 2 (ending at 11 and 32 s) were done; the junction then was 80 C.
  EXPECT_DOUBLE_EQ(metric("{metric: requests_before_floor}"), 2);
  EXPECT_DOUBLE_EQ(metric("{metric: junction_at_floor_c}"), 80);
  EXPECT_DOUBLE_EQ(metric("{metric: floor_mhz}"), 300);
  // Below 0.9 x 900 while capped from 30 s: minute 1.
  EXPECT_DOUBLE_EQ(metric("{metric: time_to_loss, loss: 0.1}"), 30);
  EXPECT_DOUBLE_EQ(metric("{metric: minute_of_loss, loss: 0.1}"), 1);
  EXPECT_DOUBLE_EQ(metric("{metric: peak_junction_c}"), 80);
  EXPECT_DOUBLE_EQ(metric("{metric: peak_skin_c}"), 39);
  // Junction 25 -> 50 C in 20 s.
  EXPECT_DOUBLE_EQ(metric("{metric: heating_rate, window_s: 20}"), 1.25);
  // The battery lost 99 - 97 = 2 % of 36 kJ in the 40 s from 20 to 60 s: 18 W.
  EXPECT_NEAR(metric("{metric: mean_power_w, window: [20, 60]}"), 18.0, 1e-9);
  EXPECT_NEAR(metric("{metric: battery_drop_pct}"), 3.0, 1e-12);
  // Requests ending in [30, 60] s: 200 tokens in 45 s; in [0, 15] s: 100 in 10 s.
  EXPECT_NEAR(metric("{metric: window_rate_ratio, window: [30, 60], reference_window: [0, 15]}"), (200.0 / 45) / 10, 1e-12);
  // Mean clock over [20, 40] s: 900 for 10 s, 600 for 10 s = 750; over [1, 20]: 900.
  EXPECT_NEAR(metric("{metric: clock_ratio, window: [20, 40], reference_window: [1, 20]}"), 750.0 / 900, 1e-12);
  // Peak of each request's junction: request 2 (11-32 s) reaches 70 C at 30 s and 72 C at 32 s (between
  // 70 at 30 s and 80 at 40 s); request 3 (32-58 s) 80 C.
  EXPECT_NEAR(metric("{metric: junction_max_mean, requests_of: [2, 3]}"), (72.0 + 80.0) / 2, 1e-12);
  EXPECT_THROW(metric("{metric: rate, requests_of: [2, 4]}"), ConfigError);       // only 3 requests
  EXPECT_THROW(metric("{metric: mean_power_w, window: [20, 90]}"), ConfigError);  // after the run
}

}  // namespace
}  // namespace mobisim
