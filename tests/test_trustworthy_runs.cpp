// Trustworthy runs: statistics never read a dead simulator, any thread count gives the same
// file, device profiles are complete or refused, and configuration mistakes stop the run with
// their location instead of changing it silently.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "devices/device.h"
#include "experiments/simulation.h"
#include "sim/error.h"
#include "sim/event.h"
#include "sim/h5.h"
#include "sim/resource.h"
#include "sim/simulator.h"
#include "sim/stats.h"
#include "test_util.h"

namespace mobisim {
namespace {

using testing::run_mobisim;
using testing::TempDir;

sim::Task<void> step_profile(sim::Simulator& s, sim::TimeWeighted& q) {
  q.set(2);                        // 2 on [0, 10)
  co_await s.timeout(10);
  q.set(5);                        // 5 on [10, 40)
  co_await s.timeout(30);
  q.set(1);                        // 1 on [40, 100)
  co_await s.timeout(60);
}

// The simulator closes what it clocks: the mean is over [0, end of simulation] = (2*10 + 5*30 + 1*60)/100,
// computed from plain values after the simulator is gone; changing it afterwards is a checked error.
TEST(TrustworthyStats, TimeWeightedIsClosedWhenItsSimulatorEnds) {
  sim::StatGroup group("g");
  sim::TimeWeighted* q = nullptr;
  {
    auto s = std::make_unique<sim::Simulator>();
    q = &group.time_weighted(*s, "queue", "requests", "queue length");
    s->start(step_profile(*s, *q));
    s->run();
    EXPECT_FALSE(q->closed());  // still open while its simulator exists
  }                             // the simulator dies here, long before the statistic is read
  ASSERT_TRUE(q->closed());
  EXPECT_EQ(q->end(), 100);
  EXPECT_DOUBLE_EQ(q->mean(), (2.0 * 10 + 5.0 * 30 + 1.0 * 60) / 100.0);
  EXPECT_DOUBLE_EQ(q->max(), 5.0);
  EXPECT_THROW(q->set(7), Error);
  // Writing the tree reads only the frozen values (ASan/valgrind would flag any other read).
  TempDir dir;
  {
    h5::Writer w(dir.file("stats.h5"));
    {
      H5::Group root = w.root();
      group.write(root);
    }
    w.commit();
  }
  h5::Reader r(dir.file("stats.h5"));
  EXPECT_DOUBLE_EQ(r.attr_double("/g/queue", "mean"), 2.3);
}

sim::Task<void> wait_for(sim::Simulator& s, sim::Time d) { co_await s.timeout(d); }

TEST(TrustworthyStats, AStatisticThatDiesFirstUnregistersItself) {
  sim::Simulator s;
  {
    sim::StatGroup group("short-lived");
    auto& q = group.time_weighted(s, "x", "u", "doc");
    q.set(1);
  }  // the group (and the statistic) die while the simulator lives on
  s.start(wait_for(s, 5));
  s.run();
  s.shutdown();  // must not touch the dead statistic
  SUCCEED();
}

TEST(TrustworthyStats, ShutdownClosesStatisticsAtTheCurrentTimeAndIsIdempotent) {
  sim::Simulator s;
  sim::StatGroup group("g");
  auto& q = group.time_weighted(s, "x", "u", "doc");
  q.set(4);
  s.run_until(50);
  s.shutdown();
  s.shutdown();
  EXPECT_TRUE(q.closed());
  EXPECT_EQ(q.end(), 50);
  EXPECT_DOUBLE_EQ(q.mean(), 4.0);
  EXPECT_THROW(s.start(wait_for(s, 1)), Error);
}

sim::Task<void> hold_forever(sim::Simulator& s, sim::Resource& r, sim::Event never) {
  auto lease = co_await r.acquire();
  co_await never;  // nobody triggers it: the process never finishes
  (void)s;
}

// A process that never finishes still holds a lease on a device unit when the run ends: its frame
// is destroyed by SimulatedRun::run() while the device exists (ASan would report the other order).
TEST(TrustworthyStats, SimulatedRunTearsDownUnfinishedProcessesWhileTheDeviceLives) {
  sim::StatGroup stats("run");
  const auto profile = devices::load_device_profile("pixel7");
  {
    experiments::SimulatedRun run(profile, stats.child("device"));
    sim::Event never(run.sim());
    run.start(hold_forever(run.sim(), run.device().unit_queue("cpu"), never), "stuck");
    run.run();
    EXPECT_TRUE(run.sim().shut_down());
  }
  h5::Writer w(TempDir().file("x.h5"));  // stats of a finished run are plain values
  SUCCEED();
}

// --------------------------------------------------------------------------------------------
// Device profiles: complete or refused; inheritance; overrides into built-in names.
// --------------------------------------------------------------------------------------------
TEST(TrustworthyProfiles, APartialProfileIsRefusedNamingTheFirstMissingField) {
  YAML::Node partial = YAML::Load(
      "name: peaks-only\n"
      "base_power_w: 0.5\n"
      "compute:\n"
      "  cpu: {peak_tflops: {fp32: 0.2, int8: 1.0}, mem_bandwidth_gbps: 50}\n"
      "dram: {capacity_gb: 8, bandwidth_gbps: 50, reserved_gb: 2}\n");
  try {
    devices::DeviceProfile::from_yaml(partial, ConfigSource{std::make_shared<std::string>("phone.yaml"), ""});
    FAIL() << "a profile without efficiencies and powers must not load";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("phone.yaml:4:"), std::string::npos) << msg;  // file and line of the unit
    EXPECT_NE(msg.find("missing required key 'compute.cpu.compute_efficiency'"), std::string::npos) << msg;
  }
}

TEST(TrustworthyProfiles, EveryBuiltInProfileIsComplete) {
  for (const auto& name : devices::builtin_device_names()) {
    const auto d = devices::load_device_profile(name);
    // The resolved YAML loads back to the same profile (what results store and reruns read).
    const auto again = devices::DeviceProfile::from_yaml(d.resolved, ConfigSource{});
    EXPECT_EQ(yaml_to_string(again.resolved), yaml_to_string(d.resolved)) << name;
    for (const auto& [unit, spec] : d.compute) EXPECT_GT(spec.bandwidth_efficiency, 0) << name << "/" << unit;
  }
}

TEST(TrustworthyProfiles, BaseInheritsEveryFieldAndOverridesSome) {
  const auto pixel = devices::load_device_profile("pixel7");
  YAML::Node derived = YAML::Load("{base: pixel7, storage: {seq_read_gbps: 2}, compute: {cpu: {call_overhead_us: 1}}}");
  const auto d = devices::DeviceProfile::from_yaml(derived, ConfigSource{});
  EXPECT_EQ(d.name, "pixel7");
  EXPECT_DOUBLE_EQ(d.storage->seq_read_gbps, 2.0);
  EXPECT_DOUBLE_EQ(d.storage->seq_write_gbps, pixel.storage->seq_write_gbps);
  EXPECT_DOUBLE_EQ(d.compute.at("cpu").call_overhead_us, 1.0);
  EXPECT_DOUBLE_EQ(d.compute.at("cpu").compute_efficiency, pixel.compute.at("cpu").compute_efficiency);
  EXPECT_EQ(d.compute.size(), pixel.compute.size());
  EXPECT_THROW(devices::DeviceProfile::from_yaml(YAML::Load("{base: no-such-phone}"), ConfigSource{}), ConfigError);
}

// One-policy, one-user slice of the quick start: fast, and enough to see a device change.
std::string tiny_quickstart(const TempDir& dir) {
  const std::string path = dir.file("tiny.yaml");
  testing::write_text(path,
                      "name: tiny\nseed: 3\nexperiment:\n  impl: rag_qa\n  device: pixel7\n"
                      "  model: {base: llama-3.2-3b, weight_dtype: int4, activation_dtype: fp32, kv_dtype: fp32,\n"
                      "          linear_dtypes: {v_proj: int6, ffn_down: int6}}\n"
                      "  workload: {generate: default, max_users: 1, max_queries_per_user: 4}\n"
                      "  pipeline: {compute_unit: cpu, top_k: 3}\n"
                      "  policies: [{impl: naive}]\n");
  return path;
}

double mean_prefill(const std::string& h5_path) {
  h5::Reader r(h5_path);
  return r.doubles("/summary/mean_prefill_s").at(0);
}

TEST(TrustworthyProfiles, OverridesOfABuiltInDeviceChangeTheResultsTheyShould) {
  TempDir dir;
  const std::string cfg = tiny_quickstart(dir);
  const std::string common = " --no-plot --quiet --output ";
  ASSERT_EQ(run_mobisim("run " + cfg + common + dir.file("a.h5")).exit_code, 0);
  // `base: pixel7` with nothing overridden is the same device: the same bytes.
  auto b = run_mobisim("run " + cfg + " -p 'experiment.device={base: pixel7}'" + common + dir.file("b.h5"));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(testing::read_bytes(dir.file("a.h5")).size() > 0, true);
  EXPECT_DOUBLE_EQ(mean_prefill(dir.file("a.h5")), mean_prefill(dir.file("b.h5")));
  // Doubling the CPU's GEMM efficiency on the built-in name (0.0387082): prefill (compute-bound at
  // 39.9 GFLOP/s achieved on its Q4_K projections) takes a little over half as long (per-operator
  // overheads do not shrink).
  auto c = run_mobisim("run " + cfg + " -p experiment.device.compute.cpu.compute_efficiency=0.0774164" + common +
                       dir.file("c.h5"));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const double ratio = mean_prefill(dir.file("c.h5")) / mean_prefill(dir.file("a.h5"));
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.56);
  // The change is recorded in the resolved configuration stored with the results.
  h5::Reader r(dir.file("c.h5"));
  const YAML::Node stored = YAML::Load(r.attr_string("/", "config"));
  EXPECT_DOUBLE_EQ(stored["experiment"]["device"]["compute"]["cpu"]["compute_efficiency"].as<double>(), 0.0774164);
  EXPECT_DOUBLE_EQ(stored["experiment"]["device"]["compute"]["cpu"]["gemv_compute_efficiency"].as<double>(), 0.138814);
}

