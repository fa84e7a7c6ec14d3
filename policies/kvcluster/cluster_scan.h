#pragma once
// The two scans of every decode step over a table's centroids (row-major [rows x dim] doubles),
// written so that independent sums run side by side, and equal, bit for bit, to the Eigen
// expressions they replace (tests/test_kvcluster_stream.cpp checks them on random data):
//   squared_distances: (C.rowwise() - k).rowwise().squaredNorm(), which Eigen sums one dimension
//     after another (a chain of dependent additions per row); here eight rows' chains interleave;
//   centroid_scores: C * q as Eigen's row-major GEMV computes it for rows >= 2 (without FMA: two
//     lanes, the even and the odd dimensions, then lane 0 + lane 1, then an odd last dimension);
//     here the queries of a GQA group share one pass over the centroids.
namespace mobisim::policies::kvcluster {

// out[r] = sum over d in order of (c[r][d] - k[d])^2.
void squared_distances(const double* c, int rows, int dim, const double* k, double* out);

// out[h * rows + r] = q_h . c[r] for every query h < n_queries (qs[h]: dim doubles); rows >= 2
// (Eigen takes a one-row product as a dot product, another summation order).
void centroid_scores(const double* c, int rows, int dim, const double* const* qs, int n_queries, double* out);

}  // namespace mobisim::policies::kvcluster
