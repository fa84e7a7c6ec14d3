#include "traces/embedder.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <span>

#if defined(__SSE2__)
#include <emmintrin.h>  // SSE2 is part of x86-64: blocked dot products two rows per register
#endif

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

namespace {
constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;  // sim::fnv1a64's, one byte at a time
constexpr std::size_t kPrefetchAhead = 8;  // IDF-table lookups issued ahead of use
// Feature lists up to this long are accumulated by one sort (accumulate_sorted), longer ones by bucket.
constexpr std::size_t kShortFeatureList = 256;
inline std::uint64_t fnv_step(std::uint64_t h, unsigned char c) { return (h ^ c) * kFnvPrime; }
// First probe position of feature hash h in an open-addressing table of mask + 1 slots.
inline std::size_t home_position(std::uint64_t h, std::size_t mask) {
  return static_cast<std::size_t>((h * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
}

// 1 + ln(tf), tabulated for the small counts nearly every feature has (the same doubles).
double sublinear_tf(std::size_t tf) {
  static const std::array<double, 32> kTable = [] {
    std::array<double, 32> t{};
    for (std::size_t i = 1; i < t.size(); ++i) t[i] = 1.0 + std::log(static_cast<double>(i));
    return t;
  }();
  return tf < kTable.size() ? kTable[tf] : 1.0 + std::log(static_cast<double>(tf));
}
}  // namespace

HashedEmbedder::HashedEmbedder(EmbedderConfig cfg)
    : cfg_(cfg), word_seed_(sim::fnv1a64("w:")), char_seed_(sim::fnv1a64("c:")) {
  if (cfg_.dim < 2) throw ConfigError(fmt::format("embedder dim must be >= 2, got {}", cfg_.dim));
  if (cfg_.char_ngram_min < 1 || cfg_.char_ngram_max < cfg_.char_ngram_min)
    throw ConfigError(fmt::format("embedder char n-gram range {}-{} is invalid", cfg_.char_ngram_min,
                                  cfg_.char_ngram_max));
  if (!(cfg_.word_weight >= 0 && cfg_.word_weight <= 1))
    throw ConfigError(fmt::format("embedder word_weight must be in [0,1], got {}", cfg_.word_weight));
  if (!(cfg_.anisotropy >= 0 && cfg_.anisotropy < 1))
    throw ConfigError(fmt::format("embedder anisotropy must be in [0,1), got {}", cfg_.anisotropy));
}

// Word feature: FNV-1a of the word after the "w:" prefix. Character features: FNV-1a of each
// n-gram (n = min..max) of "<word>" after "c:"; the n-grams starting at one position share their
// prefix, so their hashes are extended byte by byte instead of rehashed.
void HashedEmbedder::features(std::string_view text, std::vector<std::uint64_t>& word_hashes,
                              std::vector<std::uint64_t>& char_hashes) const {
  word_hashes.clear();
  char_hashes.clear();
  std::string wrapped;
  for_each_word(text, [&](std::string_view w) { word_features(w, word_hashes, char_hashes, wrapped); });
}

void HashedEmbedder::word_features(std::string_view w, std::vector<std::uint64_t>& word_hashes,
                                   std::vector<std::uint64_t>& char_hashes, std::string& wrapped) const {
  const std::size_t n_min = static_cast<std::size_t>(cfg_.char_ngram_min);
  const std::size_t n_max = static_cast<std::size_t>(cfg_.char_ngram_max);
  std::uint64_t h = word_seed_;
  for (unsigned char c : w) h = fnv_step(h, c);
  word_hashes.push_back(h);
  wrapped.assign(1, '<');
  wrapped.append(w);
  wrapped.push_back('>');
  const std::size_t len = wrapped.size();
  for (std::size_t i = 0; i + n_min <= len; ++i) {
    std::uint64_t g = char_seed_;
    for (std::size_t n = 1; n <= n_max && i + n <= len; ++n) {
      g = fnv_step(g, static_cast<unsigned char>(wrapped[i + n - 1]));
      if (n >= n_min) char_hashes.push_back(g);
    }
  }
}

std::size_t HashedEmbedder::home_slot(std::uint64_t h) const {
  return home_position(h, slots_.size() - 1);
}

void HashedEmbedder::prefetch_slot(std::uint64_t h) const {
  if (!slots_.empty()) __builtin_prefetch(&slots_[home_slot(h)]);
}

std::size_t HashedEmbedder::slot_of(std::uint64_t h) const {
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = home_slot(h);
  while (slots_[i].df != 0 && slots_[i].key != h) i = (i + 1) & mask;
  return i;
}

void HashedEmbedder::fit(const std::vector<std::string>& corpus) { fit(TextWords::of(corpus)); }

HashedEmbedder::VocabFeatures HashedEmbedder::vocab_features(const TextWords& corpus) const {
  VocabFeatures f;
  f.begin.assign(corpus.vocab.size() + 1, 0);
  std::vector<std::uint64_t> char_hashes;
  std::string wrapped;
  for (std::size_t v = 0; v < corpus.vocab.size(); ++v) {
    char_hashes.clear();
    word_features(corpus.vocab[v], f.hashes, char_hashes, wrapped);  // exactly one word hash
    f.hashes.insert(f.hashes.end(), char_hashes.begin(), char_hashes.end());
    f.begin[v + 1] = f.hashes.size();
  }
  return f;
}

void HashedEmbedder::fit(const TextWords& corpus) { fit_vocabulary(corpus, vocab_features(corpus)); }

void HashedEmbedder::fit_vocabulary(const TextWords& corpus, const VocabFeatures& features) {
  // Features by dense id: each distinct feature of the vocabulary gets an id once (one hash probe
  // per vocabulary feature, not one per feature of every document), documents count ids in flat
  // arrays, and the IDF table receives each counted feature once at the end.
  std::vector<std::uint64_t> keys;  // id -> feature hash
  const std::vector<std::uint32_t> ids = dense_feature_ids(features.hashes, keys);
  const auto& begin = features.begin;
  // A document's features are those of its distinct words (repeated words add nothing).
  constexpr auto kNone = static_cast<std::uint32_t>(-1);
  std::vector<std::uint32_t> last_word(corpus.vocab.size(), kNone), last_doc(keys.size(), kNone),
      df(keys.size(), 0);
  for (std::size_t d = 0; d < corpus.texts.size(); ++d) {
    const auto doc = static_cast<std::uint32_t>(d);
    for (std::uint32_t v : corpus.texts[d]) {
      if (last_word[v] == doc) continue;
      last_word[v] = doc;
      for (std::size_t i = begin[v]; i < begin[v + 1]; ++i) {
        const std::uint32_t id = ids[i];
        if (last_doc[id] == doc) continue;
        last_doc[id] = doc;
        ++df[id];
      }
    }
  }
  set_document_frequencies(corpus.texts.size(), keys, df);
}

std::vector<std::uint32_t> HashedEmbedder::dense_feature_ids(std::span<const std::uint64_t> hashes,
                                                             std::vector<std::uint64_t>& keys) {
  // Open addressing at most half full (sized for every hash distinct).
  std::size_t size = 1;
  while (size < 2 * hashes.size()) size *= 2;
  const std::size_t mask = size - 1;
  constexpr auto kEmpty = static_cast<std::uint32_t>(-1);
  std::vector<std::uint32_t> table(size, kEmpty);
  std::vector<std::uint32_t> ids(hashes.size());
  keys.clear();
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    const std::uint64_t h = hashes[i];
    std::size_t slot = home_position(h, mask);
    while (table[slot] != kEmpty && keys[table[slot]] != h) slot = (slot + 1) & mask;
    if (table[slot] == kEmpty) {
      table[slot] = static_cast<std::uint32_t>(keys.size());
      keys.push_back(h);
    }
    ids[i] = table[slot];
  }
  return ids;
}

void HashedEmbedder::set_document_frequencies(std::size_t n_docs, std::span<const std::uint64_t> keys,
                                              std::span<const std::uint32_t> df) {
  std::size_t counted = 0;
  for (std::uint32_t f : df) counted += f != 0;
  // Open addressing, at most half full.
  std::size_t size = 0;
  if (counted != 0) {
    size = 1024;
    while (2 * counted > size) size *= 2;
  }
  slots_.assign(size, Slot{});
  n_docs_ = n_docs;
  auto smoothed_idf = [&](double f) { return std::log((1.0 + n_docs_) / (1.0 + f)) + 1.0; };
  for (std::size_t id = 0; id < keys.size(); ++id) {
    if (df[id] == 0) continue;
    Slot& x = slots_[slot_of(keys[id])];
    x.key = keys[id];
    x.df = df[id];
    x.idf = smoothed_idf(x.df);
  }
  idf_unseen_ = n_docs_ == 0 ? 1.0 : smoothed_idf(0.0);
}

std::vector<std::vector<float>> HashedEmbedder::fit_embed(const std::vector<std::string>& corpus) {
  return fit_embed(TextWords::of(corpus));
}

std::vector<std::vector<float>> HashedEmbedder::fit_embed(const TextWords& corpus) {
  // Each vocabulary word's features, computed once, serve the fit and every document's embedding:
  // a document's lists are its words' features, occurrence by occurrence, so they hold the same
  // hashes as features() of its text, and embed_features does not depend on their order.
  const VocabFeatures f = vocab_features(corpus);
  fit_vocabulary(corpus, f);
  std::vector<std::vector<float>> out;
  out.reserve(corpus.texts.size());
  EmbedScratch scratch;
  std::vector<std::uint64_t> word_hashes, char_hashes;
  for (const auto& text : corpus.texts) {
    word_hashes.clear();
    char_hashes.clear();
    for (std::uint32_t v : text) {
      const auto first = f.hashes.begin() + static_cast<std::ptrdiff_t>(f.begin[v]);
      const auto last = f.hashes.begin() + static_cast<std::ptrdiff_t>(f.begin[v + 1]);
      word_hashes.push_back(*first);
      char_hashes.insert(char_hashes.end(), first + 1, last);
    }
    out.push_back(embed_features(word_hashes, char_hashes, scratch));
  }
  return out;
}

double HashedEmbedder::idf(std::uint64_t h) const {
  if (n_docs_ == 0 || slots_.empty()) return idf_unseen_;
  const Slot& x = slots_[slot_of(h)];
  return x.df == 0 ? idf_unseen_ : x.idf;
}

std::vector<float> HashedEmbedder::embed(std::string_view text) const {
  std::vector<std::uint64_t> word_hashes, char_hashes;
  features(text, word_hashes, char_hashes);
  EmbedScratch scratch;
  return embed_features(word_hashes, char_hashes, scratch);
}

// Adds each distinct feature's signed weight to its bucket of v. A bucket's sum depends on the
// order of its own terms only, so ascending hash order is needed within each bucket, not across
// the list: the features are grouped by bucket (counting sort) and each group (a few features)
// sorted. Equal hashes share a bucket, so each group also yields the term frequencies.
// `scratch` only saves allocations between calls (its contents on entry do not matter).
void HashedEmbedder::accumulate_features(std::span<const std::uint64_t> hashes, std::vector<double>& v,
                                         EmbedScratch& scratch) const {
  const std::size_t buckets = v.size();
  if (hashes.size() <= kShortFeatureList) {
    accumulate_sorted(hashes, v, scratch);
    return;
  }
  auto& bucket = scratch.bucket;
  auto& begin = scratch.begin;
  auto& next = scratch.next;
  auto& grouped = scratch.grouped;
  bucket.resize(hashes.size());
  begin.assign(buckets + 1, 0);
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    bucket[i] = static_cast<std::uint32_t>((hashes[i] >> 1) % buckets);
    ++begin[bucket[i] + 1];
  }
  for (std::size_t b = 0; b < buckets; ++b) begin[b + 1] += begin[b];
  grouped.resize(hashes.size());
  next.assign(begin.begin(), begin.end() - 1);
  for (std::size_t i = 0; i < hashes.size(); ++i) grouped[next[bucket[i]]++] = hashes[i];
  for (std::size_t i = 0; i < grouped.size() && i < kPrefetchAhead; ++i) prefetch_slot(grouped[i]);
  for (std::size_t b = 0; b < buckets; ++b) {
    const auto first = grouped.begin() + begin[b], last = grouped.begin() + begin[b + 1];
    if (first == last) continue;
    if (last - first == 2) {
      if (first[1] < first[0]) std::swap(first[0], first[1]);
    } else if (last - first > 2) {
      std::sort(first, last);
    }
    for (auto it = first; it != last;) {
      auto run_end = it;
      while (run_end != last && *run_end == *it) ++run_end;
      const std::size_t k = static_cast<std::size_t>(run_end - grouped.begin());
      if (k + kPrefetchAhead < grouped.size()) prefetch_slot(grouped[k + kPrefetchAhead]);
      const std::uint64_t h = *it;
      const double w = sublinear_tf(static_cast<std::size_t>(run_end - it)) * idf(h);
      const double sign = (h & 1) ? -1.0 : 1.0;
      v[b] += sign * w;
      it = run_end;
    }
  }
}