// --------------------------------------------------------------------------------------------
// The resolved configuration reruns to an identical file.
// --------------------------------------------------------------------------------------------
TEST(TrustworthyConfig, TheStoredResolvedYamlRerunsToAnIdenticalFile) {
  TempDir dir;
  const std::string cfg = tiny_quickstart(dir);
  ASSERT_EQ(run_mobisim("run " + cfg + " --no-plot --quiet --output " + dir.file("first.h5")).exit_code, 0);
  std::string stored;
  {
    h5::Reader r(dir.file("first.h5"));
    stored = r.attr_string("/", "config");
  }
  // Every default is there: a pipeline default the tiny config never wrote, a policy default, the model.
  const YAML::Node y = YAML::Load(stored);
  EXPECT_TRUE(y["experiment"]["pipeline"]["system_prompt_tokens"].IsDefined());
  EXPECT_TRUE(y["experiment"]["device"]["storage"]["queue_depth"].IsDefined());
  EXPECT_EQ(y["experiment"]["model"]["n_layers"].as<int>(), 28);
  testing::write_text(dir.file("resolved.yaml"), stored);
  auto again = run_mobisim("run " + dir.file("resolved.yaml") + " --no-plot --quiet --output " + dir.file("second.h5"));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  // The same simulation: the same stored configuration, summary and records. Only where each file
  // came from differs (the config_file attribute names the YAML it was run from).
  const h5::Reader first(dir.file("first.h5")), second(dir.file("second.h5"));
  EXPECT_EQ(first.attr_string("/", "config"), second.attr_string("/", "config"));
  EXPECT_EQ(first.table("/summary").to_csv(), second.table("/summary").to_csv());
  EXPECT_EQ(first.table("/runs/naive/records").to_csv(), second.table("/runs/naive/records").to_csv());
  EXPECT_EQ(first.attr_string("/", "config_file"), cfg);
  EXPECT_EQ(second.attr_string("/", "config_file"), dir.file("resolved.yaml"));
  // `mobisim config` prints the same YAML.
  auto printed = run_mobisim("config " + cfg);
  ASSERT_EQ(printed.exit_code, 0) << printed.output;
  EXPECT_NE(printed.output.find(stored.substr(0, 200)), std::string::npos);
}

