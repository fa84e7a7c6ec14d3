#include "policies/pipeline/semantic_answer_cache.h"

#include <algorithm>

#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema SemanticAnswerCache::schema() {
  ParamSchema s;
  s.real("tau_query", 0.85, "cosine similarity at or above which a cached answer is served").range(-1.0, 1.0);
  s.real("capacity_mb", 100.0, "flash the bank may hold").positive().with_unit("MB");
  s.real("entry_kb", 4.0, "one entry's size on flash (PerCache Table 1: 4 KB)").positive().with_unit("KB");
  s.real("embed_ms", std::nullopt, "embedding the query on the pipeline's unit (measured for the phone and model)")
      .non_negative()
      .with_unit("ms");
  s.real("match_ms", std::nullopt, "scoring the bank on the pipeline's unit").non_negative().with_unit("ms");
  return s;
}

SemanticAnswerCache::SemanticAnswerCache(const Params& p)
    : tau_(p.real("tau_query")),
      embed_ms_(p.real("embed_ms")),
      match_ms_(p.real("match_ms")),
      bank_(p.real("capacity_mb") * 1e6, p.real("entry_kb") * 1e3) {}

sim::Task<void> SemanticAnswerCache::lookup(devices::Device& device, const std::string& unit, int priority,
                                            const Request& r, AnswerLookup& out) {
  const sim::Time t0 = device.sim().now();
  co_await device.busy(unit, sim::from_ms(embed_ms_ + match_ms_), "answer cache look-up", priority);
  const sim::Time took = device.sim().now() - t0;
  const sim::Time matching = std::min(took, sim::from_ms(match_ms_));
  out.embed_s = sim::to_seconds(took - matching);
  out.match_s = sim::to_seconds(matching);
  if (r.embedding.empty()) co_return;  // nothing to compare: a miss
  const QaMatch m = bank_.match(r.embedding, tau_);
  out.similarity = m.similarity;
  out.hit = m.index.has_value();
  if (!out.hit) co_return;
  bank_.touch(*m.index);
  const QaEntry& e = bank_.entries()[*m.index];
  out.answer = e.answer.empty() ? std::string(" ") : e.answer;  // as the rag loop serves it
  out.stale = stale_ && stale_(e);
}

void SemanticAnswerCache::insert(const Request& r) {
  if (r.embedding.empty()) return;
  QaEntry e;
  e.embedding = r.embedding;
  e.answered = true;
  e.answer = r.answer_text;  // what the LLM's answer stands for (its length is what is simulated)
  e.answer_tokens = r.output_tokens;
  bank_.insert(std::move(e));
}

MOBISIM_REGISTER(AnswerCache, SemanticAnswerCache, "semantic",
                 "MeanCache's semantic cache / PerCache's QA bank: a close enough past query's answer is served.")

}  // namespace mobisim::policies::pipeline
