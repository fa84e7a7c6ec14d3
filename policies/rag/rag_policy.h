#pragma once
// The RAG question-answering pipeline as simulated processes, and the policy
// interface that caching strategies (Naive, PerCache, RAGCache, MeanCache,
// Sleep-time Compute, ...) implement.
//
// A policy serves each user query with `serve()` and may do background work in
// idle time with `idle()`. It builds its latency out of the phase helpers of
// `RagPipeline` (embed, retrieve, match, load, prefill, decode, populate), each
// of which charges the device (time, FLOPs, energy) and records the phase in the
// query's record. One policy = one file pair under policies/rag/, registered with
//   MOBISIM_REGISTER(mobisim::policies::RagPolicy, MyPolicy, "my_policy", "doc");
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "devices/device.h"
#include "models/cost_model.h"
#include "policies/rag/knowledge_index.h"
#include "sim/params.h"
#include "sim/simulator.h"
#include "sim/stats.h"
#include "traces/rag_trace.h"

namespace mobisim::policies {

// One row of the per-query result table.
struct QueryRecord {
  std::string user;
  std::int64_t query_index = 0;
  double arrival_s = 0, start_s = 0, end_s = 0;
  // Latency breakdown by phase (seconds).
  double embed_s = 0, qa_match_s = 0, retrieval_s = 0, kv_match_s = 0, load_s = 0, prefill_s = 0, decode_s = 0;
  std::int64_t prompt_tokens = 0, reused_tokens = 0, computed_tokens = 0, answer_tokens = 0;
  double flops = 0, bytes_loaded = 0, energy_j = 0;
  bool qa_hit = false;
  // A QA hit served from a stale entry: a chunk added after the entry's retrieval now ranks in its
  // query's top-k_refresh (what PerCache's dynamic refresh would have re-generated).
  bool qa_stale = false;
  std::int64_t kv_hit_chunks = 0;
  std::int64_t retrieved_chunks = 0;
  // Flash used by the policy's caches when the query arrived (KV/QKV tree + QA bank).
  double cache_bytes = 0;
  // Best QA-bank similarity seen for this query (-1: no QA bank or an empty one).
  double qa_similarity = -1;
  // The answer served from a cache (QA hit); empty when the LLM generated this query's own answer.
  std::string served_answer;
  // Quality of the served answer against the reference answer (filled by the driver).
  double rouge_l = 0, bleu = 0;
  // Background work (prediction, population, conversion, refresh) done in the idle time
  // before this query: busy seconds, FLOPs, energy above idle, jobs run (filled by the driver).
  double bg_s = 0, bg_flops = 0, bg_energy_j = 0;
  std::int64_t bg_jobs = 0;
  // Marginal energy of the phases run through the helpers (active minus idle power x busy time).
  double active_energy_j = 0;
  double latency_s() const { return end_s - arrival_s; }
};

// Shared settings of the pipeline (from the experiment's YAML).
struct PipelineConfig {
  std::string compute_unit = "cpu";     // unit that runs the LLM and the fixed-cost steps
  std::string prefill_unit = "cpu";     // unit that prefills (compute_unit unless set)
  std::string decode_unit = "cpu";      // unit that decodes (compute_unit unless set)
  std::int64_t system_prompt_tokens = 64;
  std::int64_t top_k = 3;
  std::int64_t answer_tokens_override = 0;  // > 0: every answer has this length
  double embed_query_ms = 0;            // fixed query-embedding cost (0: none)
  double retrieval_ms = 0;              // fixed retrieval cost
  double qa_match_ms = 0;               // fixed cost of matching a query against the QA bank
  double kv_match_ms = 0;               // fixed cost of matching retrieved chunks against a KV/QKV tree
  static ParamSchema schema();
  static PipelineConfig from_params(const Params& p);
};

// Everything a policy may use while serving one user's queries.
class RagPipeline {
 public:
  // `knowledge` is the user's shared index (KnowledgeIndex), or null when no policy asked for one.
  RagPipeline(sim::Simulator& sim, devices::Device& device, const models::CostModel& cost,
              const PipelineConfig& config, const traces::UserTrace& user, sim::StatGroup& stats,
              std::shared_ptr<const KnowledgeIndex> knowledge = nullptr);

  sim::Simulator& sim() { return sim_; }
  devices::Device& device() { return device_; }
  const models::CostModel& cost() const { return cost_; }
  const PipelineConfig& config() const { return config_; }
  const traces::UserTrace& user() const { return user_; }
  sim::StatGroup& stats() { return stats_; }
  const std::shared_ptr<const KnowledgeIndex>& knowledge_index() const { return knowledge_; }

