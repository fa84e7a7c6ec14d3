// The centroid scans (policies/kvcluster/cluster_scan.h) are the Eigen expressions they replaced,
// bit for bit: selection ranks and nearest clusters, hence every DynaKV number, depend on it.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <vector>

#include "policies/kvcluster/cluster_scan.h"
#include "sim/rng.h"

namespace mobisim::policies::kvcluster {
namespace {

using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

TEST(KvClusterScan, DistancesAndScoresEqualEigenBitForBit) {
  sim::Rng rng(3, 0, "test/kvcluster", "scan");
  // Row counts around the kernels' blocks (8 rows, 2 rows), even and odd dimensions, 1 to 9 queries.
  for (int rows : {2, 3, 7, 8, 9, 17, 64, 301})
    for (int dim : {1, 2, 5, 64, 128})
      for (int heads : {1, 3, 4, 8, 9}) {
        RowMatD c(rows, dim);
        for (Eigen::Index i = 0; i < c.size(); ++i) c.data()[i] = rng.normal(0.0, 4.0);
        std::vector<Eigen::VectorXf> qf(heads, Eigen::VectorXf(dim));
        for (auto& q : qf)
          for (int d = 0; d < dim; ++d) q[d] = static_cast<float>(rng.normal(0.0, 2.0));
        // Distances to the first query (as a key), as ClusterTable::nearest_cluster computed them.
        const Eigen::RowVectorXd kv = qf[0].transpose().cast<double>();
        Eigen::VectorXd want = (c.rowwise() - kv).rowwise().squaredNorm();
        std::vector<double> got(rows);
        squared_distances(c.data(), rows, dim, kv.data(), got.data());
        for (int r = 0; r < rows; ++r) ASSERT_EQ(got[r], want[r]) << rows << "x" << dim << " row " << r;
        // Scores of every query, as ClusterTable::select's GEMV computed them.
        std::vector<Eigen::VectorXd> qd;
        std::vector<const double*> ptrs;
        for (const auto& q : qf) qd.push_back(q.cast<double>());
        for (const auto& q : qd) ptrs.push_back(q.data());
        std::vector<double> scores(static_cast<std::size_t>(rows) * heads);
        centroid_scores(c.data(), rows, dim, ptrs.data(), heads, scores.data());
        for (int h = 0; h < heads; ++h) {
          Eigen::VectorXd s(rows);
          s.setZero();
          s.noalias() += c * qd[h];
          for (int r = 0; r < rows; ++r)
            ASSERT_EQ(scores[static_cast<std::size_t>(h) * rows + r], s[r]) << rows << "x" << dim << " head " << h;
        }
      }
}

}  // namespace
}  // namespace mobisim::policies::kvcluster
