#pragma once
// Per-user indexes that depend only on the user's chunk texts: a retriever with the
// built-in embedder fitted on the chunks (predicted queries are embedded and retrieved
// exactly as the trace's queries were) and the phrase index of the question generator.
//
// Building one costs far more than a query, and it is the same for every policy that
// replays the user, so a driver builds it once per user before the simulations start
// (only when some policy asks for it, RagPolicy::needs_knowledge_index) and hands the
// same immutable index to every policy of that user. The driver owns it: no cache
// outlives the run, and no simulation depends on which thread built what first.
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "traces/rag_trace.h"
#include "traces/retrieval.h"

namespace mobisim::policies {

class PhraseIndex;

struct KnowledgeIndex {
  std::unique_ptr<traces::Retriever> retriever;
  std::unique_ptr<PhraseIndex> phrases;

  // retriever->embed / retriever->retrieve, computed once per distinct argument and shared by
  // every policy replaying the user (several predict and retrieve the same texts). They are pure
  // functions of their arguments, so which simulation asked first changes nothing; thread-safe.
  std::vector<float> embed(std::string_view text) const;
  std::vector<traces::Hit> retrieve(std::string_view text, const std::vector<float>& embedding, std::size_t k) const;

  // With the built-in embedder's default settings.
  static std::shared_ptr<const KnowledgeIndex> build(const traces::UserTrace& user);
  // The same index with the trace's embedder when `meta` names a built-in one (any dimension or
  // settings), so generated questions are embedded in the space of the trace's queries; its stored
  // chunk vectors are then taken instead of re-embedding every chunk (they are the same floats: the
  // trace's retriever was fitted on the same chunk texts). An embedder mobisim cannot run gives the
  // default (policies that embed generated text refuse such traces in check_workload). Each
  // chunk's words are split once, for BM25 and the phrase index.
  static std::shared_ptr<const KnowledgeIndex> build(const traces::UserTrace& user, const traces::RagTraceMeta& meta);
  ~KnowledgeIndex();

 private:
  mutable std::mutex memo_mutex_;
  mutable std::unordered_map<std::string, std::vector<float>> embeddings_;
  mutable std::unordered_map<std::string, std::vector<traces::Hit>> retrievals_;
};

}  // namespace mobisim::policies
