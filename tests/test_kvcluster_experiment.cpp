// The dynakv experiment runs from its YAML (shrunk by overrides) and refuses bad variants.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "experiments/experiment.h"
#include "sim/error.h"
#include "sim/h5.h"

namespace mobisim {
namespace {

std::string temp_out(const std::string& tag) {
  return (std::filesystem::temp_directory_path() / ("mobisim_dynakv_" + tag + "_" + std::to_string(::getpid()) + ".h5"))
      .string();
}

int run_fig10(const std::string& out, std::vector<std::string> overrides) {
  experiments::RunOptions o;
  o.output_override = out;
  o.no_plot = true;
  o.quiet = true;
  o.overrides = {"experiment.decode_lengths=[128]", "experiment.prefill=128", "experiment.sim_layers=1"};
  o.overrides.insert(o.overrides.end(), overrides.begin(), overrides.end());  // later overrides win
  return experiments::run_experiment_file(std::string(MOBISIM_SOURCE_DIR) + "/experiments/dynakv/fig10.yaml", o);
}

TEST(DynaKvExperiment, Fig10RunsAndDynaKvReadsLeastPerToken) {
  const std::string out = temp_out("fig10");
  ASSERT_EQ(run_fig10(out, {}), 0);
  h5::Reader r(out);
  const auto names = r.strings("summary/variant");
  const auto read = r.doubles("summary/read_per_token");
  const auto latency = r.doubles("summary/latency_per_token");
  ASSERT_EQ(names.size(), 4u);
  std::map<std::string, double> rd;
  for (std::size_t i = 0; i < names.size(); ++i) {
    rd[names[i]] = read[i];
    EXPECT_GT(latency[i], 0.0) << names[i];
  }
  EXPECT_LT(rd["dynakv"], rd["pqcache"]);
  EXPECT_LT(rd["dynakv"], rd["no_cluster"]);
  std::filesystem::remove(out);
  std::filesystem::remove(out.substr(0, out.size() - 3) + "_summary.csv");
}

TEST(DynaKvExperiment, BadVariantsAreConfigErrors) {
  const std::string out = temp_out("bad");
  // ConfigErrors name the key; the CLI turns them into exit code 3.
  EXPECT_THROW(run_fig10(out, {"experiment.variants[3].policy.b_max=-1"}), ConfigError);
  EXPECT_THROW(run_fig10(out, {"experiment.variants[0].placement=diagonal"}), ConfigError);
  EXPECT_THROW(run_fig10(out, {"experiment.decode_lengths=[0]"}), ConfigError);
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace mobisim