// --------------------------------------------------------------------------------------------
// Config hygiene: each mistake is exit 3 with its location.
// --------------------------------------------------------------------------------------------
TEST(TrustworthyConfig, DuplicateKeysAreRefusedWithBothLines) {
  TempDir dir;
  const std::string cfg = tiny_quickstart(dir);
  std::string text = testing::read_bytes(cfg);
  text.insert(text.find("experiment:"), "seed: 4\n");  // seed given at line 2 and again at line 3
  testing::write_text(cfg, text);
  auto r = run_mobisim("validate " + cfg);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("tiny.yaml:3:1: duplicate key 'seed' (first given at line 2)"), std::string::npos)
      << r.output;
}

TEST(TrustworthyConfig, EmptyGranularitiesAreRefused) {
  auto r = run_mobisim("validate " + testing::source_dir() + "/experiments/prefix_cache/ttft.yaml -p 'experiment.granularities=[]'");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("-p 'experiment.granularities=[]': key 'experiment.granularities': expected a non-empty list"),
            std::string::npos)
      << r.output;
}

TEST(TrustworthyConfig, ABadOverrideValueNamesTheOverride) {
  TempDir dir;
  auto r = run_mobisim("validate " + tiny_quickstart(dir) + " -p experiment.pipeline.top_k=abc");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("-p 'experiment.pipeline.top_k=abc': key 'experiment.pipeline.top_k': expected an integer"),
            std::string::npos)
      << r.output;
  auto big = run_mobisim("validate " + tiny_quickstart(dir) + " -p experiment.workload.max_users=9223372036854775808");
  EXPECT_EQ(big.exit_code, 3) << big.output;
  EXPECT_NE(big.output.find("expected an integer"), std::string::npos) << big.output;
}

