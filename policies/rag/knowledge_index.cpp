#include "policies/rag/knowledge_index.h"

#include "policies/rag/query_predictor.h"
#include "traces/retrieval.h"

namespace mobisim::policies {

KnowledgeIndex::~KnowledgeIndex() = default;

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
