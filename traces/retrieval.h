#pragma once
// Retrieval over one user's knowledge chunks, as PerCache does it (section
// 4.2.2): BM25 Okapi (the rank_bm25 package's BM25Okapi), embedding cosine, and
// the hybrid of the two that PerCache cites ([13], Eversberg 2024), which fuses
// the two rankings by reciprocal rank fusion:
//   rrf(d) = 1 / (rrf_k + rank_bm25(d)) + 1 / (rrf_k + rank_dense(d)),  ranks 1-based,
// rrf_k = 60 (Cormack et al. 2009). A min-max-normalised weighted score sum
//   s(d) = alpha * bm25_norm(d) + (1 - alpha) * cos_norm(d)
// is available as fusion "weighted". Ties always break towards the lower chunk
// id, so rankings are deterministic.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "traces/embedder.h"
#include "traces/text.h"

namespace mobisim::traces {

// BM25 Okapi exactly as rank_bm25.BM25Okapi (k1 = 1.5, b = 0.75, epsilon = 0.25):
//   idf(t) = ln(N - n(t) + 0.5) - ln(n(t) + 0.5)
//   terms with idf < 0 (in more than half of the documents) get epsilon * mean(idf)
//   (like rank_bm25, the floor itself can be negative when the mean idf is)
//   score(d, q) = sum over query tokens t (repeats count) of
//                 idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))
// Tokens are traces::words() (lower-cased, punctuation split off).
class Bm25 {
 public:
  struct Params {
    double k1 = 1.5, b = 0.75, epsilon = 0.25;
  };
  explicit Bm25(const std::vector<std::vector<std::string>>& tokenized_docs, Params p);
  explicit Bm25(const std::vector<std::vector<std::string>>& tokenized_docs) : Bm25(tokenized_docs, Params{}) {}
  // The same index from the documents' words over one vocabulary (TextWords::of(texts)).
  Bm25(const TextWords& docs, Params p);
  std::vector<double> scores(const std::vector<std::string>& query_tokens) const;
  double idf(const std::string& term) const;  // 0 for unknown terms
  double average_idf() const { return average_idf_; }
  double avgdl() const { return avgdl_; }
  std::size_t size() const { return doc_len_.size(); }

 private:
  struct Posting {
    std::uint32_t doc;
    std::uint32_t tf;
  };
  struct Term {
    double idf = 0;
    std::vector<Posting> postings;  // ascending doc id
  };
  Params p_;
  std::vector<std::uint32_t> doc_len_;
  std::vector<double> len_norm_;  // k1 * (1 - b + b * |d| / avgdl)
  double avgdl_ = 0, average_idf_ = 0;
  std::unordered_map<std::string, Term> terms_;  // lookups only; never iterated for output
  // idf of every term (postings already filled), in sorted term order as rank_bm25 up to rounding.
  void finish(std::size_t n_docs, std::size_t total_tokens);
};

enum class Fusion { kRrf, kWeighted };
enum class RetrievalMode { kBm25, kDense, kHybrid };

struct RetrieverConfig {
  RetrievalMode mode = RetrievalMode::kHybrid;
  Fusion fusion = Fusion::kRrf;
  double rrf_k = 60.0;
  double alpha = 0.5;  // weighted fusion: weight of BM25
  Bm25::Params bm25;
  std::string describe() const;
};
RetrievalMode parse_retrieval_mode(const std::string& s);  // "bm25" | "dense" | "hybrid"; ConfigError otherwise
Fusion parse_fusion(const std::string& s);                  // "rrf" | "weighted"

struct Hit {
  std::int32_t chunk = -1;
  double score = 0.0;
};

// Built once per user over that user's chunks. When `chunk_embeddings` is
// empty, the retriever fits the built-in embedder on the chunk texts and embeds
// the chunks itself; then `embed()` produces query embeddings that are
// consistent with them (what the importers and the generator store).
class Retriever {
 public:
  Retriever(const std::vector<std::string>& chunk_texts, std::vector<std::vector<float>> chunk_embeddings,
            RetrieverConfig cfg = {}, EmbedderConfig embedder = {});
  // The same as Retriever(chunk_texts, {}, cfg, embedder) without repeating work already done:
  // `chunk_words` is TextWords::of(chunk_texts), and `builtin_chunk_embeddings` are exactly what the
  // built-in embedder `embedder` fitted on these chunks gives them (a trace whose metadata names that
  // embedder stores them), so only the fit is redone (for new texts); empty: they are computed.
  static Retriever with_builtin_embedder(const std::vector<std::string>& chunk_texts, const TextWords& chunk_words,
                                         std::vector<std::vector<float>> builtin_chunk_embeddings,
                                         RetrieverConfig cfg = {}, EmbedderConfig embedder = {});
  // Top-k chunks, best first. `query_embedding` may be empty: it is then computed
  // with the built-in embedder (only possible when the retriever owns it).
  std::vector<Hit> retrieve(std::string_view query_text, const std::vector<float>& query_embedding,
                            std::size_t k) const;
  std::vector<float> embed(std::string_view text) const;
  bool owns_embedder() const { return embedder_.has_value(); }
  const std::vector<std::vector<float>>& chunk_embeddings() const { return chunk_emb_; }
  std::size_t size() const { return bm25_.size(); }

 private:
  struct WithBm25 {};  // tag: keeps this constructor out of the public ones' overload set
  Retriever(WithBm25, Bm25 bm25, RetrieverConfig cfg);
  Retriever(const TextWords& chunk_words, std::vector<std::vector<float>> chunk_embeddings, RetrieverConfig cfg,
            EmbedderConfig embedder);
  void set_chunk_embeddings(std::vector<std::vector<float>> chunk_embeddings, std::size_t n_chunks);
  // dot(query, chunk i) for every chunk; each bit-identical to dot().
  std::vector<double> dense_scores(const std::vector<float>& query) const;

  RetrieverConfig cfg_;
  Bm25 bm25_;
  std::optional<HashedEmbedder> embedder_;
  std::vector<std::vector<float>> chunk_emb_;
  // The chunk embeddings as blocked rows when all have one length (dense scores a block at a
  // time, each dot()'s to the bit); dimension 0 otherwise (scores row by row).
  BlockedRows emb_blocks_;
};

// The retriever a simulation uses for one user of a trace. When the trace was
// embedded by the built-in embedder, the embedder is rebuilt from the metadata
// and refitted on the user's chunks, so new texts (e.g. predicted queries) are
// embedded exactly as the stored ones were. With external embeddings the stored
// chunk vectors are used and queries must come with their own embeddings. A
// trace without embeddings gets BM25-only retrieval.
struct UserTrace;
struct RagTraceMeta;
Retriever retriever_for_user(const UserTrace& user, const RagTraceMeta& meta, RetrieverConfig cfg = {});

// Ranks the ids 0..n-1 by descending score (ties: lower id first) and returns the first k.
std::vector<Hit> top_k(const std::vector<double>& scores, std::size_t k);

}  // namespace mobisim::traces
