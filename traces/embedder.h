#pragma once
// The built-in deterministic text embedder ("hashed-tfidf-ngram-v1"): no
// network, no weights, same bytes on every platform.
//
// Features of a text (see traces/text.h for the word split):
//   * words (unigrams), and
//   * character n-grams (n = char_ngram_min..char_ngram_max) of each word wrapped
//     as "<word>", which keep "rehearsal"/"rehearse" close.
// Each feature is weighted by sublinear TF (1 + ln tf) times a smoothed IDF
//   idf(f) = ln((1 + N) / (1 + df(f))) + 1        (scikit-learn's smooth_idf)
// fitted on a corpus (the user's knowledge chunks; unfitted: idf = 1), hashed
// with FNV-1a 64 into dim-1 buckets with a hash-derived sign (signed feature
// hashing keeps collisions unbiased). The word part and the char part are
// L2-normalised separately and mixed so that
//   raw_cos = word_weight * cos_words + (1 - word_weight) * cos_chars.
//
// Calibration ("anisotropy"): neural sentence embedders such as
// Qwen3-Embedding (PerCache) are anisotropic: unrelated texts still score about
// 0.3-0.6 and paraphrases 0.8-0.95, whereas raw hashed TF-IDF cosines of
// unrelated texts sit near 0. Component 0 of every embedding is a shared
// direction of weight sqrt(a), the hashed part has weight sqrt(1 - a), so the
// dot product of two embeddings is exactly
//   cos = a + (1 - a) * raw_cos
// with a = `anisotropy` (default 0.5). Thresholds written for neural
// embeddings (PerCache's tau = 0.85 QA bank) then apply unchanged: tau = 0.85
// corresponds to raw_cos = 0.70, tau = 0.8 to raw_cos = 0.60. The measured
// distribution on QMSum and on the generator is in traces/SCHEMA.md.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "traces/text.h"

namespace mobisim::traces {

struct EmbedderConfig {
  int dim = 512;
  int char_ngram_min = 3;
  int char_ngram_max = 5;
  double word_weight = 0.5;
  double anisotropy = 0.5;
  std::string name() const;           // "hashed-tfidf-ngram-v1"
  std::string describe() const;       // name plus every parameter, for trace metadata
  // Inverse of describe(); nullopt when `description` is not a built-in embedder's.
  static std::optional<EmbedderConfig> parse(const std::string& description);
};

class HashedEmbedder {
 public:
  explicit HashedEmbedder(EmbedderConfig cfg = {});
  // Fits document frequencies on `corpus` (each string one document).
  void fit(const std::vector<std::string>& corpus);
  // The same fit from the corpus' words (TextWords::of(corpus)), each distinct word's features once.
  void fit(const TextWords& corpus);
  std::vector<float> embed(std::string_view text) const;
  // fit(corpus), then embed() of every document of it (each distinct word's features computed once).
  std::vector<std::vector<float>> fit_embed(const std::vector<std::string>& corpus);
  std::vector<std::vector<float>> fit_embed(const TextWords& corpus);
  // Raw cosine without the anisotropy offset (for calibration reports).
  static double calibrated_from_raw(double raw, double anisotropy) { return anisotropy + (1 - anisotropy) * raw; }
  const EmbedderConfig& config() const { return cfg_; }
  std::size_t fitted_documents() const { return n_docs_; }

