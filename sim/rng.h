#pragma once
// Seeded random streams, one per component and purpose (as ns-3 does).
//
// A stream is identified by (seed, run, component path, stream name); adding a
// component never shifts another component's numbers. The generator is
// xoshiro256** seeded through SplitMix64 of a 64-bit FNV-1a hash of the path.
// All samplers are written here (no std::*_distribution, whose output differs
// between standard libraries), so results are identical on every platform.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mobisim::sim {

class Rng {
 public:
  Rng(std::uint64_t seed, std::uint64_t run, std::string_view component, std::string_view stream);
  explicit Rng(std::uint64_t raw_seed);

  std::uint64_t next_u64();
  double uniform();                         // [0, 1)
  double uniform(double lo, double hi);     // [lo, hi)
  std::uint64_t uniform_int(std::uint64_t n);  // [0, n), unbiased
  bool bernoulli(double p);
  double exponential(double rate);          // mean 1/rate
  double normal(double mean = 0.0, double stddev = 1.0);
  double lognormal(double mu, double sigma);  // exp(N(mu, sigma))
  double gamma(double shape, double scale = 1.0);
  double beta(double a, double b);
  // Unit vector on S^{d-1} with mean direction `mu` (unit) and concentration kappa >= 0 (Wood 1994).
  std::vector<double> von_mises_fisher(const std::vector<double>& mu, double kappa);
  std::vector<double> unit_sphere(std::size_t dim);

  template <class T>
  void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[uniform_int(i)]);
  }

 private:
  std::uint64_t s_[4];
  bool has_spare_normal_ = false;
  double spare_normal_ = 0.0;
};

// Zipf(s) over ranks {0, .., n-1}: P(k) proportional to 1/(k+1)^s. O(log n) sampling from a CDF table.
class ZipfSampler {
 public:
  ZipfSampler(std::size_t n, double exponent);
  std::size_t sample(Rng& rng) const;
  double probability(std::size_t rank) const;
  std::size_t size() const { return cdf_.size(); }

 private:
  std::vector<double> cdf_;
};

std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t h = 0xcbf29ce484222325ULL);
std::uint64_t splitmix64(std::uint64_t& state);

}  // namespace mobisim::sim