TEST(TrustworthyConfig, TopKBeyondTheTracesRetrievalIsAnErrorNotAMixedRun) {
  TempDir dir;
  auto r = run_mobisim("validate " + tiny_quickstart(dir) + " -p experiment.pipeline.top_k=5");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("pipeline.top_k = 5 but the workload's queries carry only 3 precomputed retrieved chunks"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("-p 'experiment.pipeline.top_k=5'"), std::string::npos) << r.output;
}

TEST(TrustworthyConfig, ValidateChecksTheWorkloadAsRunWould) {
  TempDir dir;
  auto r = run_mobisim("validate " + tiny_quickstart(dir) + " -p 'experiment.workload={trace: " + dir.file("none.h5") + "}'");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("none.h5"), std::string::npos) << r.output;
}

// --------------------------------------------------------------------------------------------
// Determinism across thread counts: every driver, byte for byte.
// --------------------------------------------------------------------------------------------
void expect_identical_across_threads(const std::string& args, const std::string& tag) {
  TempDir dir;
  std::string first;
  for (int threads : {1, 2, 3, 8, 16}) {
    const std::string out = dir.file(tag + "_t" + std::to_string(threads) + ".h5");
    auto r = run_mobisim(args + " --no-plot --quiet --threads " + std::to_string(threads) + " --output " + out);
    ASSERT_EQ(r.exit_code, 0) << tag << " threads " << threads << ": " << r.output;
    const std::string bytes = testing::read_bytes(out);
    ASSERT_FALSE(bytes.empty());
    if (first.empty())
      first = bytes;
    else
      EXPECT_TRUE(bytes == first) << tag << ": threads " << threads << " differs from threads 1";
  }
}

TEST(TrustworthyDeterminism, QuickStartIsIdenticalAtAnyThreadCount) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  expect_identical_across_threads("run " + testing::source_dir() + "/experiments/quickstart.yaml", "quickstart");
}

