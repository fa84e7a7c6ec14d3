#include "policies/rag/knowledge_index.h"

#include "policies/rag/query_predictor.h"
#include "traces/text.h"

namespace mobisim::policies {

KnowledgeIndex::~KnowledgeIndex() = default;

std::vector<float> KnowledgeIndex::embed(std::string_view text) const {
  const std::string key(text);
  {
    const std::lock_guard lock(memo_mutex_);
    if (auto it = embeddings_.find(key); it != embeddings_.end()) return it->second;
  }
  std::vector<float> e = retriever->embed(text);  // outside the lock: other users of the index go on
  const std::lock_guard lock(memo_mutex_);
  return embeddings_.emplace(key, std::move(e)).first->second;
}

std::vector<traces::Hit> KnowledgeIndex::retrieve(std::string_view text, const std::vector<float>& embedding,
                                                  std::size_t k) const {
  // The key holds every argument: text, embedding bytes and k.
  std::string key(text);
  key.push_back('\0');
  key.append(reinterpret_cast<const char*>(embedding.data()), embedding.size() * sizeof(float));
  key.append(reinterpret_cast<const char*>(&k), sizeof(k));
  {
    const std::lock_guard lock(memo_mutex_);
    if (auto it = retrievals_.find(key); it != retrievals_.end()) return it->second;
  }
  std::vector<traces::Hit> hits = retriever->retrieve(text, embedding, k);
  const std::lock_guard lock(memo_mutex_);
  return retrievals_.emplace(std::move(key), std::move(hits)).first->second;
}

namespace {
// The embedder generated texts (predicted questions) are embedded with: the trace's own when it is
// the built-in one, with whatever settings it was run with, so that they land in the space of the
// trace's query embeddings (another dimension would not even be comparable); without metadata, or
// for an embedder mobisim cannot run (CachingPolicy::check_workload refuses those), the default.
traces::EmbedderConfig embedder_of(const traces::RagTraceMeta* meta) {
  if (meta)
    if (auto builtin = traces::EmbedderConfig::parse(meta->embedder)) return *builtin;
  return {};
}

// The user's chunk embeddings when the trace stored them with exactly this embedder, else empty.
std::vector<std::vector<float>> stored_embeddings(const traces::UserTrace& user, const traces::RagTraceMeta* meta,
                                                  const traces::EmbedderConfig& embedder) {
  if (!meta || meta->embedder != embedder.describe()) return {};
  std::vector<std::vector<float>> out;
  out.reserve(user.chunks.size());
  for (const auto& c : user.chunks) {
    if (c.embedding.size() != static_cast<std::size_t>(embedder.dim)) return {};  // not loaded (or not these)
    out.push_back(c.embedding);
  }
  return out;
}

std::shared_ptr<const KnowledgeIndex> build_index(const traces::UserTrace& user, const traces::RagTraceMeta* meta) {
  auto idx = std::make_shared<KnowledgeIndex>();
  std::vector<std::string> texts;
  texts.reserve(user.chunks.size());
  for (const auto& c : user.chunks) texts.push_back(c.text);
  const traces::TextWords words = traces::TextWords::of(texts);
  // The built-in embedder fitted on the user's chunks (traces/workload.h enrich_user does the same).
  const traces::EmbedderConfig embedder = embedder_of(meta);
  idx->retriever = std::make_unique<traces::Retriever>(traces::Retriever::with_builtin_embedder(
      texts, words, stored_embeddings(user, meta, embedder), traces::RetrieverConfig{}, embedder));
  idx->phrases = std::make_unique<PhraseIndex>(user, words);
  return idx;
}
}  // namespace

std::shared_ptr<const KnowledgeIndex> KnowledgeIndex::build(const traces::UserTrace& user) {
  return build_index(user, nullptr);
}

std::shared_ptr<const KnowledgeIndex> KnowledgeIndex::build(const traces::UserTrace& user,
                                                            const traces::RagTraceMeta& meta) {
  return build_index(user, &meta);
}

}  // namespace mobisim::policies