 private:
  // Feature hashes of a text: words and character n-grams apart (they are weighted into separate
  // parts of the vector), each in text order; duplicates kept (they are the term frequencies).
  void features(std::string_view text, std::vector<std::uint64_t>& word_hashes,
                std::vector<std::uint64_t>& char_hashes) const;
  // Appends the features of one word (already lower-cased); `wrapped` is a buffer.
  void word_features(std::string_view word, std::vector<std::uint64_t>& word_hashes,
                     std::vector<std::uint64_t>& char_hashes, std::string& wrapped) const;
  // Working buffers of embed_features, reused across calls to save allocations (never read
  // before written: results do not depend on what a previous call left in them).
  struct EmbedScratch {
    std::vector<std::uint32_t> bucket, begin, next, touched;
    std::vector<std::uint64_t> grouped;
    std::vector<double> words, chars;
  };
  // The embedding of a text from its feature hashes (any order).
  std::vector<float> embed_features(std::span<const std::uint64_t> word_hashes,
                                    std::span<const std::uint64_t> char_hashes, EmbedScratch& scratch) const;
  void accumulate_features(std::span<const std::uint64_t> hashes, std::vector<double>& v,
                           EmbedScratch& scratch) const;
  void accumulate_sorted(std::span<const std::uint64_t> hashes, std::vector<double>& v, EmbedScratch& scratch) const;
  double idf(std::uint64_t h) const;
  // Each vocabulary word's features: hashes[begin[v]] is word v's word hash, hashes(begin[v],
  // begin[v + 1]) its n-gram hashes.
  struct VocabFeatures {
    std::vector<std::uint64_t> hashes;
    std::vector<std::size_t> begin;
  };
  VocabFeatures vocab_features(const TextWords& corpus) const;
  // Fits the document frequencies (a feature counts once per document, words and n-grams alike).
  void fit_vocabulary(const TextWords& corpus, const VocabFeatures& features);
  // Dense ids of `hashes` (equal hashes, equal ids; ids in order of first appearance), with the
  // hash of each id in `keys`.
  static std::vector<std::uint32_t> dense_feature_ids(std::span<const std::uint64_t> hashes,
                                                      std::vector<std::uint64_t>& keys);
  // The fitted table from each feature's document frequency (features with df 0 left out).
  void set_document_frequencies(std::size_t n_docs, std::span<const std::uint64_t> keys,
                                std::span<const std::uint32_t> df);
  std::size_t slot_of(std::uint64_t h) const;
  std::size_t home_slot(std::uint64_t h) const;  // first probe position
  void prefetch_slot(std::uint64_t h) const;     // a cache hint only: no effect on results

  EmbedderConfig cfg_;
  std::uint64_t word_seed_ = 0;  // FNV-1a state after "w:" / "c:" (feature-kind prefixes)
  std::uint64_t char_seed_ = 0;
  std::size_t n_docs_ = 0;
  // Document frequencies by feature hash, then (after fit) the smoothed IDF of each: a flat hash
  // table used for lookups only (never iterated, so its layout cannot change a result).
  struct Slot {
    std::uint64_t key = 0;
    double idf = 0;             // filled by fit()
    std::uint32_t df = 0;       // 0 = empty slot
  };
  std::vector<Slot> slots_;     // one cache line per probe: key, df and idf together
  double idf_unseen_ = 1.0;          // idf of a feature no fitted document has
};

double dot(const std::vector<float>& a, const std::vector<float>& b);
// dot(q, rows[i]) for every row, each bit-identical to dot(): the rows are taken four at a time
// so that four independent sums advance together (each still adds its terms in index order).
std::vector<double> dots(const std::vector<float>& q, const std::vector<std::vector<float>>& rows);
// The same over rows given by pointer (e.g. a subset of a cache's entries).
std::vector<double> dots(const std::vector<float>& q, std::span<const std::vector<float>* const> rows);
double cosine(const std::vector<float>& a, const std::vector<float>& b);

// Rows of one length `dim` kept in blocks of kRows rows, dimension-major within a block (value d
// of row i at ((i / kRows) * dim + d) * kRows + i % kRows), so that a block's kRows dot products
// advance together in registers, one dimension at a time. Each sum still adds its terms in
// dimension order as dot() does, so every score is dot()'s to the bit. Rows are slots: set() one
// (growing the store as needed) and score the first n.
class BlockedRows {
 public:
  static constexpr std::size_t kRows = 16;
  explicit BlockedRows(std::size_t dim = 0) : dim_(dim) {}
  std::size_t dim() const { return dim_; }
  std::size_t rows() const { return dim_ == 0 ? 0 : values_.size() / dim_; }
  void set(std::size_t row, std::span<const float> v);  // v.size() == dim()
  // dot(q, row i) for i < n (n <= rows(), q.size() == dim()).
  std::vector<double> dots(std::span<const float> q, std::size_t n) const;

 private:
  std::size_t dim_;
  std::vector<float> values_;
  // Every value ever stored is finite: then a dimension where the query is zero adds exactly
  // nothing to any sum, and dots() visits only the query's nonzero dimensions (see there).
  bool all_finite_ = true;
};

}  // namespace mobisim::traces
