// The prefix_cache and kvpr_cake experiments run from their YAMLs and keep the findings the
// closing note reports (regression pins, each with the reason it holds).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "experiments/experiment.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "sim/params.h"

namespace mobisim {
namespace {

std::string run_yaml(const std::string& rel, const std::vector<std::string>& overrides = {}) {
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("mobisim_kvexp_" + std::filesystem::path(rel).stem().string() + "_" +
                            std::to_string(::getpid()) + ".h5"))
                              .string();
  experiments::RunOptions o;
  o.output_override = out;
  o.no_plot = true;
  o.quiet = true;
  o.overrides = overrides;
  EXPECT_EQ(experiments::run_experiment_file(std::string(MOBISIM_SOURCE_DIR) + "/" + rel, o), 0);
  return out;
}

std::size_t row_of(const h5::Reader& r, const std::string& table, const std::string& col, const std::string& value) {
  const auto v = r.strings(table + "/" + col);
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] == value) return i;
  ADD_FAILURE() << value << " not in " << table;
  return 0;
}

TEST(PrefixCacheExperiment, NoteGeometryAndLoadTimes) {
  const std::string path = run_yaml("experiments/prefix_cache/ttft.yaml", {"experiment.workload.sessions=120"});
  h5::Reader r(path);
  const auto dev = r.strings("tables/calibration/device");
  const auto load74 = r.doubles("tables/calibration/load_note_prefix_ms");
  const std::size_t ios = row_of(r, "tables/calibration", "device", "iphone-14-pro");
  const std::size_t ufs = row_of(r, "tables/calibration", "device", "midtier-android-ufs21");
  // 74 MB at 3.3 GB/s: inside the note's 18-24 ms (unfitted). The UFS 2.1 link carries 1.17 GB/s of payload,
  // so 74 MB need 63.2 ms over it; the Android's share already in DRAM (page_cache_fraction 0.178403, fitted to
  // the note's 45-60 ms) leaves 74e6 x 0.821597 / 1.17e9 = 51.96 ms of flash and 74e6 x 0.178403 / 34.1e9 =
  // 0.39 ms of DRAM copy: 52.35 ms plus one read's access latency (0.12 ms).
  EXPECT_GT(load74[ios], 18.0);
  EXPECT_LT(load74[ios], 24.0);
  EXPECT_GT(load74[ufs], 52.35);
  EXPECT_LT(load74[ufs], 52.35 + 0.2);
  // 180 x 32 x 2560 x 2 x 2 = 58,982,400 bytes, not 74 MB.
  EXPECT_EQ(r.doubles("tables/calibration/kv_bytes_180_tokens")[0], 58982400.0);
  // A 128-token partial match recovers ~128/180 = 71% of the savings on the iPhone with a 48-token suffix.
  const auto gdev = r.strings("tables/note_geometry/device");
  const auto suffix = r.ints("tables/note_geometry/suffix_tokens");
  const auto rec = r.doubles("tables/note_geometry/partial128_recovery");
  for (std::size_t i = 0; i < gdev.size(); ++i)
    if (gdev[i] == "iphone-14-pro" && suffix[i] == 48) {
      EXPECT_NEAR(rec[i], 0.71, 0.02);
    }
  // Caching helps every device and policy; weighted LRU hits at least as often as plain LRU.
  const auto policy = r.strings("summary/policy");
  const auto med = r.doubles("summary/median_ttft_ms"), unc = r.doubles("summary/median_uncached_ttft_ms");
  for (std::size_t i = 0; i < policy.size(); ++i)
    if (policy[i] != "no_cache") {
      EXPECT_LT(med[i], unc[i]) << policy[i];
    }
  std::filesystem::remove(path);
  (void)dev;
}

// A phone's own page_cache_fraction wins; a phone without one takes the experiment's.
TEST(PrefixCacheExperiment, PageCacheFractionPerPhoneOverridesTheExperiments) {
  const std::string path = run_yaml("experiments/prefix_cache/ttft.yaml",
                                    {"experiment.workload.sessions=20", "experiment.page_cache_fraction=0.5"});
  h5::Reader r(path);
  const auto load74 = r.doubles("tables/calibration/load_note_prefix_ms");
  const std::size_t ios = row_of(r, "tables/calibration", "device", "iphone-14-pro");
  const std::size_t ufs = row_of(r, "tables/calibration", "device", "midtier-android-ufs21");
  // iPhone, half in DRAM: 37e6 / 3.3e9 = 11.21 ms of NVMe + 37e6 / 51.2e9 = 0.72 ms of copy, plus the access latency.
  EXPECT_GT(load74[ios], 11.93);
  EXPECT_LT(load74[ios], 11.93 + 0.2);
  // The Android keeps its own 0.178403 (see NoteGeometryAndLoadTimes): 52.35 ms plus the access latency.
  EXPECT_GT(load74[ufs], 52.35);
  EXPECT_LT(load74[ufs], 52.35 + 0.2);
  std::filesystem::remove(path);
}

TEST(PrefixCacheExperiment, CapSmallerThanOneEntryNamesTheKey) {
  experiments::RunOptions o;
  o.no_plot = true;
  o.quiet = true;
  o.validate_only = true;
  o.overrides = {"experiment.devices[1].cap_mb=5"};
  try {
    experiments::run_experiment_file(std::string(MOBISIM_SOURCE_DIR) + "/experiments/prefix_cache/ttft.yaml", o);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cap_mb"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("smaller than one entry"), std::string::npos) << e.what();
  }
}

TEST(KvSplitExperiment, Figure3Findings) {
  const std::string path = run_yaml("experiments/kvpr_cake/fig3.yaml");
  h5::Reader r(path);
  const auto strat = r.strings("summary/strategy");
  const auto q = r.ints("summary/with_q");
  const auto last = r.doubles("summary/ratio_at_longest"), first = r.doubles("summary/ratio_at_shortest");
  for (std::size_t i = 0; i < strat.size(); ++i) {
    if (strat[i] == "kvpr_ilp" && q[i] == 0) {   // recompute-while-loading pays off without Q
      EXPECT_LT(last[i], 0.9);
    }
    if (strat[i] == "kvpr_ilp" && q[i] == 1) {   // KVPR's Q-blind split is suboptimal with Q
      EXPECT_GT(last[i], 1.3);
    }
    if (strat[i] == "cake" && q[i] == 0) {
      EXPECT_GT(first[i], 1.0);  // pure load wins for short sequences on PCIe
      EXPECT_LT(last[i], 1.0);   // Cake wins once the sequence is long enough
    }
    if (strat[i] == "cake" && q[i] == 1) {  // with Q, Cake does not beat pure load
      EXPECT_GT(last[i], 1.0);
    }
  }
  // The server's DRAM ledger is in the result: something was held (the stored K/V), its peak is at
  // least its time-weighted mean, and every request gave back what it held (0 at the end).
  const std::string dram = "runs/fig3/stats/device/dram/used_bytes";
  ASSERT_TRUE(r.exists(dram));
  EXPECT_GT(r.attr_double(dram, "mean"), 0.0);
  EXPECT_GE(r.attr_double(dram, "max"), r.attr_double(dram, "mean"));
  EXPECT_EQ(r.attr_double(dram, "value"), 0.0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mobisim