TEST(TrustworthyDeterminism, EveryDriverIsIdenticalAtAnyThreadCount) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  const std::string e = testing::source_dir() + "/experiments/";
  expect_identical_across_threads("run " + e + "prefix_cache/ttft.yaml", "prefix_cache");
  expect_identical_across_threads("run " + e + "kvpr_cake/fig3.yaml", "kvpr_cake");
  expect_identical_across_threads("run " + e + "percache/table1.yaml", "percache_overhead");
  expect_identical_across_threads("run " + e + "percache/fig14_generated.yaml", "fig14_generated");
  expect_identical_across_threads("run " + e + "coordgen/fig8_schedules.yaml", "coordgen_schedule");
  // DynaKV: three (length, session) units of three variants each, replayed side by side (threads 2
  // and 3) or each split into groups of variants (8 and 16).
  expect_identical_across_threads("run " + e + "dynakv/fig12.yaml -p 'experiment.decode_lengths=[256,384,512]'",
                                  "dynakv");
}

// DynaKV's and CoordGen's figures, shrunk: table 6 (four models, each one stream replayed once for
// every decode length), table 2 (four simulated layers), figure 14 (DRAM caches: one replay per
// length, twelve variants split into groups at 8 and 16 threads), table 5's generator (session
// statistics of whole sessions); CoordGen's Table 4 on its calibrated workload (on the real kernel below).
TEST(TrustworthyDeterminism, DynaKvAndCoordGenFiguresAreIdenticalAtAnyThreadCount) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  const std::string e = testing::source_dir() + "/experiments/";
  const std::string short_session = " -p experiment.prefill=128";
  expect_identical_across_threads(
      "run " + e + "dynakv/table6.yaml -p 'experiment.decode_lengths=[64,256,128]'" + short_session, "dynakv_table6");
  expect_identical_across_threads("run " + e + "dynakv/table2.yaml -p 'experiment.decode_lengths=[96]'" + short_session,
                                  "dynakv_table2");
  expect_identical_across_threads(
      "run " + e + "dynakv/fig14.yaml -p 'experiment.decode_lengths=[64,96]'" + short_session, "dynakv_fig14");
  expect_identical_across_threads(
      "run " + e + "dynakv/table5_generator.yaml -p 'experiment.decode_lengths=[64]'" + short_session,
      "dynakv_table5_generator");
  expect_identical_across_threads("run " + e + "coordgen/table4_calibrated_workload.yaml", "coordgen_table4_calibrated");
}

// CoordGen's Table 4 on the real kernel reads the trained 260K checkpoint from ../shared/models.
TEST(TrustworthyDeterminism, CoordGenOnTheRealKernelIsIdenticalAtAnyThreadCount) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  const std::string shared = testing::shared_dir();
  if (shared.empty() || !std::filesystem::exists(shared + "/models/stories260K.bin"))
    GTEST_SKIP() << "checkpoint not found (../shared/models/stories260K.bin): table4_kernel runs the real kernel";
  const std::string e = testing::source_dir() + "/experiments/";
  expect_identical_across_threads("run " + e +
                                      "coordgen/table4_kernel.yaml -p experiment.workload.kernel_users=3 "
                                      "-p experiment.workload.kernel_requests=1 -p experiment.workload.max_output_tokens=24",
                                  "coordgen_table4_kernel");
}

TEST(TrustworthyDeterminism, ReproducePercacheFig14IsIdenticalAtAnyThreadCount) {
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  const std::string shared = testing::shared_dir();
  if (shared.empty() || !std::filesystem::exists(shared + "/data/qmsum/val"))
    GTEST_SKIP() << "QMSum data not found (../shared/data/qmsum): fig14 replays the real meetings";
  TempDir dir;
  std::string first;
  for (int threads : {1, 3, 8, 16}) {
    auto r = testing::run_mobisim_in(dir.path().string(), "reproduce percache --only fig14 --no-plot --quiet --shared '" +
                                                              shared + "' --threads " + std::to_string(threads));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string bytes = testing::read_bytes(dir.file("results/percache/fig14.h5"));
    ASSERT_FALSE(bytes.empty()) << r.output;
    if (first.empty())
      first = bytes;
    else
      EXPECT_TRUE(bytes == first) << "fig14 at threads " << threads << " differs from threads 1";
  }
}

