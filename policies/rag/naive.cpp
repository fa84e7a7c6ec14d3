#include "policies/rag/naive.h"

#include "sim/registry.h"

namespace mobisim::policies {

sim::Task<void> NaivePolicy::serve(RagPipeline& p, const traces::Query& q, QueryRecord& rec) {
  co_await p.embed(rec);
  co_await p.retrieve(rec);
  const auto chunks = p.retrieved_chunks(q);
  rec.retrieved_chunks = static_cast<std::int64_t>(chunks.size());
  const std::int64_t prompt = p.prompt_tokens(q, chunks);
  rec.prompt_tokens = prompt;
  co_await p.prefill(rec, models::PrefillShape{prompt, 0, 0, 1}, "prefill");
  const std::int64_t answer = p.answer_tokens(q);
  rec.answer_tokens = answer;
  // The prefill produced the first token; the rest are decode steps.
  co_await p.decode(rec, prompt, answer - 1, "decode");
}

MOBISIM_REGISTER(RagPolicy, NaivePolicy, "naive", "No caching: full RAG pipeline (embed, retrieve, prefill, decode) per query.")

}  // namespace mobisim::policies
