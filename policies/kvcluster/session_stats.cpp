#include "policies/kvcluster/session_stats.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "models/kernel/kmeans.h"

namespace mobisim::policies::kvcluster {

namespace {

double top_share_mass(const kernel::Mat& keys, int n, const float* q, double share) {
  const int d = static_cast<int>(keys.cols());
  const Eigen::Map<const Eigen::RowVectorXf> qv(q, d);
  Eigen::VectorXf s = (keys.topRows(n) * qv.transpose()) / std::sqrt(static_cast<float>(d));
  std::vector<float> v(s.data(), s.data() + n);
  const float mx = *std::max_element(v.begin(), v.end());
  for (float& x : v) x = std::exp(x - mx);
  const double total = std::accumulate(v.begin(), v.end(), 0.0);
  const int top = std::max(1, static_cast<int>(std::ceil(share * n)));
  std::nth_element(v.begin(), v.begin() + (top - 1), v.end(), std::greater<float>());
  const double in = std::accumulate(v.begin(), v.begin() + top, 0.0);
  return total > 0 ? in / total : 0.0;
}

double squared_distance(const kernel::Mat& a, int i, const kernel::Mat& b, int j) {
  return static_cast<double>((a.row(i) - b.row(j)).squaredNorm());
}

}  // namespace

SessionStats session_stats(const traces::KvSession& s, int tokens_per_cluster, int query_stride, std::uint64_t seed) {
  s.validate("session statistics");
  SessionStats out;
  const int group = s.n_heads / s.n_kv_heads;
  const int stride = std::max(1, query_stride);
  for (int ti = 0; ti < s.tables(); ++ti) {
    const kernel::Mat& keys = s.keys[ti];
    const int layer = ti / s.n_kv_heads, kvh = ti % s.n_kv_heads;
    // Attention concentration over the first query head of the group.
    const kernel::Mat& q = s.queries[static_cast<std::size_t>(layer) * s.n_heads + kvh * group];
    double mass = 0;
    int nq = 0;
    for (int t = 0; t < s.decode; t += stride, ++nq) mass += top_share_mass(keys, s.prefill + t + 1, q.row(t).data(), 0.10);
    out.top10_attention_mass += nq > 0 ? mass / nq : 0.0;
    // Clusteredness of the prefill keys.
    const kernel::Mat pre = keys.topRows(s.prefill);
    const int k = std::max(1, (s.prefill + tokens_per_cluster - 1) / tokens_per_cluster);
    const kernel::KMeans km = kernel::kmeans(pre, k, 20, seed + static_cast<std::uint64_t>(ti));
    const Eigen::RowVectorXf mean = pre.colwise().mean();
    double total = 0, within = 0;
    std::vector<double> own(s.prefill);
    for (int i = 0; i < s.prefill; ++i) {
      total += static_cast<double>((pre.row(i) - mean).squaredNorm());
      own[i] = squared_distance(pre, i, km.centroids, km.assign[i]);
      within += own[i];
    }
    out.within_over_total_variance += total > 0 ? within / total : 0.0;
    // Shift: decode keys outside the prefill clusters' 95th-percentile radius.
    std::vector<double> sorted(own);
    std::sort(sorted.begin(), sorted.end());
    const double radius = sorted[std::min<std::size_t>(sorted.size() - 1, static_cast<std::size_t>(0.95 * sorted.size()))];
    int novel = 0;
    for (int t = 0; t < s.decode; ++t) {
      double best = std::numeric_limits<double>::infinity();
      for (int c = 0; c < km.centroids.rows(); ++c) best = std::min(best, squared_distance(keys, s.prefill + t, km.centroids, c));
      novel += best > radius;
    }
    out.novel_key_share += s.decode > 0 ? static_cast<double>(novel) / s.decode : 0.0;
  }
  const double n = std::max(1, s.tables());
  out.top10_attention_mass /= n;
  out.within_over_total_variance /= n;
  out.novel_key_share /= n;
  return out;
}

}  // namespace mobisim::policies::kvcluster
