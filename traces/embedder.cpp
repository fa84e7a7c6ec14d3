#include "traces/embedder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/error.h"
#include "sim/rng.h"
#include "traces/text.h"

namespace mobisim::traces {

std::string EmbedderConfig::name() const { return "hashed-tfidf-ngram-v1"; }

std::string EmbedderConfig::describe() const {
  return fmt::format("{}(dim={}, char_ngrams={}-{}, word_weight={}, anisotropy={}, idf=per-user-chunks)", name(),
                     dim, char_ngram_min, char_ngram_max, word_weight, anisotropy);
}

std::optional<EmbedderConfig> EmbedderConfig::parse(const std::string& d) {
  EmbedderConfig c;
  const std::string prefix = c.name() + "(";
  if (d.rfind(prefix, 0) != 0) return std::nullopt;
  auto value = [&](const std::string& key) -> std::optional<std::string> {
    const auto p = d.find(key + "=");
    if (p == std::string::npos) return std::nullopt;
    const auto b = p + key.size() + 1;
    const auto e = d.find_first_of(",)", b);
    return d.substr(b, e - b);
  };
  try {
    if (auto v = value("dim")) c.dim = std::stoi(*v);
    if (auto v = value("char_ngrams")) {
      const auto dash = v->find('-');
      c.char_ngram_min = std::stoi(v->substr(0, dash));
      c.char_ngram_max = std::stoi(v->substr(dash + 1));
    }
    if (auto v = value("word_weight")) c.word_weight = std::stod(*v);
    if (auto v = value("anisotropy")) c.anisotropy = std::stod(*v);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return c;
}

HashedEmbedder::HashedEmbedder(EmbedderConfig cfg) : cfg_(cfg) {
  if (cfg_.dim < 2) throw ConfigError(fmt::format("embedder dim must be >= 2, got {}", cfg_.dim));
  if (cfg_.char_ngram_min < 1 || cfg_.char_ngram_max < cfg_.char_ngram_min)
    throw ConfigError(fmt::format("embedder char n-gram range {}-{} is invalid", cfg_.char_ngram_min,
                                  cfg_.char_ngram_max));
  if (!(cfg_.word_weight >= 0 && cfg_.word_weight <= 1))
    throw ConfigError(fmt::format("embedder word_weight must be in [0,1], got {}", cfg_.word_weight));
  if (!(cfg_.anisotropy >= 0 && cfg_.anisotropy < 1))
    throw ConfigError(fmt::format("embedder anisotropy must be in [0,1), got {}", cfg_.anisotropy));
}

void HashedEmbedder::features(std::string_view text, std::vector<Feature>& out) const {
  out.clear();
  std::string buf;
  for (const std::string& w : words(text)) {
    out.push_back({sim::fnv1a64(w, sim::fnv1a64("w:")), true});
    buf = "<" + w + ">";
    for (int n = cfg_.char_ngram_min; n <= cfg_.char_ngram_max; ++n) {
      if (static_cast<std::size_t>(n) > buf.size()) break;
      for (std::size_t i = 0; i + n <= buf.size(); ++i)
        out.push_back({sim::fnv1a64(std::string_view(buf).substr(i, n), sim::fnv1a64("c:")), false});
    }
  }
}

void HashedEmbedder::fit(const std::vector<std::string>& corpus) {
  df_.clear();
  n_docs_ = corpus.size();
  std::vector<Feature> f;
  std::vector<std::uint64_t> hashes;
  for (const auto& doc : corpus) {
    features(doc, f);
    hashes.clear();
    for (const auto& x : f) hashes.push_back(x.hash);
    std::sort(hashes.begin(), hashes.end());
    hashes.erase(std::unique(hashes.begin(), hashes.end()), hashes.end());
    for (std::uint64_t h : hashes) ++df_[h];
  }
}

double HashedEmbedder::idf(std::uint64_t h) const {
  if (n_docs_ == 0) return 1.0;
  auto it = df_.find(h);
  const double df = it == df_.end() ? 0.0 : it->second;
  return std::log((1.0 + n_docs_) / (1.0 + df)) + 1.0;
}

std::vector<float> HashedEmbedder::embed(std::string_view text) const {
  std::vector<Feature> f;
  features(text, f);
  // Term frequencies per feature; sorting makes the accumulation order (and so
  // the float result) independent of hash-table iteration.
  std::sort(f.begin(), f.end(), [](const Feature& a, const Feature& b) {
    return a.hash != b.hash ? a.hash < b.hash : a.is_word < b.is_word;
  });
  const std::size_t buckets = static_cast<std::size_t>(cfg_.dim) - 1;
  std::vector<double> wv(buckets, 0.0), cv(buckets, 0.0);
  for (std::size_t i = 0; i < f.size();) {
    std::size_t j = i;
    while (j < f.size() && f[j].hash == f[i].hash && f[j].is_word == f[i].is_word) ++j;
    const double tf = static_cast<double>(j - i);
    const double w = (1.0 + std::log(tf)) * idf(f[i].hash);
    const std::uint64_t h = f[i].hash;
    const std::size_t b = static_cast<std::size_t>((h >> 1) % buckets);
    const double sign = (h & 1) ? -1.0 : 1.0;
    (f[i].is_word ? wv : cv)[b] += sign * w;
    i = j;
  }
  auto norm = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s);
  };
  const double nw = norm(wv), nc = norm(cv);
  std::vector<double> raw(buckets, 0.0);
  double ww = cfg_.word_weight, wc = 1.0 - cfg_.word_weight;
  if (nw == 0 && nc == 0) ww = wc = 0;
  for (std::size_t i = 0; i < buckets; ++i) {
    if (nw > 0) raw[i] += std::sqrt(ww) * wv[i] / nw;
    if (nc > 0) raw[i] += std::sqrt(wc) * cv[i] / nc;
  }
  // The mixed vector is not exactly unit length when the two parts collide in a
  // bucket; renormalise so the dot product stays a cosine.
  const double nr = norm(raw);
  std::vector<float> out(static_cast<std::size_t>(cfg_.dim), 0.0f);
  out[0] = static_cast<float>(std::sqrt(cfg_.anisotropy));
  if (nr > 0) {
    const double s = std::sqrt(1.0 - cfg_.anisotropy) / nr;
    for (std::size_t i = 0; i < buckets; ++i) out[i + 1] = static_cast<float>(raw[i] * s);
  } else {
    out[0] = 1.0f;  // an empty text: only the shared direction
  }
  return out;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return 0.0;
  const double na = std::sqrt(dot(a, a)), nb = std::sqrt(dot(b, b));
  if (na == 0 || nb == 0) return 0.0;
  return dot(a, b) / (na * nb);
}

}  // namespace mobisim::traces
