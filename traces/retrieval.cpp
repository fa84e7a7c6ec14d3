#include "traces/retrieval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>


#include "sim/error.h"
#include "traces/rag_trace.h"
#include "traces/text.h"

namespace mobisim::traces {

Bm25::Bm25(const std::vector<std::vector<std::string>>& docs, Params p) : p_(p) {
  doc_len_.reserve(docs.size());
  std::size_t total = 0;
  for (std::uint32_t d = 0; d < docs.size(); ++d) {
    // Each distinct term of the document with its count (postings are in document order; the
    // idf sum below runs in sorted term order, so no order here reaches a result).
    std::vector<std::string_view> sorted(docs[d].begin(), docs[d].end());
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size();) {
      std::size_t j = i + 1;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      terms_[std::string(sorted[i])].postings.push_back({d, static_cast<std::uint32_t>(j - i)});
      i = j;
    }
    doc_len_.push_back(static_cast<std::uint32_t>(docs[d].size()));
    total += docs[d].size();
  }
  finish(docs.size(), total);
}

Bm25::Bm25(const TextWords& docs, Params p) : p_(p) {
  doc_len_.reserve(docs.texts.size());
  std::vector<std::vector<Posting>> postings(docs.vocab.size());
  std::vector<std::uint32_t> sorted;
  std::size_t total = 0;
  for (std::uint32_t d = 0; d < docs.texts.size(); ++d) {
    // Each distinct term of the document with its count, in document order per term.
    sorted.assign(docs.texts[d].begin(), docs.texts[d].end());
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size();) {
      std::size_t j = i + 1;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      postings[sorted[i]].push_back({d, static_cast<std::uint32_t>(j - i)});
      i = j;
    }
    doc_len_.push_back(static_cast<std::uint32_t>(docs.texts[d].size()));
    total += docs.texts[d].size();
  }
  terms_.reserve(docs.vocab.size());
  for (std::size_t v = 0; v < docs.vocab.size(); ++v) terms_[docs.vocab[v]].postings = std::move(postings[v]);
  finish(docs.texts.size(), total);
}

