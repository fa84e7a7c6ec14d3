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

// Mean length of the maximal runs of consecutive positions among the `share` highest scores.
double top_share_position_run(const kernel::Mat& keys, int n, const float* q, double share) {
  const int d = static_cast<int>(keys.cols());
  const Eigen::Map<const Eigen::RowVectorXf> qv(q, d);
  const Eigen::VectorXf s = keys.topRows(n) * qv.transpose();
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  const int top = std::max(1, static_cast<int>(std::ceil(share * n)));
  // Ties broken by position, so the set is deterministic.
  std::nth_element(order.begin(), order.begin() + (top - 1), order.end(),
                   [&](int a, int b) { return s[a] != s[b] ? s[a] > s[b] : a < b; });
  std::vector<int> chosen(order.begin(), order.begin() + top);
  std::sort(chosen.begin(), chosen.end());
  int runs = 1;
  for (int i = 1; i < top; ++i) runs += chosen[i] != chosen[i - 1] + 1;
  return static_cast<double>(top) / runs;
}

double squared_distance(const kernel::Mat& a, int i, const kernel::Mat& b, int j) {
  return static_cast<double>((a.row(i) - b.row(j)).squaredNorm());
}

// Share of neighbouring positions with equal labels over the share a shuffled order gives.
double neighbour_lift(const std::vector<int>& label, int k) {
  const int n = static_cast<int>(label.size());
  if (n < 2) return 1.0;
  std::vector<double> count(k, 0.0);
  for (int l : label) count[l] += 1;
  double expected = 0;
  for (double c : count) expected += (c / n) * (c / n);
  int same = 0;
  for (int p = 1; p < n; ++p) same += label[p] == label[p - 1];
  return expected > 0 ? (static_cast<double>(same) / (n - 1)) / expected : 1.0;
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
    double run = 0;
    for (int t = 0; t < s.decode; t += stride, ++nq) {
      mass += top_share_mass(keys, s.prefill + t + 1, q.row(t).data(), 0.10);
      run += top_share_position_run(keys, s.prefill + t + 1, q.row(t).data(), 0.10);
    }
    out.top10_attention_mass += nq > 0 ? mass / nq : 0.0;
    out.top10_position_run += nq > 0 ? run / nq : 0.0;
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
    std::vector<int> label(km.assign.begin(), km.assign.begin() + s.prefill);
    for (int t = 0; t < s.decode; ++t) {
      double best = std::numeric_limits<double>::infinity();
      int nearest = 0;
      for (int c = 0; c < km.centroids.rows(); ++c) {
        const double dist = squared_distance(keys, s.prefill + t, km.centroids, c);
        if (dist < best) best = dist, nearest = c;
      }
      novel += best > radius;
      label.push_back(nearest);
    }
    out.novel_key_share += s.decode > 0 ? static_cast<double>(novel) / s.decode : 0.0;
    out.neighbour_same_cluster_lift += neighbour_lift(label, static_cast<int>(km.centroids.rows()));
  }
  const double n = std::max(1, s.tables());
  out.top10_attention_mass /= n;
  out.within_over_total_variance /= n;
  out.novel_key_share /= n;
  out.top10_position_run /= n;
  out.neighbour_same_cluster_lift /= n;
  return out;
}

}  // namespace mobisim::policies::kvcluster
