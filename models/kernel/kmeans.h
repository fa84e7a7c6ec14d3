#pragma once
// K-means over key vectors, the clustering behind cluster-based KV retrieval
// (ClusterKV, DynaKV): a query attends the tokens of the clusters whose
// centroids score highest instead of the exact top-k keys.
#include <cstdint>
#include <vector>

#include "models/kernel/transformer.h"

namespace mobisim::kernel {

struct KMeans {
  Mat centroids;            // [k, dim]
  std::vector<int> assign;  // cluster of each point
  std::vector<std::vector<int>> members() const;
};

// Lloyd's algorithm from a k-means++ start drawn from a seeded stream; stops
// after `iters` rounds or when no assignment changes. k is capped at the number of points.
KMeans kmeans(const Mat& points, int k, int iters, std::uint64_t seed);

// Positions a query should attend under cluster retrieval: clusters ranked by
// q . centroid, taken whole until at least `budget` points are selected.
std::vector<int> select_by_clusters(const KMeans& km, const float* q, int budget);
// The exact top-`budget` points by q . point.
std::vector<int> select_top_k(const Mat& points, const float* q, int budget);

}  // namespace mobisim::kernel
