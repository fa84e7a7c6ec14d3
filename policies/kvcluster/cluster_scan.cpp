#include "policies/kvcluster/cluster_scan.h"

#include <algorithm>
#include <cstring>

namespace mobisim::policies::kvcluster {

void squared_distances(const double* c, int rows, int dim, const double* k, double* out) {
  constexpr int kRows = 8;  // enough independent chains to hide the addition latency
  int r = 0;
  for (; r + kRows <= rows; r += kRows) {
    const double* x = c + static_cast<std::ptrdiff_t>(r) * dim;
    double s[kRows] = {};
    for (int d = 0; d < dim; ++d)
      for (int b = 0; b < kRows; ++b) {
        const double t = x[static_cast<std::ptrdiff_t>(b) * dim + d] - k[d];
        s[b] += t * t;
      }
    std::copy(s, s + kRows, out + r);
  }
  for (; r < rows; ++r) {
    const double* x = c + static_cast<std::ptrdiff_t>(r) * dim;
    double s = 0;
    for (int d = 0; d < dim; ++d) {
      const double t = x[d] - k[d];
      s += t * t;
    }
    out[r] = s;
  }
}

namespace {
// Two doubles, added and multiplied lane by lane (SSE2 on x86-64): the GEMV's packet.
using Pair = double __attribute__((vector_size(16)));
Pair load_pair(const double* p) {
  Pair v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// kRows centroid rows from `x` against kHeads queries: one (even, odd) accumulator per pair, so
// kRows x kHeads independent chains; every row is read once for all the queries.
template <int kRows, int kHeads>
void block_scores(const double* x, int dim, const double* const* qs, double* out, int rows) {
  Pair acc[kRows][kHeads] = {};
  int d = 0;
  for (; d + 2 <= dim; d += 2) {
    Pair xv[kRows];
    for (int r = 0; r < kRows; ++r) xv[r] = load_pair(x + static_cast<std::ptrdiff_t>(r) * dim + d);
    for (int h = 0; h < kHeads; ++h) {
      const Pair qv = load_pair(qs[h] + d);
      for (int r = 0; r < kRows; ++r) acc[r][h] += xv[r] * qv;
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int h = 0; h < kHeads; ++h) {
      double s = acc[r][h][0] + acc[r][h][1];
      if (d < dim) s += x[static_cast<std::ptrdiff_t>(r) * dim + d] * qs[h][d];
      out[static_cast<std::ptrdiff_t>(h) * rows + r] = s;
    }
}

template <int kHeads>
void head_block_scores(const double* c, int rows, int dim, const double* const* qs, double* out) {
  int r = 0;
  for (; r + 2 <= rows; r += 2) block_scores<2, kHeads>(c + static_cast<std::ptrdiff_t>(r) * dim, dim, qs, out + r, rows);
  if (r < rows) block_scores<1, kHeads>(c + static_cast<std::ptrdiff_t>(r) * dim, dim, qs, out + r, rows);
}
}  // namespace

void centroid_scores(const double* c, int rows, int dim, const double* const* qs, int n_queries, double* out) {
  for (int h0 = 0; h0 < n_queries; h0 += 4) {
    double* o = out + static_cast<std::ptrdiff_t>(h0) * rows;
    switch (std::min(4, n_queries - h0)) {
      case 4: head_block_scores<4>(c, rows, dim, qs + h0, o); break;
      case 3: head_block_scores<3>(c, rows, dim, qs + h0, o); break;
      case 2: head_block_scores<2>(c, rows, dim, qs + h0, o); break;
      default: head_block_scores<1>(c, rows, dim, qs + h0, o); break;
    }
  }
}

}  // namespace mobisim::policies::kvcluster