void Bm25::finish(std::size_t n_documents, std::size_t total) {
  const double n_docs = static_cast<double>(n_documents);
  avgdl_ = n_documents == 0 ? 0.0 : static_cast<double>(total) / n_docs;
  // Sum idf in sorted term order (rank_bm25 sums in insertion order; the sum is
  // the same up to rounding).
  std::vector<std::pair<const std::string, Term>*> names;
  names.reserve(terms_.size());
  for (auto& entry : terms_) names.push_back(&entry);
  std::sort(names.begin(), names.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  double idf_sum = 0;
  for (auto* entry : names) {
    Term& term = entry->second;
    const double n = static_cast<double>(term.postings.size());
    term.idf = std::log(n_docs - n + 0.5) - std::log(n + 0.5);
    idf_sum += term.idf;
  }
  average_idf_ = names.empty() ? 0.0 : idf_sum / static_cast<double>(names.size());
  const double eps = p_.epsilon * average_idf_;
  for (auto* entry : names)
    if (entry->second.idf < 0) entry->second.idf = eps;
  len_norm_.resize(doc_len_.size());
  for (std::size_t d = 0; d < doc_len_.size(); ++d)
    len_norm_[d] = p_.k1 * (1.0 - p_.b + p_.b * (avgdl_ > 0 ? doc_len_[d] / avgdl_ : 0.0));
}

double Bm25::idf(const std::string& term) const {
  auto it = terms_.find(term);
  return it == terms_.end() ? 0.0 : it->second.idf;
}

std::vector<double> Bm25::scores(const std::vector<std::string>& query) const {
  std::vector<double> s(doc_len_.size(), 0.0);
  for (const auto& q : query) {
    auto it = terms_.find(q);
    if (it == terms_.end()) continue;
    const Term& term = it->second;
    for (const Posting& pst : term.postings) {
      const double tf = pst.tf;
      s[pst.doc] += term.idf * tf * (p_.k1 + 1.0) / (tf + len_norm_[pst.doc]);
    }
  }
  return s;
}

std::string RetrieverConfig::describe() const {
  const char* m = mode == RetrievalMode::kBm25 ? "bm25" : mode == RetrievalMode::kDense ? "dense" : "hybrid";
  std::string f = fusion == Fusion::kRrf ? fmt::format("rrf(k={})", rrf_k) : fmt::format("weighted(alpha={})", alpha);
  return fmt::format("{}; bm25okapi(k1={}, b={}, epsilon={}); fusion={}", m, bm25.k1, bm25.b, bm25.epsilon, f);
}

RetrievalMode parse_retrieval_mode(const std::string& s) {
  if (s == "bm25") return RetrievalMode::kBm25;
  if (s == "dense") return RetrievalMode::kDense;
  if (s == "hybrid") return RetrievalMode::kHybrid;
  throw ConfigError(fmt::format("retrieval mode '{}' is not one of bm25, dense, hybrid", s));
}

Fusion parse_fusion(const std::string& s) {
  if (s == "rrf") return Fusion::kRrf;
  if (s == "weighted") return Fusion::kWeighted;
  throw ConfigError(fmt::format("fusion '{}' is not one of rrf, weighted", s));
}

std::vector<Hit> top_k(const std::vector<double>& scores, std::size_t k) {
  // (score, id) side by side: the comparisons read no other array. The same comparator over the
  // same initial order as sorting ids by scores[id], so the same permutation (even with NaNs).
  std::vector<Hit> hits(scores.size());
  for (std::size_t i = 0; i < hits.size(); ++i) hits[i] = {static_cast<std::int32_t>(i), scores[i]};
  auto better = [](const Hit& a, const Hit& b) { return a.score != b.score ? a.score > b.score : a.chunk < b.chunk; };
  k = std::min(k, hits.size());
  // `better` is a total order (ties go to the lower id), so both give the one sorted order; a full
  // ranking (ranks_of) is much cheaper as a sort than as a partial (heap) sort.
  if (k == hits.size())
    std::sort(hits.begin(), hits.end(), better);
  else
    std::partial_sort(hits.begin(), hits.begin() + static_cast<std::ptrdiff_t>(k), hits.end(), better);
  hits.resize(k);
  return hits;
}

namespace {
// 1-based ranks by descending score, ties broken by lower id.
std::vector<double> ranks_of(const std::vector<double>& scores) {
  std::vector<Hit> order = top_k(scores, scores.size());
  std::vector<double> r(scores.size());
  for (std::size_t i = 0; i < order.size(); ++i) r[order[i].chunk] = static_cast<double>(i + 1);
  return r;
}

std::vector<double> min_max(const std::vector<double>& v) {
  if (v.empty()) return v;
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  std::vector<double> out(v.size(), 0.0);
  if (*hi > *lo)
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = (v[i] - *lo) / (*hi - *lo);
  return out;
}
}  // namespace

Retriever::Retriever(WithBm25, Bm25 bm25, RetrieverConfig cfg) : cfg_(cfg), bm25_(std::move(bm25)) {}

Retriever::Retriever(const std::vector<std::string>& chunk_texts, std::vector<std::vector<float>> chunk_embeddings,
                     RetrieverConfig cfg, EmbedderConfig embedder)
    : Retriever(TextWords::of(chunk_texts), std::move(chunk_embeddings), cfg, embedder) {}

// The chunks split into words once, for BM25 and the embedder alike.
Retriever::Retriever(const TextWords& chunk_words, std::vector<std::vector<float>> chunk_embeddings,
                     RetrieverConfig cfg, EmbedderConfig embedder)
    : Retriever(WithBm25{}, Bm25(chunk_words, cfg.bm25), cfg) {
  if (chunk_embeddings.empty() && !chunk_words.texts.empty()) {
    embedder_.emplace(embedder);
    chunk_embeddings = embedder_->fit_embed(chunk_words);
  }
  set_chunk_embeddings(std::move(chunk_embeddings), chunk_words.texts.size());
}

Retriever Retriever::with_builtin_embedder(const std::vector<std::string>& chunk_texts, const TextWords& chunk_words,
                                           std::vector<std::vector<float>> builtin_chunk_embeddings,
                                           RetrieverConfig cfg, EmbedderConfig embedder) {
  if (chunk_words.texts.size() != chunk_texts.size())
    throw Error(fmt::format("retriever: {} tokenized chunks for {} chunks", chunk_words.texts.size(), chunk_texts.size()));
  if (builtin_chunk_embeddings.empty()) return Retriever(chunk_words, {}, cfg, embedder);
  Retriever r(WithBm25{}, Bm25(chunk_words, cfg.bm25), cfg);
  if (!chunk_texts.empty()) {
    r.embedder_.emplace(embedder);
    r.embedder_->fit(chunk_words);  // the stored vectors are this fit's: only the fit is redone
  }
  r.set_chunk_embeddings(std::move(builtin_chunk_embeddings), chunk_texts.size());
  return r;
}

void Retriever::set_chunk_embeddings(std::vector<std::vector<float>> chunk_embeddings, std::size_t n_chunks) {
  chunk_emb_ = std::move(chunk_embeddings);
  emb_blocks_ = BlockedRows();
  if (!chunk_emb_.empty() && chunk_emb_.size() != n_chunks)
    throw InputError(fmt::format("retriever: {} chunk embeddings for {} chunks", chunk_emb_.size(), n_chunks));
  if (chunk_emb_.empty()) return;
  const std::size_t dim = chunk_emb_.front().size();
  for (const auto& e : chunk_emb_)
    if (e.size() != dim) return;  // unequal lengths: dense scores row by row
  const std::size_t n = chunk_emb_.size();
  emb_blocks_ = BlockedRows(dim);
  for (std::size_t i = 0; i < n; ++i) emb_blocks_.set(i, chunk_emb_[i]);
}

std::vector<double> Retriever::dense_scores(const std::vector<float>& q) const {
  if (emb_blocks_.dim() == 0 || q.size() != emb_blocks_.dim()) return dots(q, chunk_emb_);
  return emb_blocks_.dots(q, chunk_emb_.size());
}

std::vector<float> Retriever::embed(std::string_view text) const {
  if (!embedder_)
    throw InputError("retriever: the chunk embeddings come from an external model; pass query embeddings too");
  return embedder_->embed(text);
}

std::vector<Hit> Retriever::retrieve(std::string_view query_text, const std::vector<float>& query_embedding,
                                     std::size_t k) const {
  const std::size_t n = bm25_.size();
  if (n == 0 || k == 0) return {};
  std::vector<double> sparse, dense;
  if (cfg_.mode != RetrievalMode::kDense) sparse = bm25_.scores(words(query_text));
  if (cfg_.mode != RetrievalMode::kBm25) {
    std::vector<float> computed;
    const std::vector<float>* q = &query_embedding;
    if (q->empty()) {
      computed = embed(query_text);
      q = &computed;
    }
    for (std::size_t i = 0; i < n; ++i)
      if (chunk_emb_[i].size() != q->size())
        throw InputError(fmt::format("retriever: query embedding has {} values, chunk {} has {}", q->size(), i,
                                     chunk_emb_[i].size()));
    dense = dense_scores(*q);
  }
  if (cfg_.mode == RetrievalMode::kBm25) return top_k(sparse, k);
  if (cfg_.mode == RetrievalMode::kDense) return top_k(dense, k);
  std::vector<double> fused(n);
  if (cfg_.fusion == Fusion::kRrf) {
    const auto rs = ranks_of(sparse), rd = ranks_of(dense);
    for (std::size_t i = 0; i < n; ++i) fused[i] = 1.0 / (cfg_.rrf_k + rs[i]) + 1.0 / (cfg_.rrf_k + rd[i]);
  } else {
    const auto ns = min_max(sparse), nd = min_max(dense);
    for (std::size_t i = 0; i < n; ++i) fused[i] = cfg_.alpha * ns[i] + (1.0 - cfg_.alpha) * nd[i];
  }
  return top_k(fused, k);
}

Retriever retriever_for_user(const UserTrace& user, const RagTraceMeta& meta, RetrieverConfig cfg) {
  std::vector<std::string> texts;
  texts.reserve(user.chunks.size());
  for (const auto& c : user.chunks) texts.push_back(c.text);
  if (meta.embedding_dim <= 0) {
    cfg.mode = RetrievalMode::kBm25;
    return Retriever(texts, {}, cfg);
  }
  if (auto builtin = EmbedderConfig::parse(meta.embedder)) return Retriever(texts, {}, cfg, *builtin);
  std::vector<std::vector<float>> emb;
  emb.reserve(user.chunks.size());
  for (const auto& c : user.chunks) emb.push_back(c.embedding);
  return Retriever(texts, std::move(emb), cfg);
}

}  // namespace mobisim::traces
