#include "sim/rng.h"

#include <algorithm>
#include <numbers>
#include <stdexcept>

namespace mobisim::sim {

std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t h) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Rng::Rng(std::uint64_t raw_seed) {
  std::uint64_t st = raw_seed;
  for (auto& s : s_) s = splitmix64(st);
}

Rng::Rng(std::uint64_t seed, std::uint64_t run, std::string_view component, std::string_view stream) {
  std::uint64_t h = fnv1a64(component);
  h = fnv1a64("/", h);
  h = fnv1a64(stream, h);
  std::uint64_t st = seed ^ (h * 0x9e3779b97f4a7c15ULL);
  st ^= splitmix64(run) + 0x632be59bd9b4e019ULL;  // `run` is a copy: mixing it does not alter the caller's
  for (auto& s : s_) s = splitmix64(st);
}

static inline std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

std::uint64_t Rng::next_u64() {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

std::uint64_t Rng::uniform_int(std::uint64_t n) {
  if (n == 0) throw std::invalid_argument("uniform_int(0)");
  // Lemire's nearly-divisionless method with rejection for exact uniformity.
  __uint128_t m = static_cast<__uint128_t>(next_u64()) * n;
  std::uint64_t low = static_cast<std::uint64_t>(m);
  if (low < n) {
    const std::uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<__uint128_t>(next_u64()) * n;
      low = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::uint64_t>(m >> 64);
}

bool Rng::bernoulli(double p) { return uniform() < p; }

double Rng::exponential(double rate) {
  // 1 - U lies in (0, 1], so the log is finite.
  return -std::log(1.0 - uniform()) / rate;
}

double Rng::normal(double mean, double stddev) {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return mean + stddev * spare_normal_;
  }
  // Marsaglia polar method.
  double u, v, s;
  do {
    u = 2.0 * uniform() - 1.0;
    v = 2.0 * uniform() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  const double f = std::sqrt(-2.0 * std::log(s) / s);
  spare_normal_ = v * f;
  has_spare_normal_ = true;
  return mean + stddev * u * f;
}

double Rng::lognormal(double mu, double sigma) { return std::exp(normal(mu, sigma)); }

double Rng::gamma(double shape, double scale) {
  if (shape < 1.0) {  // boost: Gamma(a) = Gamma(a+1) * U^(1/a)
    const double u = 1.0 - uniform();
    return gamma(shape + 1.0, scale) * std::pow(u, 1.0 / shape);
  }
  // Marsaglia & Tsang (2000).
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x, v;
    do {
      x = normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = 1.0 - uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

double Rng::beta(double a, double b) {
  const double x = gamma(a), y = gamma(b);
  return x / (x + y);
}

std::vector<double> Rng::unit_sphere(std::size_t dim) {
  std::vector<double> v(dim);
  double norm = 0.0;
  do {
    norm = 0.0;
    for (auto& x : v) {
      x = normal();
      norm += x * x;
    }
  } while (norm == 0.0);
  norm = std::sqrt(norm);
  for (auto& x : v) x /= norm;
  return v;
}

std::vector<double> Rng::von_mises_fisher(const std::vector<double>& mu, double kappa) {
  const std::size_t d = mu.size();
  if (d < 2) throw std::invalid_argument("von_mises_fisher needs dimension >= 2");
  if (kappa <= 0.0) return unit_sphere(d);
  // Wood (1994): sample w = <x, mu>, then a uniform direction orthogonal to mu.
  const double dm1 = static_cast<double>(d - 1);
  const double b = dm1 / (2.0 * kappa + std::sqrt(4.0 * kappa * kappa + dm1 * dm1));
  const double x0 = (1.0 - b) / (1.0 + b);
  const double c = kappa * x0 + dm1 * std::log(1.0 - x0 * x0);
  double w = 0.0;
  while (true) {
    const double z = beta(dm1 / 2.0, dm1 / 2.0);
    w = (1.0 - (1.0 + b) * z) / (1.0 - (1.0 - b) * z);
    const double u = 1.0 - uniform();
    if (kappa * w + dm1 * std::log(1.0 - x0 * w) - c >= std::log(u)) break;
  }
  // Random tangent direction: project a Gaussian vector off mu.
  std::vector<double> v(d);
  double dot = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < d; ++i) {
    v[i] = normal();
    dot += v[i] * mu[i];
  }
  for (std::size_t i = 0; i < d; ++i) {
    v[i] -= dot * mu[i];
    norm += v[i] * v[i];
  }
  norm = std::sqrt(norm);
  const double s = std::sqrt(std::max(0.0, 1.0 - w * w));
  std::vector<double> x(d);
  for (std::size_t i = 0; i < d; ++i) x[i] = w * mu[i] + s * (norm > 0 ? v[i] / norm : 0.0);
  return x;
}

ZipfSampler::ZipfSampler(std::size_t n, double exponent) {
  if (n == 0) throw std::invalid_argument("ZipfSampler needs n >= 1");
  cdf_.resize(n);
  double acc = 0.0;
  for (std::size_t k = 0; k < n; ++k) {
    acc += 1.0 / std::pow(static_cast<double>(k + 1), exponent);
    cdf_[k] = acc;
  }
  for (auto& c : cdf_) c /= acc;
  cdf_.back() = 1.0;
}

std::size_t ZipfSampler::sample(Rng& rng) const {
  const double u = rng.uniform();
  return static_cast<std::size_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
}

double ZipfSampler::probability(std::size_t rank) const {
  return rank == 0 ? cdf_[0] : cdf_[rank] - cdf_[rank - 1];
}

}  // namespace mobisim::sim
