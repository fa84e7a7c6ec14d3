#include "traces/retrieval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "sim/error.h"
#include "traces/rag_trace.h"
#include "traces/text.h"

namespace mobisim::traces {

Bm25::Bm25(const std::vector<std::vector<std::string>>& docs, Params p) : p_(p) {
  doc_len_.reserve(docs.size());
  std::size_t total = 0;
  for (std::uint32_t d = 0; d < docs.size(); ++d) {
    // An ordered map gives postings and the idf sum a platform-independent order.
    std::map<std::string, std::uint32_t> tf;
    for (const auto& t : docs[d]) ++tf[t];
    for (const auto& [t, n] : tf) terms_[t].postings.push_back({d, n});
    doc_len_.push_back(static_cast<std::uint32_t>(docs[d].size()));
    total += docs[d].size();
  }
  const double n_docs = static_cast<double>(docs.size());
  avgdl_ = docs.empty() ? 0.0 : static_cast<double>(total) / n_docs;
  // Sum idf in sorted term order (rank_bm25 sums in insertion order; the sum is
  // the same up to rounding).
  std::vector<const std::string*> names;
  names.reserve(terms_.size());
  for (auto& [t, term] : terms_) names.push_back(&t);
  std::sort(names.begin(), names.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  double idf_sum = 0;
  for (const std::string* t : names) {
    Term& term = terms_[*t];
    const double n = static_cast<double>(term.postings.size());
    term.idf = std::log(n_docs - n + 0.5) - std::log(n + 0.5);
    idf_sum += term.idf;
  }
  average_idf_ = names.empty() ? 0.0 : idf_sum / static_cast<double>(names.size());
  const double eps = p_.epsilon * average_idf_;
  for (const std::string* t : names) {
    Term& term = terms_[*t];
    if (term.idf < 0) term.idf = eps;
  }
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
  std::vector<std::int32_t> ids(scores.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(i);
  auto better = [&](std::int32_t a, std::int32_t b) {
    return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
  };
  k = std::min(k, ids.size());
  // `better` is a total order (ties go to the lower id), so both give the one sorted order; a full
  // ranking (ranks_of) is much cheaper as a sort than as a partial (heap) sort.
  if (k == ids.size())
    std::sort(ids.begin(), ids.end(), better);
  else
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), better);
  std::vector<Hit> out;
  out.reserve(k);
  for (std::size_t i = 0; i < k; ++i) out.push_back({ids[i], scores[ids[i]]});
  return out;
}

namespace {
std::vector<std::vector<std::string>> tokenize_all(const std::vector<std::string>& texts) {
  std::vector<std::vector<std::string>> out;
  out.reserve(texts.size());
  for (const auto& t : texts) out.push_back(words(t));
  return out;
}

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

Retriever::Retriever(const std::vector<std::string>& chunk_texts, std::vector<std::vector<float>> chunk_embeddings,
                     RetrieverConfig cfg, EmbedderConfig embedder)
    : cfg_(cfg), bm25_(tokenize_all(chunk_texts), cfg.bm25), chunk_emb_(std::move(chunk_embeddings)) {
  if (chunk_emb_.empty() && !chunk_texts.empty()) {
    embedder_.emplace(embedder);
    chunk_emb_ = embedder_->fit_embed(chunk_texts);
  }
  if (!chunk_emb_.empty() && chunk_emb_.size() != chunk_texts.size())
    throw InputError(fmt::format("retriever: {} chunk embeddings for {} chunks", chunk_emb_.size(),
                                 chunk_texts.size()));
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
    dense = dots(*q, chunk_emb_);
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