  // Chunk ids retrieved for a query (precomputed in the trace, else top-k by embedding cosine).
  std::vector<std::int32_t> retrieved_chunks(const traces::Query& q) const;
  std::int64_t prompt_tokens(const traces::Query& q, const std::vector<std::int32_t>& chunks) const;
  std::int64_t answer_tokens(const traces::Query& q) const;

  // Phase helpers: each runs on the device and adds its time to `rec`.
  sim::Task<void> embed(QueryRecord& rec);
  sim::Task<void> retrieve(QueryRecord& rec);
  sim::Task<void> prefill(QueryRecord& rec, const models::PrefillShape& shape, const std::string& label);
  sim::Task<void> decode(QueryRecord& rec, std::int64_t context, std::int64_t n_tokens, const std::string& label);
  sim::Task<void> load(QueryRecord& rec, double bytes, const std::string& label);
  // Cache look-ups (fixed costs from the pipeline config).
  sim::Task<void> qa_match(QueryRecord& rec);
  sim::Task<void> kv_match(QueryRecord& rec);
  // Any other transformer work (e.g. a Q projection added to a prefill), charged as prefill time.
  sim::Task<void> compute(QueryRecord& rec, const models::Work& work, const std::string& label);
  // Writes cache files to flash (charged to rec.load_s: I/O time).
  sim::Task<void> store(QueryRecord& rec, double bytes, const std::string& label);

  // Analytic durations on an idle device (what a background scheduler uses to decide
  // whether a job fits before the next query arrives).
  double estimate_compute_s(const models::Work& work) const;
  double estimate_read_s(double bytes) const;
  double estimate_write_s(double bytes) const;

  // Queue priority of this pipeline's work on the compute unit (lower first; 0 by default). On a
  // phone shared by several apps, a foreground app's pipeline goes before a background one's.
  void set_priority(int priority) { priority_ = priority; }
  int priority() const { return priority_; }

  // Accumulator for background work: policies pass it to the phase helpers from idle();
  // the driver moves its totals into the next query's record (bg_*) and resets it.
  QueryRecord& background() { return background_; }
  std::int64_t& background_jobs() { return background_jobs_; }

 private:
  sim::Simulator& sim_;
  devices::Device& device_;
  const models::CostModel& cost_;
  const PipelineConfig& config_;
  const traces::UserTrace& user_;
  sim::StatGroup& stats_;
  std::shared_ptr<const KnowledgeIndex> knowledge_;
  QueryRecord background_;
  std::int64_t background_jobs_ = 0;
  int priority_ = 0;
  // The cost of one decode step by context length: contexts recur across a user's queries, and a
  // step's cost depends on nothing else in this pipeline. Indexed by context (24 bytes per token
  // of the longest context seen, no allocation per step); seconds < 0: not yet.
  std::vector<devices::UnitCost> decode_steps_;
  const devices::UnitCost& decode_step(std::int64_t context, const std::string& label);
  void add_energy(QueryRecord& rec, const std::string& unit, double busy_s) const;
  void add_storage_energy(QueryRecord& rec, double busy_s, double io_energy_j) const;
};

class RagPolicy {
 public:
  static constexpr const char* kRegistryKind = "rag_policy";
  virtual ~RagPolicy() = default;
  // Checks the workload before any simulation (e.g. a semantic policy needs query embeddings,
  // a storage limit must hold one chunk's tensors); throws ConfigError.
  virtual void check_workload(const traces::RagTrace& trace, const models::CostModel& cost) const {
    (void)trace;
    (void)cost;
  }
  // Called once per user before the first query; the policy may keep `pipeline`, so its owner must
  // destroy the policy first (policies/pipeline/caching_idle.h declares them in that order).
  virtual void begin_user(RagPipeline& pipeline) { (void)pipeline; }
  // True when the policy retrieves or generates text of its own (predictions, refresh) and so
  // reads the user's KnowledgeIndex; the driver then builds one per user and shares it.
  virtual bool needs_knowledge_index() const { return false; }
  // False when the policy never reads chunk or query embeddings (the driver then need not load
  // them; a query without precomputed retrieval still gets them, see traces::RagTraceFile).
  virtual bool needs_embeddings() const { return true; }
  // False when the policy reads of the trace only a query's arrival, token counts and retrieved
  // ids and the chunks' token counts and arrival times: no texts, kinds, topics, relevant ids or
  // idle windows (the driver then does not load them; see traces::UserParts).
  virtual bool needs_trace_content() const { return true; }
  // Serves one query; fills `rec` (phases, tokens, hit flags).
  virtual sim::Task<void> serve(RagPipeline& pipeline, const traces::Query& q, QueryRecord& rec) = 0;
  // Background work allowed until `until` (the next query's arrival or the end of an idle window).
  virtual sim::Task<void> idle(RagPipeline& pipeline, sim::Time until) {
    (void)pipeline;
    (void)until;
    co_return;
  }
};

}  // namespace mobisim::policies
