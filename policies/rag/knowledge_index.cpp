#include "policies/rag/knowledge_index.h"

#include "policies/rag/query_predictor.h"

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

std::shared_ptr<const KnowledgeIndex> KnowledgeIndex::build(const traces::UserTrace& user) {
  auto idx = std::make_shared<KnowledgeIndex>();
  std::vector<std::string> texts;
  texts.reserve(user.chunks.size());
  for (const auto& c : user.chunks) texts.push_back(c.text);
  // The built-in embedder fitted on the user's chunks (traces/workload.h enrich_user does the same).
  idx->retriever = std::make_unique<traces::Retriever>(texts, std::vector<std::vector<float>>{});
  idx->phrases = std::make_unique<PhraseIndex>(user);
  return idx;
}

}  // namespace mobisim::policies
