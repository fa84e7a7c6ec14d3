#pragma once
// `pipeline`: an app whose requests flow through the pipeline's stage slots, each filled by a
// registered implementation chosen in YAML:
//
//   workload            a RAG user's queries (prompt = system prompt + retrieved chunks + query)
//   answer_cache        a close enough past query answers it (registry answer_cache: semantic;
//                       optional)
//   kv_reuse            which prompt prefix has K/V stored on flash   (registry kv_reuse:
//                       none, prefix_store)
//   load_or_recompute   how a stored prefix is brought back: a split l -> [0, l) recomputed on
//                       the unit while [l, s) is read from flash      (registry kv_split_strategy:
//                       always_load, always_recompute, cake, kvpr_ilp, kvpr_closed_form, ...)
//   prefill             the prompt's other tokens, attending to the s reused ones (registry prefill:
//                       unit, npu_graphs)
//   decode              the answer after its first token (registry decode: vanilla, one token per
//                       step on `unit`; speculative, a CoordGen-document policy)
//   kv residency        where the request's K/V lives while it decodes (registry kv_residency:
//                       dram, all of it in the DRAM ledger; dynakv, DynaKV clusters on flash)
//   idle                work between requests (registry idle: prefetch, the K/V the next request
//                       will likely reuse promoted from flash to DRAM; percache_scheduler,
//                       PerCache's prediction and cache scheduler on the answer cache and the
//                       chunk tree; sleeptime, Sleep-time Compute's precomputed answers; optional)
//
// Every stage issues its work as events on the phone's Device (policies/pipeline/pipeline.h): the
// recompute and the flash read of a split run concurrently (the split strategy's closed-form time
// is recorded beside the event path's as split_estimate_s), the prefill and decode queue on the
// unit at the app's priority, and stored K/V is written to flash in the background.
//
// Parameters (besides priority and start_s, see app.h):
//   model, unit, workload ({trace|generate}), user, max_queries, interarrival_s  (as the rag app)
//   conversation                      instead of workload: one chat {turns, prompt_tokens,
//                                     answer_tokens}; turn i's prompt = system prompt + every earlier
//                                     turn (prompt and answer) + its own prompt; a turn every
//                                     interarrival_s
//   system_prompt_tokens, top_k       the prompt's layout: the first top_k chunks of a query's
//                                     precomputed ranking in the knowledge bank when the pipeline
//                                     retrieves (after an answer-cache miss and retrieval_ms, as the
//                                     rag loop: a late chunk, traces::Chunk::added_s, only from then on)
//   retrieval_ms, kv_match_ms         fixed costs on `unit` after an answer-cache miss
//   answer_tokens                     > 0: every answer has this length (0: the workload's)
//   answer_cache                      {impl: semantic, tau_query, embed_ms, match_ms, ...} (default: none)
//   kv_reuse                          {impl: none|prefix_store|system_prompt, ...}
//   load_or_recompute                 {impl: always_load|cake|kvpr_ilp|..., ...}
//   prefill                           {impl: unit (default, on `unit`)|npu_graphs, ...}
//   decode                            {impl: vanilla (default, on `unit`)|speculative, ...}
//   kv_residency                      {impl: dram (default)|dynakv, ...}
//   idle                              {impl: prefetch|percache_scheduler|sleeptime, ...} (default: none)
// The answer cache charges embedding and matching the query (its embed_ms, match_ms). Besides
// the phases of the split, prefill and decode, a request's records have those of the rag driver's
// records before them (embed_s, qa_match_s, retrieval_s, kv_match_s), the chunks retrieved, and
// the answer served: answer_stale (a hit on a stale entry), rouge_l and bleu against the query's
// reference answer (a generated answer scores 1); answer_quality() aggregates them as rag_qa does.
#include <memory>
#include <vector>

#include "models/cost_model.h"
#include "policies/apps/app.h"
#include "policies/pipeline/pipeline.h"
#include "traces/metrics.h"

namespace mobisim::policies {

namespace pipeline {
// How the pipeline app lays out a RAG query's prompt.
struct RagLayout {
  std::int64_t system_prompt_tokens = 0, top_k = 0;
  std::int64_t answer_tokens = 0;  // > 0: every answer has this length (0: the query's reference answer's)
};
// Query `i` of user `u`, arriving at `arrival_s`, as the pipeline app's request: the system prompt,
// the chunks of the query's precomputed ranking (best first), the query. The ranking goes with the
// request, so that the pipeline retrieves at its retrieval time (retrieve_at(), request.h): until
// then, the prompt holds the first top_k chunks already there at its arrival. `where` names the
// workload for errors (no precomputed retrieval: ConfigError; a chunk id out of range: InputError).
Request rag_request(const traces::UserTrace& u, std::size_t i, double arrival_s, const RagLayout& layout,
                    const std::string& where);
}  // namespace pipeline

class PipelineApp : public App {
 public:
  explicit PipelineApp(const Params& p);
  static ParamSchema schema();

  void prepare(const AppEnvironment& env) override;
  std::vector<std::pair<std::string, double>> resident_dram() const override;
  sim::Task<void> run(devices::Device& device, std::string owner, sim::StatGroup& stats) override;
  void records(h5::Table& out) const override;
  AppTotals totals() const override;
  YAML::Node resolved() const override { return resolved_; }
  std::string model_name() const override { return cost_.spec().name; }
  std::string unit() const override { return unit_; }

  const std::vector<pipeline::Served>& served() const { return served_; }
  // The answers' aggregates the rag driver reports (qa_hits, qa_stale_hits, mean_rouge_l,
  // mean_bleu), over the requests served: answer-cache hits, hits on stale entries, and the mean
  // ROUGE-L F / BLEU-4 of the answers against the references (a generated answer scores 1, a
  // request without a reference 0).
  struct AnswerQuality {
    std::int64_t answer_hits = 0, stale_hits = 0;
    double mean_rouge_l = 0, mean_bleu = 0;
  };
  AnswerQuality answer_quality() const;
  struct Conversation {
    std::int64_t turns = 0, prompt_tokens = 0, answer_tokens = 0;  // turns 0: a RAG workload instead
  };

 private:
  models::CostModel cost_;  // declared before pipeline_, which refers to it
  std::string unit_;
  // The units its prefill and decode stages run on (npu_graphs: the npu; speculative: the npu, and the
  // cpu with its attention at the activations' dtype), checked by prepare with the engine's values for
  // the model, as the run would need them.
  std::vector<std::pair<std::string, bool>> stage_units_;  // (unit, also the activations' dtype)
  void prepare_conversation();
  traces::AnswerScore answer_score(const pipeline::Served& s) const;
  void set_next_arrivals();
  std::shared_ptr<const pipeline::IdleWorkload> idle_workload(const traces::RagTrace& trace, const traces::UserTrace& u,
                                                              std::size_t n,
                                                              std::shared_ptr<const KnowledgeIndex> knowledge) const;
  YAML::Node workload_;
  Conversation conversation_;
  ConfigSource workload_source_;
  std::string user_id_;
  std::int64_t max_queries_, system_prompt_tokens_, top_k_, answer_tokens_;
  double interarrival_s_, retrieval_ms_, kv_match_ms_;
  std::unique_ptr<pipeline::Pipeline> pipeline_;
  YAML::Node resolved_;
  std::string idle_source_;  // where the `idle` stage is configured (for errors)
  std::vector<pipeline::Request> requests_;  // set by prepare()
  std::vector<pipeline::Served> served_;
};

}  // namespace mobisim::policies
