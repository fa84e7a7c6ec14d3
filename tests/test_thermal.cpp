// Sustained use (devices/thermal.h, devices/power_manager.h): the RC ladder against its hand-solved
// step response, a trip capping a clock at the hand-computed time, energy as the integral of power,
// and a fixed top clock reproducing `thermal: none` exactly.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "devices/device.h"
#include "devices/power_manager.h"
#include "devices/thermal.h"
#include "experiments/simulation.h"
#include "policies/apps/app.h"
#include "sim/registry.h"
#include "sim/error.h"
#include "test_util.h"

namespace mobisim {
namespace {

using devices::ThermalNetwork;
using namespace mobisim::testing;

// A network whose junction is a negligible node glued to the skin: one RC node (C = 100 J/K,
// R = 2 K/W to the air), whose step response is T_a + P R (1 - exp(-t / (R C))).
devices::ThermalSpec one_node_spec() {
  devices::ThermalSpec s;
  s.junction_capacity_j_per_k = 1e-3;
  s.junction_to_skin_k_per_w = 1e-4;
  s.skin_capacity_j_per_k = 100;
  s.skin_to_ambient_k_per_w = 2;
  return s;
}

TEST(Thermal, OneNodeStepResponseIsTheHandSolvedExponential) {
  const devices::ThermalSpec spec = one_node_spec();
  const ThermalNetwork net(spec);
  const ThermalNetwork::Input in{5.0, 0.0, 25.0};
  for (double t : {10.0, 200.0, 1000.0}) {
    const ThermalNetwork::State s = net.advance({25, 25}, in, t);
    const double expected = 25 + 5 * 2 * (1 - std::exp(-t / (2 * (100 + 1e-3))));
    EXPECT_NEAR(s.skin_c, expected, 1e-6) << t;
    EXPECT_NEAR(s.junction_c, expected + 5 * 1e-4, 1e-6) << t;  // the glued node sits P R_js above
  }
}

TEST(Thermal, TwoNodeSteadyStateAndStepsComposeExactly) {
  devices::ThermalSpec spec = one_node_spec();
  spec.junction_capacity_j_per_k = 20;
  spec.junction_to_skin_k_per_w = 6;
  const ThermalNetwork net(spec);
  const ThermalNetwork::Input in{4.0, 1.0, 20.0};
  // Steady: the skin carries all 5 W to the air, the junction its 4 W through R_js.
  const ThermalNetwork::State ss = net.steady(in);
  EXPECT_DOUBLE_EQ(ss.skin_c, 20 + 5 * 2);
  EXPECT_DOUBLE_EQ(ss.junction_c, 30 + 4 * 6);
  const ThermalNetwork::State far = net.advance({20, 20}, in, 1e5);
  EXPECT_NEAR(far.junction_c, 54, 1e-9);
  // Closed form: one step of 300 s equals 100 s then 200 s.
  const ThermalNetwork::State a = net.advance({20, 20}, in, 300);
  const ThermalNetwork::State b = net.advance(net.advance({20, 20}, in, 100), in, 200);
  EXPECT_NEAR(a.junction_c, b.junction_c, 1e-9);
  EXPECT_NEAR(a.skin_c, b.skin_c, 1e-9);
  // The root finder lands on the crossing of the closed form.
  const auto t = net.first_rise_to({20, 20}, in, devices::Sensor::junction, 40.0, 1e5);
  ASSERT_TRUE(t.has_value());
  EXPECT_NEAR(net.advance({20, 20}, in, *t).junction_c, 40.0, 1e-6);
  EXPECT_FALSE(net.first_rise_to({20, 20}, in, devices::Sensor::junction, 60.0, 1e5).has_value());  // above steady
}

// A phone with one CPU (0 W idle, 5 W busy at its 2000 MHz top point, 1.25 W at 1000 MHz) and the
// one-node network above; a skin trip at 30 C caps the CPU.
devices::DeviceProfile hot_phone(const std::string& trips) {
  const std::string yaml = fmt::format(R"(
name: hot-phone
base_power_w: 0
compute:
  cpu: {{peak_tflops: {{fp16: 1.0}}, mem_bandwidth_gbps: 50, compute_efficiency: 0.5, gemv_compute_efficiency: 0.5,
        bandwidth_efficiency: 0.5, call_overhead_us: 0, active_power_w: 5, idle_power_w: 0}}
dram: {{capacity_gb: 8, bandwidth_gbps: 50, reserved_gb: 2}}
battery: {{capacity_mah: 1000, voltage_v: 4}}
thermal:
  junction_capacity_j_per_k: 0.001
  junction_to_skin_k_per_w: 0.0001
  skin_capacity_j_per_k: 100
  skin_to_ambient_k_per_w: 2
  passive_polling_ms: 1000
  schedutil_rate_limit_us: 1000
  pelt_half_life_ms: 32
  charging_efficiency: 0.9
  units:
    cpu: {{opp_mhz: [1000, 2000], opp_power_w: [1.25, 5]}}
  trips: {}
)",
                                       trips);
  return devices::DeviceProfile::from_yaml(YAML::Load(yaml), ConfigSource{});
}

devices::SustainedOptions options(const std::string& yaml) {
  return devices::SustainedOptions::from_yaml(YAML::Load(yaml), ConfigSource{});
}

sim::Task<void> hold(devices::Device& d, double seconds) { co_await d.busy("cpu", sim::from_seconds(seconds), "work"); }

TEST(Thermal, ASkinTripCapsTheClockAtTheHandComputedTime) {
  const devices::DeviceProfile phone =
      hot_phone("[{sensor: skin, temp_c: 30, hysteresis_c: 1, units: [cpu]}]");
  sim::StatGroup stats("device");
  experiments::SimulatedRun run(phone, stats, nullptr, options("{governor: performance, ambient_c: 25}"));
  run.start(hold(run.device(), 300), "work");
  run.run();
  // 5 W into 2 K/W from 25 C: 30 C at t = -RC ln(1 - 5 / 10) = 200.0002 s x ln 2.
  const double t_trip = 2 * (100 + 1e-3) * std::log(2.0);
  const auto& series = run.device().power()->series();
  double first_capped = -1;
  for (const auto& s : series)
    if (s.mhz.at(0) < 2000) {
      first_capped = s.t_s;
      break;
    }
  EXPECT_NEAR(first_capped, t_trip, 1e-3);
  // Before the trip the 300 s of work ran at 2000 MHz; what was left runs at half speed (the work
  // in progress was re-planned), unless a later poll raised the cap again.
  const double done_s = sim::to_seconds(run.sim().now());
  EXPECT_GT(done_s, 300.0 + 1.0);
  EXPECT_GT(run.device().power()->summary().time_throttled_s, 0.0);
}

TEST(Thermal, EnergyIsTheIntegralOfPowerAtTheOperatingPoint) {
  const devices::DeviceProfile phone = hot_phone("[]");
  sim::StatGroup stats("device");
  experiments::SimulatedRun run(phone, stats, nullptr, options("{governor: powersave}"));
  run.start(hold(run.device(), 10), "work");  // 10 s at the top clock = 20 s at 1000 MHz
  run.run();
  EXPECT_EQ(run.sim().now(), sim::from_seconds(20));
  // 20 s at 1.25 W (powersave point), nothing else drawn.
  EXPECT_NEAR(run.device().energy_j(), 20 * 1.25, 1e-9);
  // The battery lost exactly that: 1000 mAh x 4 V = 14400 J.
  EXPECT_NEAR(run.device().power()->battery_percent(), 100.0 * (1 - 25.0 / 14400.0), 1e-9);
}

TEST(Thermal, ChargingWindowsRefillTheBatteryAndHeatTheSkin) {
  const devices::DeviceProfile phone = hot_phone("[]");
  sim::StatGroup stats("device");
  experiments::SimulatedRun run(
      phone, stats, nullptr,
      options("{governor: performance, battery: {start_percent: 50, charging: [{start_s: 0, end_s: 100, power_w: 10}]}}"));
  run.start(hold(run.device(), 100), "work");
  run.run();
  // 100 s busy at 5 W while the charger stores 0.9 x 10 W: +4 W x 100 s = +400 J of 14400 J.
  EXPECT_NEAR(run.device().power()->battery_percent(), 50 + 100.0 * 400 / 14400, 1e-9);
  // 5 W into the junction and 1 W of charging losses into the skin: hotter than 5 W alone.
  const double five_watts_only = 25 + 5 * 2 * (1 - std::exp(-100 / (2 * (100 + 1e-3))));
  EXPECT_GT(run.device().power()->skin_c(), five_watts_only + 0.5);
}

TEST(Thermal, AFixedTopClockGivesTheSameTimesAsThermalNone) {
  if (sanitized_build()) GTEST_SKIP() << "runs the binary twice; covered by the Release build";
  const std::string dir = (std::filesystem::temp_directory_path() / "mobisim_thermal_fixed").string();
  std::filesystem::create_directories(dir);
  const std::string config = source_dir() + "/experiments/sustained/decode_cold_warm.yaml";
  // Six requests (about 215 s of CPU decode): the junction peaks near 87 C, below the 95 C trip, with the
  // fitted phone-passive values (20 requests reach it since the fit: a run that throttles is not this test).
  const auto none = run_mobisim(fmt::format(
      "run '{}' --force --quiet -p experiment.apps.0.requests=6 -p experiment.thermal=none -p output={}/none.h5", config, dir));
  ASSERT_EQ(none.exit_code, 0) << none.output;
  const auto fixed = run_mobisim(fmt::format(
      "run '{}' --force --quiet -p experiment.apps.0.requests=6 -p experiment.thermal.governor=fixed -p "
      "'experiment.thermal.fixed_mhz={{cpu: 2850, gpu: 850}}' -p output={}/fixed.h5",
      config, dir));
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  const std::string a = read_bytes(dir + "/none_summary.csv"), b = read_bytes(dir + "/fixed_summary.csv");
  // Every latency column is equal to the nanosecond (the run never reaches a trip at the top clock);
  // the sustained-use columns are extra.
  auto field = [](const std::string& csv, const std::string& col) {
    const auto header_end = csv.find('\n');
    const std::string header = csv.substr(0, header_end), row = csv.substr(header_end + 1, csv.find('\n', header_end + 1) - header_end - 1);
    std::size_t index = 0, pos = 0;
    for (std::size_t next; (next = header.find(',', pos)) != std::string::npos && header.substr(pos, next - pos) != col;
         pos = next + 1)
      ++index;
    std::size_t start = 0;
    for (std::size_t i = 0; i < index; ++i) start = row.find(',', start) + 1;
    return row.substr(start, row.find(',', start) - start);
  };
  for (const char* col : {"mean_latency_s", "p99_latency_s", "mean_ttft_s", "mean_tpot_s"})
    EXPECT_EQ(field(a, col), field(b, col)) << col;
  EXPECT_NE(b.find("peak_skin_c"), std::string::npos);
  EXPECT_EQ(a.find("peak_skin_c"), std::string::npos);
}

TEST(Thermal, AThrottledRunIsIdenticalAtOneAndTwoThreads) {
  if (sanitized_build()) GTEST_SKIP() << "runs the binary twice; covered by the Release build";
  const std::string dir = (std::filesystem::temp_directory_path() / "mobisim_thermal_threads").string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // The ranking experiment from a warm phone on a warm day: every app is throttled.
  const std::string config = dir + "/warm.yaml";
  std::string text = read_bytes(source_dir() + "/experiments/sustained/ranking_warm.yaml");
  text.replace(text.find("start: cold, ambient_c: 25"), 26, "start: warm, ambient_c: 30");
  write_text(config, text);
  EXPECT_EQ(same_bytes_at_one_and_two_threads(config, dir + "/a.h5", dir + "/b.h5"), "");
  const std::string csv = read_bytes(dir + "/a_summary.csv");
  EXPECT_NE(csv.find("time_throttled_s"), std::string::npos);
}

TEST(Thermal, BadThermalSettingsAreConfigErrorsNamingTheKey) {
  EXPECT_THROW(options("hot"), ConfigError);
  EXPECT_THROW(options("{governor: turbo}"), ConfigError);
  EXPECT_THROW(options("{governor: fixed}"), ConfigError);  // no fixed_mhz
  const devices::DeviceProfile phone = hot_phone("[]");
  EXPECT_THROW(options("{governor: fixed, fixed_mhz: {cpu: 500}}").check_against(phone, "thermal"), ConfigError);
  EXPECT_THROW(options("{governor: fixed, fixed_mhz: {gpu: 1000}}").check_against(phone, "thermal"), ConfigError);
  try {
    hot_phone("[{sensor: skin, temp_c: 30, hysteresis_c: 1, units: [gpu]}]");
    FAIL() << "a trip on a unit without operating points must be an error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gpu"), std::string::npos) << e.what();
  }
  // A phone without a thermal model under thermal: profile names what to do.
  devices::DeviceProfile bare = phone;
  bare.thermal.reset();
  try {
    options("profile").check_against(bare, "experiment.thermal");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("thermal: none"), std::string::npos) << e.what();
  }
}

