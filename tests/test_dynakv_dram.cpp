// DynaKV's DRAM ledger (issue 34, experiments/dynakv_dram.h): each decode step holds the weights
// and what the pipeline keeps in DRAM for its composed latency, on the run's phone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "devices/device.h"
#include "devices/dram.h"
#include "experiments/dynakv_dram.h"
#include "experiments/experiment.h"
#include "models/model_spec.h"
#include "policies/kvcluster/session_replay.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "sim/stats.h"
#include "test_kvcluster_util.h"
#include "traces/kv_session.h"

namespace mobisim {
namespace {

using experiments::DynaKvDramLedger;
using experiments::DynaKvDramUse;

double stat_value(const sim::StatGroup& g, const std::string& name) {
  for (const auto& [path, value] : g.flatten())
    if (path.ends_with(name)) return value;
  ADD_FAILURE() << "no statistic " << name;
  return -1;
}

// Three steps beside 1000 B of weights: 135 B for 1 us, 315 B for 3 us, 200 B for 1 us.
// Peak: 1000 + 315. Time-weighted: 1000 + (135 x 1 + 315 x 3 + 200 x 1) / 5 = 1256.
TEST(DynaKvDramLedger, HoldsEachStepForItsLatencyByHand) {
  const devices::DeviceProfile phone = devices::load_device_profile("oneplus-12");
  sim::StatGroup device("device");
  {
    DynaKvDramLedger ledger(phone, 1000, device);
    EXPECT_DOUBLE_EQ(ledger.used_bytes(), 1000.0);
    ledger.hold_for({100, 10, 20, 5}, 1000);
    EXPECT_DOUBLE_EQ(ledger.used_bytes(), 1135.0);
    ledger.hold_for({300, 10, 0, 5}, 3000);
    ledger.hold_for({200, 0, 0, 0}, 1000);
    EXPECT_EQ(ledger.now(), 5000);
    ledger.finish();
    EXPECT_DOUBLE_EQ(ledger.used_bytes(), 0.0);  // everything given back
    EXPECT_DOUBLE_EQ(ledger.peak_bytes(), 1315.0);
    EXPECT_DOUBLE_EQ(ledger.mean_bytes(), 1256.0);
  }
  // The statistic outlives the ledger, where a Device writes it: device/dram/used_bytes.
  EXPECT_DOUBLE_EQ(stat_value(device, "dram.used_bytes.mean"), 1256.0);
}

// A step that moves bytes from one owner to another never counts both at once: the ledger
// releases what shrinks before it reserves what grows.
TEST(DynaKvDramLedger, APeakIsNeverTwoStepsAtOnce) {
  const devices::DeviceProfile phone = devices::load_device_profile("oneplus-12");
  sim::StatGroup device("device");
  DynaKvDramLedger ledger(phone, 0, device);
  ledger.hold_for({300, 0, 0, 0}, 10);
  ledger.hold_for({0, 0, 300, 0}, 10);
  ledger.hold_for({0, 0, 0, 300}, 10);
  ledger.finish();
  EXPECT_DOUBLE_EQ(ledger.peak_bytes(), 300.0);
  EXPECT_DOUBLE_EQ(ledger.mean_bytes(), 300.0);
}

// Weights that do not fit stop the run at once; a step that does not fit stops it when it comes,
// naming DRAM, the owner and the sizes (exit code 1: the phone ran out of DRAM).
TEST(DynaKvDramLedger, WhatDoesNotFitIsADramOverflowNamingItsOwner) {
  devices::DeviceProfile phone = devices::load_device_profile("oneplus-12");
  phone.dram.capacity_gb = 3.0;
  phone.dram.reserved_gb = 1.0;  // 2 GB usable
  sim::StatGroup device("device");
  try {
    DynaKvDramLedger ledger(phone, 2'500'000'000, device);
    FAIL() << "expected DramOverflow";
  } catch (const devices::DramOverflow& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("DRAM"), std::string::npos) << what;
    EXPECT_NE(what.find("'weights' needs 2.500 GB"), std::string::npos) << what;
    EXPECT_NE(what.find("2.000 GB"), std::string::npos) << what;
    EXPECT_EQ(e.exit_code(), kExitFailure);
  }
  sim::StatGroup other("device");
  DynaKvDramLedger ledger(phone, 1'500'000'000, other);
  ledger.hold_for({400'000'000, 0, 0, 0}, 10);
  try {
    ledger.hold_for({600'000'000, 0, 0, 0}, 10);
    FAIL() << "expected DramOverflow";
  } catch (const devices::DramOverflow& e) {
    EXPECT_NE(std::string(e.what()).find("'kv/dram_cache' needs 0.200 GB"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------
// What a step records for the ledger (policies/kvcluster/session_replay.h).
// ---------------------------------------------------------------------------
traces::KvSession small_session(int decode) {
  traces::DriftingSpec s;
  s.n_layers = 1;
  s.n_kv_heads = 2;
  s.group = 1;
  s.head_dim = 16;
  s.prefill = 64;
  s.decode = decode;
  return traces::generate_drifting_session(s);
}

// ClusterKV keeps its newest entries in DRAM until its window (8) fills and is clustered: after
// step k each of the 2 tables holds (k + 1) mod 8 of them, on no flash page (direct writes: no
// page buffers).
TEST(DynaKvDramReplay, ClusterKvWindowIsHeldInDramUntilClustered) {
  const auto session = small_session(20);
  const auto policy = policies::kvcluster::testing::make("{impl: clusterkv, window: 8, top_k_percent: 10}");
  policies::kvcluster::ReplayOptions opt;
  opt.placement = policies::kvcluster::Placement::kSequence;
  opt.hot_buffers = 0;
  const auto r = policies::kvcluster::replay_session(session, *policy, opt);
  ASSERT_EQ(r.steps.size(), 20u);
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(r.steps[k].dram_only_entries, 2 * ((k + 1) % 8)) << k;
    EXPECT_EQ(r.steps[k].cache_bytes, 0) << k;  // no cache
  }
}

// PQCache keeps nothing of its own in DRAM; with page buffers, the entries waiting for their page
// are (at most 8 hot clusters x 16 entries of 256 B per 4 KB page, per table). Its DRAM cache
// (a budget of a quarter of the session's 2 x 84 x 256 B) holds something from the first step on
// and evicts: it never holds the whole session. (Not exactly within its budget: ClusterCache keeps a
// cached cluster that grows by an append or on a hit, and the ledger holds what it holds.)
TEST(DynaKvDramReplay, PageBuffersAndTheCacheStayWithinTheirBudgets) {
  const auto session = small_session(20);
  const auto policy = policies::kvcluster::testing::make("{impl: pqcache, top_k_percent: 10}");
  policies::kvcluster::ReplayOptions opt;
  opt.cache_ratio = 0.25;
  opt.replacement = policies::kvcluster::make_replacement(load_yaml_string("{impl: lru}", "test"), ConfigSource{});
  const auto r = policies::kvcluster::replay_session(session, *policy, opt);
  const std::int64_t session_bytes = 2 * 84 * 256;
  std::int64_t most_buffered = 0;
  for (const auto& st : r.steps) {
    EXPECT_LE(st.dram_only_entries, 2 * 8 * 16);
    EXPECT_GT(st.cache_bytes, 0);
    EXPECT_LT(st.cache_bytes, session_bytes / 2);
    most_buffered = std::max(most_buffered, st.dram_only_entries);
  }
  EXPECT_GT(most_buffered, 0);  // every decode step appends: some entry waits for its page
}

// ---------------------------------------------------------------------------
// The driver: every run's ledger in the result file.
// ---------------------------------------------------------------------------
using dynakv_testing::remove_result;
using dynakv_testing::run_yaml;

std::string dram_temp_out(const std::string& tag) { return dynakv_testing::temp_out("dram_" + tag); }

std::int64_t qwen3b_fp8_weight_bytes() {
  models::ModelSpec m = models::load_model_spec("qwen2.5-3b");
  m.weight_dtype = models::DType::kF8;
  return std::llround(m.weight_bytes());
}

// A hand-computed run: Qwen2.5-3B (36 layers, 2 KV heads of 128) at FP8, one layer replayed,
// prefill 33, no_cluster retrieving every entry (top 100%) from a sequence layout, a DRAM cache of
// the whole session (cache_ratio 1), its representatives (every key) on flash as DynaKV keeps its
// own. Entries are 2 x 128 B = 256 B; a table's 33 are 8,448 B on 3
// pages. Beside the weights, the running and prefetched layers (2) hold:
//   step 0: cache 2 x 33 x 256 x 2 tables = 33,792 (every cluster missed, then cached);
//           representatives 2 x 66 keys x 128 B = 16,896; retrieved 2 tables x 3 pages = 24,576;
//           total 75,264;
//   step 1: cache 2 x 34 x 256 x 2 = 34,816; representatives 2 x 68 x 128 = 17,408; retrieved the
//           new entry's page (2 x 4,096) + the 66 hits (16,896) = 25,088; total 77,312.
// The peak is the weights + step 1's bytes; the mean weighs each step by its composed latency:
// step 0's is the T=1 run's latency, step 1's the T=2 run's total less it.
// The ledger of that run, each step's bytes beside the weights given.
void expect_hand_ledger(const std::string& representatives, double step0_bytes, double step1_bytes) {
  const std::string out = dram_temp_out("hand_" + representatives);
  ASSERT_EQ(run_yaml("fig12.yaml", out,
                     {"experiment.decode_lengths=[1, 2]", "experiment.prefill=33", "experiment.sim_layers=1",
                      "experiment.variants=[{name: all/full, policy: {impl: no_cluster, top_k_percent: 100, "
                      "representatives: " + representatives + "}, placement: sequence, cache_ratio: 1.0}]"}),
            0);
  h5::Reader r(out);
  const double weights = static_cast<double>(qwen3b_fp8_weight_bytes());
  const auto latency_ms = r.doubles("summary/latency_per_token");
  ASSERT_EQ(latency_ms.size(), 2u);
  const double d0 = latency_ms[0], d1 = 2 * latency_ms[1] - latency_ms[0];
  const double peak[2] = {weights + step0_bytes, weights + step1_bytes};
  const double mean[2] = {weights + step0_bytes, weights + (step0_bytes * d0 + step1_bytes * d1) / (d0 + d1)};
  const auto table_peak = r.doubles("tables/dram/dram_peak_bytes");
  const auto table_mean = r.doubles("tables/dram/dram_mean_bytes");
  const auto ledger = r.strings("tables/dram/ledger");
  EXPECT_EQ(ledger[0], "runs/all.full_T1/stats/device/dram/used_bytes");  // '/' of the name as '.'
  EXPECT_EQ(ledger[1], "runs/all.full_T2/stats/device/dram/used_bytes");
  for (int k = 0; k < 2; ++k) {
    EXPECT_DOUBLE_EQ(r.doubles("tables/dram/weights_bytes")[k], weights);
    EXPECT_DOUBLE_EQ(r.attr_double(ledger[k], "max"), peak[k]) << k;
    EXPECT_NEAR(r.attr_double(ledger[k], "mean"), mean[k], 1e-3) << k;  // latencies rounded to whole ns
    EXPECT_DOUBLE_EQ(table_peak[k], r.attr_double(ledger[k], "max"));
    EXPECT_DOUBLE_EQ(table_mean[k], r.attr_double(ledger[k], "mean"));
  }
  remove_result(out);
}

TEST(DynaKvDram, ExperimentLedgerByHand) { expect_hand_ledger("flash", 75264, 77312); }

// The same run with the representatives held in DRAM, as the baselines hold theirs (seed 003,
// section 6.1: "typically cached persistently in memory"): every one of the 36 layers keeps its
// keys, step 0: 36 x 66 x 128 = 304,128 (not 2 x 66 x 128 = 16,896), total 33,792 + 304,128 +
// 24,576 = 362,496; step 1: 36 x 68 x 128 = 313,344, total 34,816 + 313,344 + 25,088 = 373,248.
TEST(DynaKvDram, RepresentativesHeldInDramCountEveryLayer) { expect_hand_ledger("dram", 362496, 373248); }

// A phone whose usable DRAM (capacity_gb - reserved_gb = 2 GB) is below the weights (3.086 GB at
// FP8) stops the run before anything is replayed: DramOverflow (exit code 1) naming DRAM and the
// sizes, and no result file.
TEST(DynaKvDram, WeightsAboveTheUsableDramStopTheRunAndWriteNothing) {
  const std::string out = dram_temp_out("overflow");
  try {
    run_yaml("fig10.yaml", out,
             {"experiment.decode_lengths=[64]", "experiment.prefill=64", "experiment.sim_layers=1",
              "experiment.device={base: oneplus-12, dram: {capacity_gb: 3, bandwidth_gbps: 76.8, reserved_gb: 1}}"});
    FAIL() << "expected DramOverflow";
  } catch (const devices::DramOverflow& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("DRAM of oneplus-12"), std::string::npos) << what;
    EXPECT_NE(what.find("'weights' needs 3.086 GB"), std::string::npos) << what;
    EXPECT_NE(what.find("usable 2.000 GB"), std::string::npos) << what;
    EXPECT_EQ(e.exit_code(), kExitFailure);
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out.substr(0, out.size() - 3) + "_summary.csv"));
}

// Every policy of Figure 10 (DynaKV's buffers, ClusterKV's window, PQCache, no_cluster) and a
// DRAM cache (Figure 14's): each run holds more than its weights at its peak, its peak is at least
// its time-weighted mean, and it gives everything back at the end.
TEST(DynaKvDram, EveryRunPeaksAboveItsMeanAndEndsEmpty) {
  for (const std::string yaml : {"fig10.yaml", "fig14.yaml"}) {
    const std::string out = dram_temp_out("all");
    ASSERT_EQ(run_yaml(yaml, out, {"experiment.decode_lengths=[96]", "experiment.prefill=128", "experiment.sim_layers=1"}),
              0);
    h5::Reader r(out);
    const auto names = r.strings("summary/variant");
    const auto ledger = r.strings("tables/dram/ledger");
    const auto weights = r.doubles("tables/dram/weights_bytes");
    ASSERT_EQ(ledger.size(), names.size()) << yaml;
    for (std::size_t k = 0; k < ledger.size(); ++k) {
      const double peak = r.attr_double(ledger[k], "max"), mean = r.attr_double(ledger[k], "mean");
      EXPECT_GT(mean, weights[k]) << names[k];
      EXPECT_GE(peak, mean) << names[k];
      EXPECT_EQ(r.attr_double(ledger[k], "value"), 0.0) << names[k];
    }
    remove_result(out);
  }
}

}  // namespace
}  // namespace mobisim
