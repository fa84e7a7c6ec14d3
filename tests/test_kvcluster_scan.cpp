// The centroid scans (policies/kvcluster/cluster_scan.h) are the Eigen expressions they replaced,
// bit for bit: selection ranks and nearest clusters, hence every DynaKV number, depend on it.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "policies/kvcluster/cluster_scan.h"
#include "policies/kvcluster/flash_layout.h"
#include "sim/rng.h"

namespace mobisim::policies::kvcluster {
namespace {

using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

TEST(KvClusterScan, DistancesAndScoresEqualEigenBitForBit) {
  sim::Rng rng(3, 0, "test/kvcluster", "scan");
  // Row counts around the kernels' panels (8 rows, taken 1, 2 or 4 at a time), even and odd
  // dimensions, 1 to 9 queries.
  for (int rows : {2, 3, 7, 8, 9, 16, 17, 24, 31, 32, 33, 64, 301})
    for (int dim : {1, 2, 5, 64, 128})
      for (int heads : {1, 3, 4, 8, 9}) {
        RowMatD c(rows, dim);
        for (Eigen::Index i = 0; i < c.size(); ++i) c.data()[i] = rng.normal(0.0, 4.0);
        // The panels the scans read, grown twice as a table grows them (new rows zero until set).
        CentroidPanels panels(dim);
        panels.grow(rows / 2);
        panels.grow(rows);
        for (int r = 0; r < rows; ++r) panels.set_row(r, c.row(r).data());
        ASSERT_EQ(panels.rows(), rows);
        std::vector<double> back(dim);
        panels.copy_row(rows - 1, back.data());
        for (int d = 0; d < dim; ++d) ASSERT_EQ(back[d], c(rows - 1, d));
        std::vector<Eigen::VectorXf> qf(heads, Eigen::VectorXf(dim));
        for (auto& q : qf)
          for (int d = 0; d < dim; ++d) q[d] = static_cast<float>(rng.normal(0.0, 2.0));
        // Distances to the first query (as a key), as ClusterTable::nearest_cluster computed them.
        const Eigen::RowVectorXd kv = qf[0].transpose().cast<double>();
        Eigen::VectorXd want = (c.rowwise() - kv).rowwise().squaredNorm();
        std::vector<double> got(rows);
        for (ScanIsa isa : {ScanIsa::kBest, ScanIsa::kSse2}) {
          squared_distances(panels, kv.data(), got.data(), isa);
          for (int r = 0; r < rows; ++r) ASSERT_EQ(got[r], want[r]) << rows << "x" << dim << " row " << r;
        }
        // Scores of every query, as ClusterTable::select's GEMV computed them.
        std::vector<Eigen::VectorXd> qd;
        std::vector<const double*> ptrs;
        for (const auto& q : qf) qd.push_back(q.cast<double>());
        for (const auto& q : qd) ptrs.push_back(q.data());
        std::vector<double> scores(static_cast<std::size_t>(rows) * heads);
        for (ScanIsa isa : {ScanIsa::kBest, ScanIsa::kSse2}) {
          centroid_scores(panels, ptrs.data(), heads, scores.data(), isa);
          for (int h = 0; h < heads; ++h) {
            Eigen::VectorXd s(rows);
            s.setZero();
            s.noalias() += c * qd[h];
            for (int r = 0; r < rows; ++r)
              ASSERT_EQ(scores[static_cast<std::size_t>(h) * rows + r], s[r]) << rows << "x" << dim << " head " << h;
          }
        }
      }
}

TEST(KvClusterScan, KeyScoresEqualEigenGemvBitForBit) {
  // Exact attention (policies/kvcluster/session_replay.h): a block of decode steps' queries, each
  // over one more stride of keys, as ExactAttention took them from Eigen's GEMV.
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  sim::Rng rng(4, 0, "test/kvcluster", "key_scores");
  for (int dim : {1, 3, 4, 5, 64, 128})
    for (int queries : {1, 2, 3, 6, 9, 16, 17})  // every pass width (1, 2, 4, 8 groups)
      for (int stride : {0, 1, 3}) {
        const int n0 = 2 + static_cast<int>(rng.uniform(0.0, 40.0));
        std::vector<int> n;
        for (int j = 0; j < queries; ++j) n.push_back(n0 + j * stride);
        Mat keys(n.back(), dim);
        for (Eigen::Index i = 0; i < keys.size(); ++i) keys.data()[i] = static_cast<float>(rng.normal(0.0, 1.5));
        std::vector<Eigen::VectorXf> q(queries, Eigen::VectorXf(dim));
        for (auto& v : q)
          for (int d = 0; d < dim; ++d) v[d] = static_cast<float>(rng.normal(0.0, 2.0));
        std::vector<const float*> qp;
        for (const auto& v : q) qp.push_back(v.data());
        const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
        for (ScanIsa isa : {ScanIsa::kBest, ScanIsa::kSse2}) {
          std::vector<Eigen::VectorXf> got(queries);
          std::vector<float*> outp;
          for (int j = 0; j < queries; ++j) {
            got[j].setConstant(n[j], -1.0f);
            outp.push_back(got[j].data());
          }
          key_scores(keys.data(), dim, qp.data(), n.data(), queries, scale, outp.data(), isa);
          for (int j = 0; j < queries; ++j) {
            const Eigen::Map<const Eigen::RowVectorXf> qv(q[j].data(), dim);
            Eigen::VectorXf want(n[j]);
            want.noalias() = (keys.topRows(n[j]) * qv.transpose()) * scale;
            for (int r = 0; r < n[j]; ++r)
              ASSERT_EQ(got[j][r], want[r]) << "dim " << dim << " query " << j << " row " << r;
          }
        }
      }
}

// The reads as FlashLayout computed them before its bitmap path (8397a96): entry offsets sorted,
// runs of consecutive pages, each entry in the run holding its first byte, pieces of adjacent slots.
std::vector<ReadRun> reference_runs(std::vector<std::int64_t> offsets, std::int64_t entry, std::int64_t page) {
  std::vector<ReadRun> runs;
  if (offsets.empty()) return runs;
  std::sort(offsets.begin(), offsets.end());
  std::int64_t run_start = -2, prev = -2;
  for (std::int64_t off : offsets)
    for (std::int64_t p = off / page; p <= (off + entry - 1) / page; ++p) {
      if (p == prev) continue;
      if (p != prev + 1) {
        if (run_start >= 0) runs.push_back({run_start * page, (prev - run_start + 1) * page, 0});
        run_start = p;
      }
      prev = p;
    }
  runs.push_back({run_start * page, (prev - run_start + 1) * page, 0});
  std::size_t r = 0;
  std::int64_t prev_off = -1;
  int piece = 0;
  for (std::int64_t off : offsets) {
    const std::size_t before = r;
    while (r + 1 < runs.size() && runs[r + 1].offset_bytes <= off) ++r;
    if (!(r == before && prev_off >= 0 && off == prev_off + entry)) {
      runs[r].pieces += 1;
      piece = 0;
    }
    piece += 1;
    runs[r].entries += 1;
    runs[r].longest_piece = std::max(runs[r].longest_piece, piece);
    prev_off = off;
  }
  return runs;
}

TEST(KvClusterScan, PageRunsOffTheSlotBitmapEqualSortingTheOffsets) {
  // Sequence placement (entry p at p x entry bytes) read at random subsets, with repeated
  // positions (the sorting path) and entry or page sizes that are not powers of two.
  sim::Rng rng(5, 0, "test/kvcluster", "runs");
  for (auto [entry, page] : {std::pair<std::int64_t, std::int64_t>{256, 4096}, {128, 4096}, {384, 4096}, {1000, 3000},
                             {4096, 4096}, {6000, 4096}}) {
    const int n = 3000;
    ClusterTable t(1);
    for (int i = 0; i < n; ++i) {
      const float k[1] = {static_cast<float>(i)};
      t.append_key(k);
    }
    FlashLayout f(Placement::kSequence, entry, page);
    f.place_initial(t);
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<int> positions;
      // Every tenth trial reads nearly everything: blocks of adjacent slots across whole words.
      const double density = trial % 10 == 9 ? 0.995 : rng.uniform(0.001, 0.6);
      for (int p = 0; p < n; ++p)
        if (rng.bernoulli(density)) positions.push_back(p);
      if (trial % 7 == 3 && !positions.empty()) positions.push_back(positions[positions.size() / 2]);  // a repeat
      rng.shuffle(positions);
      std::vector<std::int64_t> offsets;
      for (int p : positions) offsets.push_back(f.offset_of(p));
      const auto got = f.read_runs_of(positions);
      const auto want = reference_runs(offsets, entry, page);
      // Every field of every run (ReadRun's operator==).
      ASSERT_EQ(got.size(), want.size()) << entry << "/" << page << " trial " << trial;
      EXPECT_TRUE(got == want) << entry << "/" << page << " trial " << trial;
    }
  }
}

}  // namespace
}  // namespace mobisim::policies::kvcluster