TEST(Thermal, ABackgroundAppWaitsUntilTheTripIsReleased) {
  // A warm phone (40 C) above its 30 C skin trip, idle at 0 W: the skin cools as 25 + 15 exp(-t / RC)
  // (RC = 200.0002 s). The trip engages at once (first poll, t = 0) and is released by the poll after
  // the skin falls below 30 - 1 = 29 C: t = RC ln(15 / 4) = 264.35 s, so the poll at 265 s. The
  // background chat looks every 30 s: its first request starts at 270 s.
  const devices::DeviceProfile phone = hot_phone("[{sensor: skin, temp_c: 30, hysteresis_c: 1, units: [cpu]}]");
  const YAML::Node node = YAML::Load(
      "{impl: chat, priority: background, background_recheck_s: 30, model: {base: qwen2.5-0.5b, weight_dtype: int8, "
      "activation_dtype: fp16, kv_dtype: fp16}, unit: cpu, requests: 1, prompt_tokens: 16, output_tokens: 2}");
  auto app = Registry<policies::App>::instance().create(node, ConfigSource{});
  app->prepare(policies::AppEnvironment{});
  sim::StatGroup stats("device");
  experiments::SimulatedRun run(
      phone, stats, nullptr,
      options("{start: warm, warm_c: 40, ambient_c: 25, background_headroom_c: 0, governor: performance}"));
  sim::StatGroup app_stats("chat");
  run.start(app->run(run.device(), "chat", app_stats), "chat");
  run.run();
  h5::Table records;
  app->records(records);
  const auto& start = std::get<std::vector<double>>(records.column("start_s"));
  const auto& arrival = std::get<std::vector<double>>(records.column("arrival_s"));
  ASSERT_EQ(start.size(), 1u);
  EXPECT_DOUBLE_EQ(arrival[0], 0.0);
  EXPECT_DOUBLE_EQ(start[0], 270.0);
}

TEST(Thermal, DaemonEventsNeverKeepAFinishedRunGoing) {
  sim::Simulator s;
  int fired = 0;
  s.schedule_daemon_call(sim::from_seconds(100), [&] { ++fired; });
  s.schedule_call(sim::from_seconds(1), [&] {});
  s.run();
  EXPECT_EQ(s.now(), sim::from_seconds(1));
  EXPECT_EQ(fired, 0);
}

}  // namespace
}  // namespace mobisim