TEST(TrustworthyDeterminism, ReproduceWithThreadsRunsFiguresAsChildrenWithTheSameFilesAndOutput) {
  // With --threads 3 the three figures run as child processes side by side; what is printed (in set
  // order), every result file and the plots handed back to the parent are those of --threads 1.
  MOBISIM_SKIP_HEAVY_UNDER_SANITIZERS();
  TempDir one, three;
  const auto a = testing::run_mobisim_in(one.path().string(), "reproduce kvpr_cake --quiet --threads 1");
  const auto b = testing::run_mobisim_in(three.path().string(), "reproduce kvpr_cake --quiet --threads 3");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(b.output.find("== kvpr_cake/fig3 ==\n== kvpr_cake/error ==\n== kvpr_cake/phones =="), std::string::npos)
      << b.output;
  for (const char* name : {"fig3", "error", "phones"}) {
    const std::string stem = std::string("results/kvpr_cake_").append(name);
    const std::string h5 = testing::read_bytes(one.file(stem + ".h5"));
    ASSERT_FALSE(h5.empty()) << name;
    EXPECT_TRUE(h5 == testing::read_bytes(three.file(stem + ".h5"))) << name;
    EXPECT_EQ(testing::read_bytes(one.file(stem + "_summary.csv")), testing::read_bytes(three.file(stem + "_summary.csv")));
    // Plots are drawn by the parent from the children's queues, as with one thread (when matplotlib is there).
    EXPECT_EQ(std::filesystem::exists(one.file(stem + ".png")), std::filesystem::exists(three.file(stem + ".png")))
        << name;
  }
}

// --------------------------------------------------------------------------------------------
// Timeline: one Perfetto process per simulated run, filterable.
// --------------------------------------------------------------------------------------------
std::vector<std::string> process_names(const std::string& json) {
  std::vector<std::string> names;
  const std::string marker = R"("name":"process_name","args":{"name":")";
  for (auto at = json.find(marker); at != std::string::npos; at = json.find(marker, at + 1)) {
    const auto begin = at + marker.size();
    names.push_back(json.substr(begin, json.find('"', begin) - begin));
  }
  return names;
}

TEST(TrustworthyTimeline, QuickStartHasOneProcessPerPolicyAndUser) {
  TempDir dir;
  auto r = run_mobisim("run " + testing::source_dir() + "/experiments/quickstart.yaml --no-plot --quiet --threads 4 " +
                       "--output " + dir.file("q.h5") + " --timeline " + dir.file("t.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto names = process_names(testing::read_bytes(dir.file("t.json")));
  ASSERT_EQ(names.size(), 7u * 5u);  // 7 policies x 5 users
  EXPECT_EQ(names.front(), "naive / gen000");
  EXPECT_EQ(names.back(), "percache / gen004");
  // Filtered: two policies, one user, the first simulated hour.
  auto f = run_mobisim("run " + testing::source_dir() + "/experiments/quickstart.yaml --no-plot --quiet --output " +
                       dir.file("q2.h5") + " --timeline " + dir.file("f.json") +
                       " --timeline-filter 'policy=naive|percache,user=gen001,to_s=3600'");
  ASSERT_EQ(f.exit_code, 0) << f.output;
  const std::string json = testing::read_bytes(dir.file("f.json"));
  EXPECT_EQ(process_names(json), (std::vector<std::string>{"naive / gen001", "percache / gen001"}));
  EXPECT_LT(json.size(), testing::read_bytes(dir.file("t.json")).size() / 10);
  auto bad = run_mobisim("run " + testing::source_dir() + "/experiments/quickstart.yaml --no-plot --quiet --output " +
                         dir.file("q3.h5") + " --timeline " + dir.file("b.json") + " --timeline-filter 'phone=x'");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("unknown key 'phone'"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace mobisim
