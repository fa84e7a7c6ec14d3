// Seeded RNG streams, samplers, and statistics.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/h5.h"
#include "sim/rng.h"
#include "sim/simulator.h"
#include "sim/stats.h"
#include "tests/test_util.h"

namespace mobisim::sim {
namespace {

TEST(SimRng, SameSeedSameStreamSameNumbers) {
  Rng a(7, 0, "device/ufs", "latency"), b(7, 0, "device/ufs", "latency");
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
}

TEST(SimRng, StreamsAreIndependentOfEachOther) {
  // Adding a component (a new stream) must not change another stream's numbers.
  Rng lone(7, 0, "policy", "predictor");
  std::vector<std::uint64_t> expected;
  for (int i = 0; i < 10; ++i) expected.push_back(lone.next_u64());
  Rng other(7, 0, "device", "noise");
  for (int i = 0; i < 1000; ++i) other.next_u64();
  Rng again(7, 0, "policy", "predictor");
  for (int i = 0; i < 10; ++i) EXPECT_EQ(again.next_u64(), expected[i]);
  // Different seed, run, component or stream name give different streams.
  EXPECT_NE(Rng(8, 0, "policy", "predictor").next_u64(), expected[0]);
  EXPECT_NE(Rng(7, 1, "policy", "predictor").next_u64(), expected[0]);
  EXPECT_NE(Rng(7, 0, "policy2", "predictor").next_u64(), expected[0]);
  EXPECT_NE(Rng(7, 0, "policy", "predictor2").next_u64(), expected[0]);
}

TEST(SimRng, SamplerMomentsMatchTheirDistributions) {
  Rng r(1, 0, "test", "moments");
  const int n = 200000;
  double se = 0, sn = 0, sn2 = 0, sl = 0, su = 0;
  for (int i = 0; i < n; ++i) {
    se += r.exponential(2.0);
    const double x = r.normal(3.0, 2.0);
    sn += x;
    sn2 += x * x;
    sl += r.lognormal(0.0, 0.5);
    su += r.uniform(2.0, 4.0);
  }
  EXPECT_NEAR(se / n, 0.5, 0.01);                          // mean 1/rate
  EXPECT_NEAR(sn / n, 3.0, 0.02);
  EXPECT_NEAR(sn2 / n - std::pow(sn / n, 2), 4.0, 0.06);   // variance sigma^2
  EXPECT_NEAR(sl / n, std::exp(0.125), 0.01);              // exp(mu + sigma^2/2)
  EXPECT_NEAR(su / n, 3.0, 0.01);
}

TEST(SimRng, UniformIntIsUnbiasedAndInRange) {
  Rng r(3, 0, "test", "ints");
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) {
    auto v = r.uniform_int(7);
    ASSERT_LT(v, 7u);
    ++counts[v];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
}

TEST(SimRng, ZipfProbabilitiesAndFrequencies) {
  ZipfSampler z(4, 1.0);
  // P(k) = (1/(k+1)) / H_4 with H_4 = 25/12.
  EXPECT_NEAR(z.probability(0), 12.0 / 25.0, 1e-12);
  EXPECT_NEAR(z.probability(3), 3.0 / 25.0, 1e-12);
  Rng r(5, 0, "test", "zipf");
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 100000; ++i) ++counts[z.sample(r)];
  EXPECT_NEAR(counts[0] / 1e5, 0.48, 0.01);
  EXPECT_NEAR(counts[3] / 1e5, 0.12, 0.01);
}

TEST(SimRng, VonMisesFisherConcentratesAroundMean) {
  Rng r(9, 0, "test", "vmf");
  const std::size_t d = 16;
  std::vector<double> mu(d, 0.0);
  mu[0] = 1.0;
  const double kappa = 200.0;
  double mean_cos = 0;
  const int n = 5000;
  for (int i = 0; i < n; ++i) {
    auto x = r.von_mises_fisher(mu, kappa);
    double norm = 0;
    for (double v : x) norm += v * v;
    ASSERT_NEAR(norm, 1.0, 1e-9);
    mean_cos += x[0];
  }
  // For large kappa, E[mu.x] ~ 1 - (d-1)/(2 kappa) = 1 - 15/400.
  EXPECT_NEAR(mean_cos / n, 1.0 - 15.0 / 400.0, 0.004);
}

TEST(SimStats, HistogramPercentilesMatchNumpyLinear) {
  Histogram h;
  for (double v : {4.0, 1.0, 3.0, 2.0}) h.add(v);
  EXPECT_DOUBLE_EQ(h.percentile(50), 2.5);  // numpy.percentile([1,2,3,4], 50)
  EXPECT_DOUBLE_EQ(h.percentile(90), 3.7);
  EXPECT_DOUBLE_EQ(h.mean(), 2.5);
  EXPECT_DOUBLE_EQ(h.min(), 1.0);
  EXPECT_DOUBLE_EQ(h.max(), 4.0);
}

TEST(SimStats, TimeWeightedAverageByHand) {
  Simulator sim;
  StatGroup g("root");
  auto& q = g.time_weighted(sim, "queue", "requests", "queue length");
  sim.schedule_call(10, [&] { q.set(4); });
  sim.schedule_call(30, [&] { q.set(1); });
  sim.schedule_call(40, [] {});
  sim.run();
  // 0 for 10 ns, 4 for 20 ns, 1 for 10 ns over 40 ns: (0 + 80 + 10) / 40.
  EXPECT_DOUBLE_EQ(q.mean(), 90.0 / 40.0);
  EXPECT_DOUBLE_EQ(q.max(), 4.0);
}

TEST(SimStats, TreeFlattensWithPaths) {
  StatGroup g("device");
  g.child("ufs").counter("bytes_read", "bytes", "").add(4096);
  g.child("ufs").counter("commands", "count", "").add(2);
  auto flat = g.flatten();
  ASSERT_EQ(flat.size(), 2u);
  EXPECT_EQ(flat[0].first, "device.ufs.bytes_read");
  EXPECT_EQ(flat[0].second, 4096);
}

// Per-user groups are written as columns: one value per member, in member order, equal to what
// each member's own group holds; histograms keep every sample, split by offsets.
TEST(SimStats, TabulatedChildrenAreWrittenAsColumnsHoldingEachMembersValues) {
  StatGroup g("stats");
  g.tabulate_children("user");
  const std::vector<std::vector<double>> latencies{{3, 1, 2}, {}, {10}};
  for (int u = 0; u < 3; ++u) {
    StatGroup& member = g.child(std::string("u").append(std::to_string(u)));
    member.child("dev", "the device").counter("bytes_read", "bytes", "read").add(100.0 * u);
    auto& h = member.child("dev").histogram("latency_ms", "ms", "per request");
    for (double x : latencies[u]) h.add(x);
  }
  mobisim::testing::TempDir dir;
  {
    h5::Writer w(dir.file("s.h5"));
    g.write(w.root());
    w.commit();
  }
  h5::Reader r(dir.file("s.h5"));
  EXPECT_EQ(r.strings("/stats/by_user/user"), (std::vector<std::string>{"u0", "u1", "u2"}));
  EXPECT_EQ(r.doubles("/stats/by_user/dev/bytes_read/value"), (std::vector<double>{0, 100, 200}));
  EXPECT_EQ(r.attr_string("/stats/by_user/dev/bytes_read", "unit"), "bytes");
  EXPECT_EQ(r.attr_string("/stats/by_user/dev", "doc"), "the device");
  EXPECT_EQ(r.ints("/stats/by_user/dev/latency_ms/count"), (std::vector<std::int64_t>{3, 0, 1}));
  EXPECT_EQ(r.doubles("/stats/by_user/dev/latency_ms/samples"), (std::vector<double>{3, 1, 2, 10}));
  EXPECT_EQ(r.ints("/stats/by_user/dev/latency_ms/sample_offsets"), (std::vector<std::int64_t>{0, 3, 3, 4}));
  EXPECT_EQ(r.doubles("/stats/by_user/dev/latency_ms/p50"), (std::vector<double>{2, 0, 10}));
  EXPECT_FALSE(r.exists("/stats/u0"));
}

// Members of different shapes cannot share columns: each keeps its own group.
TEST(SimStats, TabulatedChildrenOfDifferentShapesAreWrittenAsGroups) {
  StatGroup g("stats");
  g.tabulate_children("user");
  g.child("a").counter("x", "count", "").add(1);
  g.child("b").counter("y", "count", "").add(2);
  mobisim::testing::TempDir dir;
  {
    h5::Writer w(dir.file("s.h5"));
    g.write(w.root());
    w.commit();
  }
  h5::Reader r(dir.file("s.h5"));
  EXPECT_FALSE(r.exists("/stats/by_user"));
  EXPECT_DOUBLE_EQ(r.attr_double("/stats/b/y", "value"), 2.0);
}

}  // namespace
}  // namespace mobisim::sim
