#pragma once
// Helpers shared by the kvcluster tests: building a policy from YAML, small
// matrices, and a miniature drifting-cluster key stream.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "experiments/experiment.h"
#include "policies/kvcluster/kv_cluster.h"
#include "sim/params.h"
#include "sim/registry.h"
#include "sim/rng.h"

namespace mobisim::policies::kvcluster::testing {

inline std::unique_ptr<KvClusterPolicy> make(const std::string& yaml) {
  return Registry<KvClusterPolicy>::instance().create(load_yaml_string(yaml, "test"), ConfigSource{});
}

inline kernel::Mat rows(std::initializer_list<std::initializer_list<float>> r) {
  kernel::Mat m(static_cast<Eigen::Index>(r.size()), static_cast<Eigen::Index>(r.begin()->size()));
  int i = 0;
  for (const auto& row : r) {
    int j = 0;
    for (float x : row) m(i, j++) = x;
    ++i;
  }
  return m;
}

// Keys around `n_centres` centres that drift by `drift` per step and, every
// `birth_every` steps, a new centre appears far from the others: the
// distribution shift of section 2.3 in miniature.
struct DriftingKeys {
  DriftingKeys(int dim, int n_centres, std::uint64_t seed) : rng(seed, 0, "test/kvcluster", "keys"), dim(dim) {
    for (int c = 0; c < n_centres; ++c) centres.push_back(random_vec(8.0));
  }
  std::vector<float> random_vec(double scale) {
    std::vector<float> v(dim);
    for (float& x : v) x = static_cast<float>(rng.normal(0.0, scale));
    return v;
  }
  std::vector<float> next(double drift, int step, int birth_every) {
    if (birth_every > 0 && step > 0 && step % birth_every == 0) centres.push_back(random_vec(8.0));
    for (auto& c : centres)
      for (float& x : c) x += static_cast<float>(rng.normal(0.0, drift));
    // Recent centres are more likely: the new part of the sequence dominates.
    const std::size_t n = centres.size();
    const std::size_t pick = rng.bernoulli(0.6) ? n - 1 - rng.uniform_int(std::min<std::size_t>(2, n)) : rng.uniform_int(n);
    std::vector<float> k = centres[pick];
    for (float& x : k) x += static_cast<float>(rng.normal(0.0, 1.0));
    return k;
  }
  kernel::Mat block(int n) {
    kernel::Mat m(n, dim);
    for (int i = 0; i < n; ++i) {
      const auto k = next(0.0, 0, 0);
      for (int d = 0; d < dim; ++d) m(i, d) = k[d];
    }
    return m;
  }
  sim::Rng rng;
  int dim;
  std::vector<std::vector<float>> centres;
};


}  // namespace mobisim::policies::kvcluster::testing

// The dynakv driver's tests: a result file in the temporary directory (one per process and tag),
// removed with its summary CSV, and a YAML of experiments/dynakv/ run quietly into it.
namespace mobisim::dynakv_testing {

inline std::string temp_out(const std::string& tag) {
  return (std::filesystem::temp_directory_path() / ("mobisim_dynakv_" + tag + "_" + std::to_string(::getpid()) + ".h5"))
      .string();
}

inline void remove_result(const std::string& out) {
  std::filesystem::remove(out);
  std::filesystem::remove(out.substr(0, out.size() - 3) + "_summary.csv");
}

inline int run_yaml(const std::string& yaml, const std::string& out, std::vector<std::string> overrides) {
  experiments::RunOptions o;
  o.output_override = out;
  o.no_plot = true;
  o.quiet = true;
  o.overrides = std::move(overrides);
  return experiments::run_experiment_file(std::string(MOBISIM_SOURCE_DIR) + "/experiments/dynakv/" + yaml, o);
}

}  // namespace mobisim::dynakv_testing