// A short list (a query's features): sorting it all is cheaper than a pass over every bucket, and
// ascending hash order overall is ascending order within each bucket, so each bucket receives the
// same terms in the same order as from accumulate_features' grouping.
void HashedEmbedder::accumulate_sorted(std::span<const std::uint64_t> hashes, std::vector<double>& v,
                                       EmbedScratch& scratch) const {
  const std::size_t buckets = v.size();
  auto& sorted = scratch.grouped;
  sorted.assign(hashes.begin(), hashes.end());
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size() && i < kPrefetchAhead; ++i) prefetch_slot(sorted[i]);
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i + 1;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    if (j + kPrefetchAhead < sorted.size()) prefetch_slot(sorted[j + kPrefetchAhead]);
    const std::uint64_t h = sorted[i];
    const double w = sublinear_tf(j - i) * idf(h);
    const double sign = (h & 1) ? -1.0 : 1.0;
    v[static_cast<std::size_t>((h >> 1) % buckets)] += sign * w;
    i = j;
  }
}

std::vector<float> HashedEmbedder::embed_features(std::span<const std::uint64_t> word_hashes,
                                                  std::span<const std::uint64_t> char_hashes,
                                                  EmbedScratch& scratch) const {
  const std::size_t buckets = static_cast<std::size_t>(cfg_.dim) - 1;
  auto& wv = scratch.words;
  auto& cv = scratch.chars;
  wv.assign(buckets, 0.0);
  cv.assign(buckets, 0.0);
  // Words and n-grams feed separate vectors; each term's weight is its sublinear TF times IDF.
  accumulate_features(word_hashes, wv, scratch);
  accumulate_features(char_hashes, cv, scratch);
  // The buckets any feature reached, ascending: every other bucket is +0.0 in both parts and stays
  // +0.0 throughout (its square adds exactly nothing to a sum of squares, its mixed value is 0.0
  // and its output 0.0f), so the loops below visit only these, in index order, and give the same
  // bits as visiting all. A long text reaches most buckets: then simply all of them.
  auto& touched = scratch.touched;
  touched.clear();
  if (word_hashes.size() + char_hashes.size() <= kShortFeatureList) {
    for (auto h : word_hashes) touched.push_back(static_cast<std::uint32_t>((h >> 1) % buckets));
    for (auto h : char_hashes) touched.push_back(static_cast<std::uint32_t>((h >> 1) % buckets));
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  } else {
    for (std::size_t i = 0; i < buckets; ++i) touched.push_back(static_cast<std::uint32_t>(i));
  }
  auto norm = [&](const std::vector<double>& v) {
    double s = 0;
    for (auto i : touched) s += v[i] * v[i];
    return std::sqrt(s);
  };
  const double nw = norm(wv), nc = norm(cv);
  double ww = cfg_.word_weight, wc = 1.0 - cfg_.word_weight;
  if (nw == 0 && nc == 0) ww = wc = 0;
  const double sw = std::sqrt(ww), sc = std::sqrt(wc);
  // The mixed vector, in place of the word part (element i reads only wv[i] and cv[i]); each
  // element is formed as before: 0.0, plus the word term, plus the n-gram term.
  for (auto i : touched) {
    double r = 0.0;
    if (nw > 0) r += sw * wv[i] / nw;
    if (nc > 0) r += sc * cv[i] / nc;
    wv[i] = r;
  }
  // The mixed vector is not exactly unit length when the two parts collide in a
  // bucket; renormalise so the dot product stays a cosine.
  const double nr = norm(wv);
  std::vector<float> out(static_cast<std::size_t>(cfg_.dim), 0.0f);
  out[0] = static_cast<float>(std::sqrt(cfg_.anisotropy));
  if (nr > 0) {
    const double s = std::sqrt(1.0 - cfg_.anisotropy) / nr;
    for (auto i : touched) out[i + 1] = static_cast<float>(wv[i] * s);
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

std::vector<double> dots(const std::vector<float>& q, const std::vector<std::vector<float>>& rows) {
  std::vector<double> out(rows.size());
  std::size_t r = 0;
  for (; r + 4 <= rows.size(); r += 4) {
    const std::vector<float>&a = rows[r], &b = rows[r + 1], &c = rows[r + 2], &d = rows[r + 3];
    const std::size_t n = std::min({q.size(), a.size(), b.size(), c.size(), d.size()});
    double sa = 0, sb = 0, sc = 0, sd = 0;
    std::size_t i = 0;
    for (; i < n; ++i) {
      const double x = q[i];
      sa += x * a[i];
      sb += x * b[i];
      sc += x * c[i];
      sd += x * d[i];
    }
    // A longer row (rows of unequal length) finishes its own sum alone, still in index order.
    for (std::size_t j = i; j < std::min(q.size(), a.size()); ++j) sa += static_cast<double>(q[j]) * a[j];
    for (std::size_t j = i; j < std::min(q.size(), b.size()); ++j) sb += static_cast<double>(q[j]) * b[j];
    for (std::size_t j = i; j < std::min(q.size(), c.size()); ++j) sc += static_cast<double>(q[j]) * c[j];
    for (std::size_t j = i; j < std::min(q.size(), d.size()); ++j) sd += static_cast<double>(q[j]) * d[j];
    out[r] = sa;
    out[r + 1] = sb;
    out[r + 2] = sc;
    out[r + 3] = sd;
  }
  for (; r < rows.size(); ++r) out[r] = dot(q, rows[r]);
  return out;
}

std::vector<double> dots(const std::vector<float>& q, std::span<const std::vector<float>* const> rows) {
  std::vector<double> out(rows.size());
  std::size_t r = 0;
  for (; r + 4 <= rows.size(); r += 4) {
    const float *a = rows[r]->data(), *b = rows[r + 1]->data(), *c = rows[r + 2]->data(), *d = rows[r + 3]->data();
    const std::size_t n = std::min({q.size(), rows[r]->size(), rows[r + 1]->size(), rows[r + 2]->size(),
                                    rows[r + 3]->size()});
    if (n != q.size() || rows[r]->size() != n || rows[r + 1]->size() != n || rows[r + 2]->size() != n ||
        rows[r + 3]->size() != n) {
      for (std::size_t j = r; j < r + 4; ++j) out[j] = dot(q, *rows[j]);  // unequal lengths: one at a time
      continue;
    }
    double sa = 0, sb = 0, sc = 0, sd = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double x = q[i];
      sa += x * a[i];
      sb += x * b[i];
      sc += x * c[i];
      sd += x * d[i];
    }
    out[r] = sa;
    out[r + 1] = sb;
    out[r + 2] = sc;
    out[r + 3] = sd;
  }
  for (; r < rows.size(); ++r) out[r] = dot(q, *rows[r]);
  return out;
}

void BlockedRows::set(std::size_t row, std::span<const float> v) {
  if (v.size() != dim_)
    throw InputError(fmt::format("internal: a row of {} values in blocked rows of dimension {}", v.size(), dim_));
  const std::size_t block = row / kRows;
  if (values_.size() < (block + 1) * dim_ * kRows) values_.resize((block + 1) * dim_ * kRows, 0.0f);
  float* b = values_.data() + block * dim_ * kRows;
  for (std::size_t d = 0; d < dim_; ++d) b[d * kRows + row % kRows] = v[d];
  all_finite_ = all_finite_ && std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

std::vector<double> BlockedRows::dots(std::span<const float> q, std::size_t n) const {
  if (q.size() != dim_ || n > rows())
    throw InputError(fmt::format("internal: scoring {} of {} blocked rows of dimension {} with a query of {}", n,
                                 rows(), dim_, q.size()));
  // Per row: s = 0, then s += double(q[d]) * e[d] for d = 0, 1, ... exactly as dot(): the rows of
  // a block advance together, each sum on its own (no sum is reordered).
  // A dimension where q is (+ or -) zero contributes a signed zero when e[d] is finite, and adding a
  // signed zero leaves any sum unchanged: a sum starting at +0.0 never becomes -0.0 (x + y is -0.0
  // only when both are), and a nonzero sum plus zero is itself. So with finite rows only q's nonzero
  // dimensions are visited, in the same order, and every bit stays dot()'s. Hashed embeddings of
  // short texts (queries) touch few of the dimensions.
  std::vector<std::uint32_t> dims;
  dims.reserve(dim_);
  for (std::size_t d = 0; d < dim_; ++d)
    if (!all_finite_ || q[d] != 0.0f) dims.push_back(static_cast<std::uint32_t>(d));
  std::vector<double> out(n);
  for (std::size_t b0 = 0; b0 < n; b0 += kRows) {
    const float* block = values_.data() + (b0 / kRows) * dim_ * kRows;
    double sums[kRows];
#if defined(__SSE2__)
    // Two rows per SSE2 register (cvtps2pd widens exactly; mulpd/addpd round as mulsd/addsd).
    static_assert(kRows % 4 == 0);
    __m128d acc[kRows / 2];
    for (auto& a : acc) a = _mm_setzero_pd();
    for (const std::uint32_t d : dims) {
      const __m128d x = _mm_set1_pd(static_cast<double>(q[d]));
      const float* e = block + d * kRows;
      for (std::size_t j = 0; j < kRows / 4; ++j) {
        const __m128 f = _mm_loadu_ps(e + 4 * j);
        acc[2 * j] = _mm_add_pd(acc[2 * j], _mm_mul_pd(x, _mm_cvtps_pd(f)));
        acc[2 * j + 1] = _mm_add_pd(acc[2 * j + 1], _mm_mul_pd(x, _mm_cvtps_pd(_mm_movehl_ps(f, f))));
      }
    }
    for (std::size_t j = 0; j < kRows / 2; ++j) _mm_storeu_pd(sums + 2 * j, acc[j]);
#else
    for (auto& x : sums) x = 0.0;
    for (const std::uint32_t d : dims) {
      const double x = q[d];
      const float* e = block + d * kRows;
      for (std::size_t j = 0; j < kRows; ++j) sums[j] += x * static_cast<double>(e[j]);
    }
#endif
    for (std::size_t j = 0; j < kRows && b0 + j < n; ++j) out[b0 + j] = sums[j];
  }
  return out;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return 0.0;
  const double na = std::sqrt(dot(a, a)), nb = std::sqrt(dot(b, b));
  if (na == 0 || nb == 0) return 0.0;
  return dot(a, b) / (na * nb);
}

}  // namespace mobisim::traces
