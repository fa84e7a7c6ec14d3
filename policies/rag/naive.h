#pragma once
// Naive RAG (PerCache section 5.2's "Naive" baseline): no caching at all. Every
// query is embedded, retrieves its top-k chunks, prefills the whole prompt
// (system prompt + chunks + query) and decodes the full answer.
//
// Parameters: none.
#include "policies/rag/rag_policy.h"

namespace mobisim::policies {

class NaivePolicy : public RagPolicy {
 public:
  explicit NaivePolicy(const Params&) {}
  static ParamSchema schema() { return {}; }
  sim::Task<void> serve(RagPipeline& p, const traces::Query& q, QueryRecord& rec) override;
  bool needs_embeddings() const override { return false; }
  bool needs_trace_content() const override { return false; }
};

}  // namespace mobisim::policies
