#include "models/kernel/kmeans.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "sim/rng.h"

namespace mobisim::kernel {

std::vector<std::vector<int>> KMeans::members() const {
  std::vector<std::vector<int>> m(centroids.rows());
  for (std::size_t i = 0; i < assign.size(); ++i) m[assign[i]].push_back(static_cast<int>(i));
  return m;
}

KMeans kmeans(const Mat& x, int k, int iters, std::uint64_t seed) {
  const int n = static_cast<int>(x.rows()), d = static_cast<int>(x.cols());
  KMeans r;
  k = std::clamp(k, 0, n);
  r.centroids = Mat::Zero(k, d);
  r.assign.assign(n, 0);
  if (k == 0) return r;
  sim::Rng rng(seed, 0, "kernel/kmeans", "init");
  // k-means++: each new centre drawn with probability proportional to squared distance.
  std::vector<double> dist(n, std::numeric_limits<double>::infinity());
  int first = static_cast<int>(rng.uniform_int(static_cast<std::uint64_t>(n)));
  r.centroids.row(0) = x.row(first);
  for (int c = 1; c < k; ++c) {
    double total = 0;
    for (int i = 0; i < n; ++i) {
      dist[i] = std::min(dist[i], static_cast<double>((x.row(i) - r.centroids.row(c - 1)).squaredNorm()));
      total += dist[i];
    }
    int pick = 0;
    if (total > 0) {
      double u = rng.uniform() * total;
      for (pick = 0; pick < n - 1; ++pick) {
        u -= dist[pick];
        if (u < 0) break;
      }
    }
    r.centroids.row(c) = x.row(pick);
  }
  for (int it = 0; it < iters; ++it) {
    bool changed = it == 0;
    for (int i = 0; i < n; ++i) {
      int best = 0;
      float bd = std::numeric_limits<float>::infinity();
      for (int c = 0; c < k; ++c) {
        const float dd = (x.row(i) - r.centroids.row(c)).squaredNorm();
        if (dd < bd) {
          bd = dd;
          best = c;
        }
      }
      if (r.assign[i] != best) changed = true;
      r.assign[i] = best;
    }
    if (!changed) break;
    Mat sum = Mat::Zero(k, d);
    std::vector<int> cnt(k, 0);
    for (int i = 0; i < n; ++i) {
      sum.row(r.assign[i]) += x.row(i);
      ++cnt[r.assign[i]];
    }
    for (int c = 0; c < k; ++c)
      if (cnt[c] > 0) r.centroids.row(c) = sum.row(c) / static_cast<float>(cnt[c]);  // empty: keep the old centre
  }
  return r;
}

std::vector<int> select_by_clusters(const KMeans& km, const float* q, int budget) {
  const int k = static_cast<int>(km.centroids.rows()), d = static_cast<int>(km.centroids.cols());
  const Eigen::Map<const Eigen::RowVectorXf> qv(q, d);
  std::vector<float> score(k);
  for (int c = 0; c < k; ++c) score[c] = km.centroids.row(c).dot(qv);
  std::vector<int> order(k);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
  const auto members = km.members();
  std::vector<int> out;
  for (int c : order) {
    if (static_cast<int>(out.size()) >= budget) break;
    out.insert(out.end(), members[c].begin(), members[c].end());
  }
  return out;
}

std::vector<int> select_top_k(const Mat& points, const float* q, int budget) {
  const int n = static_cast<int>(points.rows());
  const Eigen::Map<const Eigen::RowVectorXf> qv(q, points.cols());
  std::vector<float> score(n);
  for (int i = 0; i < n; ++i) score[i] = points.row(i).dot(qv);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  budget = std::clamp(budget, 0, n);
  std::partial_sort(order.begin(), order.begin() + budget, order.end(),
                    [&](int a, int b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
  order.resize(budget);
  return order;
}

}  // namespace mobisim::kernel
