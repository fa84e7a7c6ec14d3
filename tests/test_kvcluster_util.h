#pragma once
// Helpers shared by the kvcluster tests: building a policy from YAML, small
// matrices, and a miniature drifting-cluster key stream.
#include <memory>
#include <string>
#include <vector>

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
