#pragma once
// The two scans of every decode step over a table's centroids, written so that independent sums
// run side by side, and equal, bit for bit, to the Eigen expressions they replace
// (tests/test_kvcluster_scan.cpp checks them on random data):
//   squared_distances: (C.rowwise() - k).rowwise().squaredNorm(), which Eigen sums one dimension
//     after another (a chain of dependent additions per row);
//   centroid_scores: C * q as Eigen's row-major GEMV computes it for rows >= 2 (without FMA: two
//     chains, the even and the odd dimensions, then even + odd, then an odd last dimension).
// The centroids are kept in panels of kLanes rows, dimension-major inside a panel (CentroidPanels):
// one load gives a dimension of kLanes rows, so each row is a lane of a vector register and its
// chain of additions keeps its order; the AVX2 version (sim/simd.h) holds a panel in two
// registers instead of four.
#include <vector>

namespace mobisim::policies::kvcluster {

// Row-major [rows x dim] doubles stored as panels of kLanes rows: element (r, d) at
// (r / kLanes) * dim * kLanes + d * kLanes + r % kLanes. Rows past rows() in the last panel are zero.
class CentroidPanels {
 public:
  static constexpr int kLanes = 8;
  explicit CentroidPanels(int dim = 1) : dim_(dim) {}
  int rows() const { return rows_; }
  int dim() const { return dim_; }
  // Grows to `rows` rows (never shrinks); new rows are zero.
  void grow(int rows);
  void set_row(int r, const double* x);
  void copy_row(int r, double* out) const;  // dim doubles
  const double* panel(int p) const { return v_.data() + static_cast<std::size_t>(p) * dim_ * kLanes; }

 private:
  int dim_;
  int rows_ = 0;
  std::vector<double> v_;
};

// Which version a scan runs: the widest the CPU has (AVX2 on most x86-64 CPUs), or SSE2 (every
// x86-64 CPU; tests check both against Eigen, since the results must not depend on the machine).
enum class ScanIsa { kBest, kSse2 };

// out[r] = sum over d in order of (c[r][d] - k[d])^2.
void squared_distances(const CentroidPanels& c, const double* k, double* out, ScanIsa isa = ScanIsa::kBest);

// out[h * rows + r] = q_h . c[r] for every query h < n_queries (qs[h]: dim doubles); rows >= 2
// (Eigen takes a one-row product as a dot product, another summation order).
void centroid_scores(const CentroidPanels& c, const double* const* qs, int n_queries, double* out,
                     ScanIsa isa = ScanIsa::kBest);

// The exact attention scores of several queries over the rows of a key matrix (row-major floats,
// `dim` a row): out[j][r] = (keys[r] . qs[j]) * scale for r < n[j] (n ascending, every n[j] >= 2),
// as Eigen's row-major GEMV computes `(K.topRows(n[j]) * q) * scale` with SSE (and no FMA): four
// lanes, the columns equal mod 4, each summed in order; then (lane 0 + lane 2) + (lane 1 + lane 3);
// then the columns past the last multiple of four one by one; then the scale. Each key row is read
// once for every query (the queries of a block of decode steps), and the AVX2 version holds two
// queries' lanes in one register.
void key_scores(const float* keys, int dim, const float* const* qs, const int* n, int n_queries, float scale,
                float* const* out, ScanIsa isa = ScanIsa::kBest);

}  // namespace mobisim::policies::kvcluster
