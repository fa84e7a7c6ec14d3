#include "policies/kvcluster/cluster_scan.h"

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "sim/simd.h"

namespace mobisim::policies::kvcluster {

void CentroidPanels::grow(int rows) {
  if (rows <= rows_) return;
  rows_ = rows;
  const int panels = (rows + kLanes - 1) / kLanes;
  v_.resize(static_cast<std::size_t>(panels) * dim_ * kLanes, 0.0);
}

void CentroidPanels::set_row(int r, const double* x) {
  double* p = v_.data() + static_cast<std::size_t>(r / kLanes) * dim_ * kLanes + r % kLanes;
  for (int d = 0; d < dim_; ++d) p[static_cast<std::size_t>(d) * kLanes] = x[d];
}

void CentroidPanels::copy_row(int r, double* out) const {
  const double* p = panel(r / kLanes) + r % kLanes;
  for (int d = 0; d < dim_; ++d) out[d] = p[static_cast<std::size_t>(d) * kLanes];
}

namespace {
constexpr int kLanes = CentroidPanels::kLanes;
constexpr std::size_t kPanelRow = kLanes;  // doubles per dimension of a panel

// Vectors of doubles added and multiplied lane by lane: an SSE2 register (every x86-64) and an
// AVX2 one. The kernels below are written once over the vector type and inlined into a version
// per instruction set; a lane's operations and their order do not depend on the width.
using V2 = double __attribute__((vector_size(16)));
using V4 = double __attribute__((vector_size(32)));
// Float vectors alike (the exact attention's keys and queries).
using F4 = float __attribute__((vector_size(16)));
using F8 = float __attribute__((vector_size(32)));
// Any of these, read from (and written to) its elements at any element boundary.
template <class V>
struct Unaligned {
  using Elem = std::remove_cvref_t<decltype(std::declval<V>()[0])>;
  typedef Elem type __attribute__((vector_size(sizeof(V)), aligned(sizeof(Elem)), may_alias));
};
// (Plain reads and writes of these, not helper functions: a helper passing an AVX2 vector by value
// would be compiled for the default target, where that changes the ABI.)
#define MOBISIM_LOAD(p) (*reinterpret_cast<const typename Unaligned<V>::type*>(p))
#define MOBISIM_STORE(p) (*reinterpret_cast<typename Unaligned<V>::type*>(p))

// Every lane x (a broadcast straight from memory; V{} + x would turn a -0 into +0, and cost an add).
template <class V>
[[gnu::always_inline]] inline void broadcast(V& v, const double& x) {
  v = V{};  // every lane is overwritten below; this only tells -O1 builds (TSan) that v is set
  for (std::size_t i = 0; i < sizeof(V) / sizeof(double); ++i) v[i] = x;
}

#define MOBISIM_INLINE [[gnu::always_inline]] inline

// Panels p0 .. p0 + kPanels - 1 at once: as many independent chains of additions per lane.
template <class V, int kPanels>
MOBISIM_INLINE void distances_of(const CentroidPanels& c, int p0, const double* k, double* out) {
  constexpr int kW = sizeof(V) / sizeof(double), kPer = kLanes / kW;  // vectors per panel dimension
  const int dim = c.dim(), rows = c.rows();
  V s[kPanels][kPer] = {};
  for (int d = 0; d < dim; ++d) {
    V kd;
    broadcast(kd, k[d]);
#pragma GCC unroll 8
    for (int j = 0; j < kPanels; ++j) {
      const double* x = c.panel(p0 + j) + d * kPanelRow;
#pragma GCC unroll 8
      for (int v = 0; v < kPer; ++v) {
        const V t = MOBISIM_LOAD(x + v * kW) - kd;
        s[j][v] += t * t;
      }
    }
  }
  for (int j = 0; j < kPanels; ++j) {
    const int r0 = (p0 + j) * kLanes;
    if (r0 + kLanes <= rows) {
      for (int v = 0; v < kPer; ++v) MOBISIM_STORE(out + r0 + v * kW) = s[j][v];
    } else {
      double lanes[kLanes];
      for (int v = 0; v < kPer; ++v) MOBISIM_STORE(lanes + v * kW) = s[j][v];
      std::copy(lanes, lanes + (rows - r0), out + r0);
    }
  }
}

template <class V, int kPanels>
MOBISIM_INLINE void distances_kernel(const CentroidPanels& c, const double* k, double* out) {
  const int panels = (c.rows() + kLanes - 1) / kLanes;
  int p = 0;
  for (; p + kPanels <= panels; p += kPanels) distances_of<V, kPanels>(c, p, k, out);
  for (; p < panels; ++p) distances_of<V, 1>(c, p, k, out);
}

// Panel p against queries qs[0 .. kHeads - 1] (each read of the panel serves all of them): an
// even and an odd chain per query and lane.
template <class V, int kHeads>
MOBISIM_INLINE void scores_of(const CentroidPanels& c, int p, const double* const* qs, double* out) {
  constexpr int kW = sizeof(V) / sizeof(double), kPer = kLanes / kW;
  const int dim = c.dim(), rows = c.rows();
  const double* x = c.panel(p);
  V even[kHeads][kPer] = {}, odd[kHeads][kPer] = {};
  int d = 0;
  for (; d + 2 <= dim; d += 2) {
    V xe[kPer], xo[kPer];
#pragma GCC unroll 8
    for (int v = 0; v < kPer; ++v) {
      xe[v] = MOBISIM_LOAD(x + d * kPanelRow + v * kW);
      xo[v] = MOBISIM_LOAD(x + (d + 1) * kPanelRow + v * kW);
    }
#pragma GCC unroll 8
    for (int h = 0; h < kHeads; ++h) {
      V qe, qo;
      broadcast(qe, qs[h][d]);
      broadcast(qo, qs[h][d + 1]);
#pragma GCC unroll 8
      for (int v = 0; v < kPer; ++v) {
        even[h][v] += xe[v] * qe;
        odd[h][v] += xo[v] * qo;
      }
    }
  }
  const int r0 = p * kLanes;
  for (int h = 0; h < kHeads; ++h) {
    V sum[kPer];
    for (int v = 0; v < kPer; ++v) sum[v] = even[h][v] + odd[h][v];
    if (d < dim) {
      V ql;
      broadcast(ql, qs[h][d]);
      for (int v = 0; v < kPer; ++v) sum[v] += MOBISIM_LOAD(x + d * kPanelRow + v * kW) * ql;
    }
    double* o = out + static_cast<std::ptrdiff_t>(h) * rows + r0;
    if (r0 + kLanes <= rows) {
      for (int v = 0; v < kPer; ++v) MOBISIM_STORE(o + v * kW) = sum[v];
    } else {
      double lanes[kLanes];
      for (int v = 0; v < kPer; ++v) MOBISIM_STORE(lanes + v * kW) = sum[v];
      std::copy(lanes, lanes + (rows - r0), o);
    }
  }
}

template <class V, int kHeads>
MOBISIM_INLINE void scores_kernel(const CentroidPanels& c, const double* const* qs, int n_queries, double* out) {
  const int panels = (c.rows() + kLanes - 1) / kLanes;
  const std::ptrdiff_t rows = c.rows();
  // Panel by panel (8 rows x dim: it stays in the L1 cache for every query), queries inner.
  for (int p = 0; p < panels; ++p) {
    int h = 0;
    for (; h + kHeads <= n_queries; h += kHeads) scores_of<V, kHeads>(c, p, qs + h, out + h * rows);
    for (; h < n_queries; ++h) scores_of<V, 1>(c, p, qs + h, out + h * rows);
  }
}

// ---- key_scores ----

// Row x against query groups [g0, g0 + kAcc) of the interleaved queries `qbuf` (per chunk of four
// columns, `groups` groups of kW floats: the chunk of each of the group's kW / 4 queries), one
// accumulator per group: out_lanes[a * kW + 4 * t] = the reduced lanes of query t of group g0 + a.
template <class V, int kAcc>
MOBISIM_INLINE void key_row_lanes(const float* x, int chunks, const float* qbuf, int groups, int g0, float* out_lanes) {
  constexpr int kW = sizeof(V) / sizeof(float);
  V acc[kAcc] = {};
  for (int c = 0; c < chunks; ++c) {
    const F4 x4 = *reinterpret_cast<const Unaligned<F4>::type*>(x + 4 * c);
    V xv;
    if constexpr (kW == 4) {
      xv = x4;
    } else {
      xv = __builtin_shufflevector(x4, x4, 0, 1, 2, 3, 0, 1, 2, 3);
    }
    const float* q = qbuf + (static_cast<std::size_t>(c) * groups + g0) * kW;
#pragma GCC unroll 8
    for (int a = 0; a < kAcc; ++a) acc[a] += xv * MOBISIM_LOAD(q + a * kW);
  }
  // Each query's four lanes reduced as the GEMV's predux: t = lanes + lanes (2, 3, 0, 1), then
  // t + t (1, 0, 3, 2): lane 0 of a query holds (l0 + l2) + (l1 + l3).
#pragma GCC unroll 8
  for (int a = 0; a < kAcc; ++a) {
    V t, u;
    if constexpr (kW == 4) {
      t = acc[a] + __builtin_shufflevector(acc[a], acc[a], 2, 3, 0, 1);
      u = t + __builtin_shufflevector(t, t, 1, 0, 3, 2);
    } else {
      t = acc[a] + __builtin_shufflevector(acc[a], acc[a], 2, 3, 0, 1, 6, 7, 4, 5);
      u = t + __builtin_shufflevector(t, t, 1, 0, 3, 2, 5, 4, 7, 6);
    }
    MOBISIM_STORE(out_lanes + a * kW) = u;
  }
}

template <class V, int kAcc>
MOBISIM_INLINE void key_scores_kernel(const float* keys, int dim, const float* const* qs, const int* n, int nq,
                                      float scale, float* const* out) {
  constexpr int kW = sizeof(V) / sizeof(float), kQ = kW / 4;  // queries per vector
  const int chunks = dim / 4;
  const int groups = (nq + kQ - 1) / kQ;
  const int padded = (groups + kAcc - 1) / kAcc * kAcc;  // whole passes of kAcc groups
  std::vector<float> qbuf(static_cast<std::size_t>(chunks) * padded * kW, 0.0f);
  for (int c = 0; c < chunks; ++c)
    for (int j = 0; j < nq; ++j)
      for (int l = 0; l < 4; ++l)
        qbuf[(static_cast<std::size_t>(c) * padded + j / kQ) * kW + (j % kQ) * 4 + l] = qs[j][4 * c + l];
  float lanes[kAcc * kW];
  int first = 0;  // the first query whose rows reach row r
  for (int r = 0; r < n[nq - 1]; ++r) {
    while (n[first] <= r) ++first;
    const float* x = keys + static_cast<std::size_t>(r) * dim;
    for (int g0 = first / kQ / kAcc * kAcc; g0 < groups; g0 += kAcc) {
      key_row_lanes<V, kAcc>(x, chunks, qbuf.data(), padded, g0, lanes);
      for (int j = std::max(first, g0 * kQ); j < std::min(nq, (g0 + kAcc) * kQ); ++j) {
        float s = lanes[(j / kQ - g0) * kW + (j % kQ) * 4];  // (l0 + l2) + (l1 + l3)
        for (int d = 4 * chunks; d < dim; ++d) s += x[d] * qs[j][d];
        out[j][r] = s * scale;
      }
    }
  }
}
// Passes of as many accumulators as there are query groups (up to eight): a block of one or two
// queries does not pay for eight.
template <class V>
MOBISIM_INLINE void key_scores_any(const float* keys, int dim, const float* const* qs, const int* n, int nq,
                                   float scale, float* const* out) {
  constexpr int kQ = sizeof(V) / sizeof(float) / 4;
  const int groups = (nq + kQ - 1) / kQ;
  if (groups <= 1) return key_scores_kernel<V, 1>(keys, dim, qs, n, nq, scale, out);
  if (groups <= 2) return key_scores_kernel<V, 2>(keys, dim, qs, n, nq, scale, out);
  if (groups <= 4) return key_scores_kernel<V, 4>(keys, dim, qs, n, nq, scale, out);
  key_scores_kernel<V, 8>(keys, dim, qs, n, nq, scale, out);
}
#undef MOBISIM_INLINE
#undef MOBISIM_LOAD
#undef MOBISIM_STORE

// Eight accumulator registers (twelve for the AVX2 scores: three queries a pass measured faster than two).
void distances_sse2(const CentroidPanels& c, const double* k, double* out) { distances_kernel<V2, 2>(c, k, out); }
void scores_sse2(const CentroidPanels& c, const double* const* qs, int n, double* out) {
  scores_kernel<V2, 1>(c, qs, n, out);
}
void key_scores_sse2(const float* keys, int dim, const float* const* qs, const int* n, int nq, float scale,
                     float* const* out) {
  key_scores_any<F4>(keys, dim, qs, n, nq, scale, out);
}
#if MOBISIM_X86_DISPATCH
[[gnu::target("avx2")]] void key_scores_avx2(const float* keys, int dim, const float* const* qs, const int* n, int nq,
                                            float scale, float* const* out) {
  key_scores_any<F8>(keys, dim, qs, n, nq, scale, out);
}
[[gnu::target("avx2")]] void distances_avx2(const CentroidPanels& c, const double* k, double* out) {
  distances_kernel<V4, 4>(c, k, out);
}
[[gnu::target("avx2")]] void scores_avx2(const CentroidPanels& c, const double* const* qs, int n, double* out) {
  scores_kernel<V4, 3>(c, qs, n, out);
}
#endif
}  // namespace

void squared_distances(const CentroidPanels& c, const double* k, double* out, [[maybe_unused]] ScanIsa isa) {
#if MOBISIM_X86_DISPATCH
  if (isa == ScanIsa::kBest && sim::cpu_has_avx2()) return distances_avx2(c, k, out);
#endif
  distances_sse2(c, k, out);
}

void centroid_scores(const CentroidPanels& c, const double* const* qs, int n_queries, double* out,
                     [[maybe_unused]] ScanIsa isa) {
#if MOBISIM_X86_DISPATCH
  if (isa == ScanIsa::kBest && sim::cpu_has_avx2()) return scores_avx2(c, qs, n_queries, out);
#endif
  scores_sse2(c, qs, n_queries, out);
}

void key_scores(const float* keys, int dim, const float* const* qs, const int* n, int n_queries, float scale,
                float* const* out, [[maybe_unused]] ScanIsa isa) {
  if (n_queries <= 0) return;
#if MOBISIM_X86_DISPATCH
  if (isa == ScanIsa::kBest && sim::cpu_has_avx2()) return key_scores_avx2(keys, dim, qs, n, n_queries, scale, out);
#endif
  key_scores_sse2(keys, dim, qs, n, n_queries, scale, out);
}

}  // namespace mobisim::policies::kvcluster
