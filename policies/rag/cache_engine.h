#pragma once
// The caching engine shared by PerCache and its baselines: one implementation of
// the QA bank layer, the knowledge (K/V or Q/K/V) cache-tree layer, query
// prediction in idle time, the cache scheduler and the cross-layer conversions.
// Each registered policy (percache.h, ragcache.h, meancache.h, sleeptime.h,
// ragcache_meancache.h, ragcache_sleeptime.h) is a thin file pair that declares
// its own parameters and switches on the pieces it uses.
//
// Serving a query (section 3, right half of figure 7):
//   embed -> [QA match: hit returns the cached answer] -> retrieve (top-k) ->
//   [tree match: walk the retrieved order until the first miss] -> load the
//   matched slices from UFS -> prefill what is not reused -> decode.
// Rule 2 of appendix B.2: the last `boundary_tokens` tokens of the final matched
// node are recomputed from text (their tensors were tokenized next to another
// successor). Reuse modes (what a matched token saves in the prefill):
//   qkv_projection  PerCache: Q/K/V projections + RoPE skipped, attention and FFN
//                   still run for every position (appendix B.1). Stores Q, K, V.
//   kv_projection   the paper's RAGCache as evaluated in section 5.3: K/V stored,
//                   so only the K/V projections are skipped (Q is recomputed).
//   prefix_skip     vLLM / SGLang / RAGCache proper: nothing at all is computed
//                   for cached positions (their K/V are attended). Stores K, V.
// Both qkv_projection and prefix_skip are exact only with the RoPE offset of the
// cached length; models/kernel/oracles.h (oracle_percache, oracle_prefix_reuse)
// checks both on the real kernel.
//
// Background work (figure 8, sections 4.1.2-4.3) runs only in idle time
// (optionally only in the trace's charging windows), one job at a time. A job
// starts only when its analytic duration fits before the next query's arrival
// (and the window's end), so it never delays a user query: a job that does not
// fit waits for the next idle period. Jobs: writing a served query's new tensor
// slices and QA entry; answering a QA-hit query for real (PerCache); knowledge
// abstract batches; knowledge-based, history-based (after a quiet period) and
// raw-context (Sleep-time Compute) predictions; populating the caches with each
// predicted query (embed, retrieve, match, load, prefill, decode unless the
// scheduler says prefill-only, write); conversions QKV->QA (decode pending
// entries when tau_query <= tau_scheduler) and QA->QKV (re-prefill QA entries
// whose slices were evicted, when they fit in free space); dynamic refresh
// (section 4.1.3: when chunks join the knowledge bank mid-trace, every QA entry
// whose query now ranks a new chunk in its top-k_refresh is re-retrieved,
// re-prefilled with QKV reuse and re-decoded). All of it is charged time, FLOPs
// and energy through RagPipeline::background().
//
// Late chunks (traces::Chunk::added_s > 0) are invisible until they arrive: the
// retrieval of predicted / refreshed / converted queries, the knowledge abstract
// (new chunks get their own abstract batch, abstract_quiet_s after arrival) and
// Sleep-time's raw-context windows only see chunks present at that time. The
// retriever's corpus statistics (BM25 idf, embedder fit) are those of the final
// knowledge base, as in the trace's precomputed retrieval (traces/generator.cpp).
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "models/tokenizer.h"
#include "policies/rag/kv_tree.h"
#include "policies/rag/qa_bank.h"
#include "policies/rag/query_predictor.h"
#include "policies/rag/rag_policy.h"
#include "traces/retrieval.h"

namespace mobisim::policies {

enum class ReuseMode { kQkvProjection, kKvProjection, kPrefixSkip };
ReuseMode parse_reuse_mode(const std::string& s);  // ConfigError for unknown names
const char* to_string(ReuseMode m);

// A mid-run change (figure 15): after the policy has served `after_query` queries
// (i.e. in the idle time that follows query index after_query - 1), set these values.
struct ScheduledChange {
  std::int64_t after_query = 0;
  std::optional<double> tau_query, storage_limit_gb;
  std::optional<bool> scheduler, conversions;
};

struct EngineOptions {
  // QA bank layer.
  bool qa_bank = false;
  double tau_query = 0.85;
  double qa_capacity_mb = 100;
  double qa_entry_kb = 4;
  bool qa_answer_hits_later = false;  // PerCache: a QA hit's real answer is generated in idle time
  // A served user query's answer joins the QA bank (the reactive update of MeanCache and PerCache).
  // Sleep-time Compute fills its bank from predicted questions only.
  bool qa_stores_served = true;
  // Knowledge cache-tree layer.
  bool kv_cache = false;
  ReuseMode reuse = ReuseMode::kQkvProjection;
  KvEviction eviction = KvEviction::kLfu;
  double storage_limit_gb = 8;
  bool boundary_rules = true;
  std::int64_t boundary_tokens = 4;
  // Prediction.
  bool knowledge_prediction = false;
  bool history_prediction = false;
  bool raw_context_prediction = false;  // Sleep-time Compute
  bool predictions_fill_kv = true;      // predicted queries populate the tree
  bool predictions_fill_qa = true;      // predicted queries populate the QA bank
  std::int64_t stride = 5;
  std::int64_t knowledge_rounds = 2;
  std::int64_t raw_rounds_initial = 2;
  std::int64_t raw_rounds_per_idle = 1;
  std::int64_t raw_window_chunks = 8;
  double quiet_period_s = 600;
  double abstract_quiet_s = 600;
  std::int64_t history_buffer = 5;
  std::string abstract_source = "key_phrases";
  std::int64_t abstract_batch_chunks = 8;
  std::int64_t predicted_answer_tokens = 136;
  std::int64_t predicted_answer_words = 60;
  std::string knowledge_type = "meeting record";
  std::string tokenizer;
  YAML::Node predictor;
  ConfigSource predictor_source;
  // Scheduler.
  bool scheduler = false;
  double tau_scheduler = 0.875;
  bool conversions = false;
  bool charging_only = false;
  double background_recheck_s = 60;  // idle work's wait when the phone disallows background work
  std::vector<ScheduledChange> schedule;
  // Dynamic refresh (PerCache 4.1.3).
  bool refresh = false;
  std::int64_t k_refresh = 3;
  bool uses_prediction() const { return knowledge_prediction || history_prediction || raw_context_prediction; }
};

// Shared parameter groups (each policy picks the ones it exposes).
void add_qa_params(ParamSchema& s, double default_tau);
void add_kv_params(ParamSchema& s, const std::string& default_mode, const std::string& default_eviction);
void add_prediction_params(ParamSchema& s);
void read_qa_params(const Params& p, EngineOptions& o);
void read_kv_params(const Params& p, EngineOptions& o);
void read_prediction_params(const Params& p, EngineOptions& o);
std::vector<ScheduledChange> parse_schedule(const Params& p, const std::string& key);

class CachingPolicy : public RagPolicy {
 public:
  CachingPolicy(EngineOptions options, const Params& params);
  // The same where `node` (read from `source`) is what error messages point at.
  CachingPolicy(EngineOptions options, ConfigSource source, YAML::Node node);

  void check_workload(const traces::RagTrace& trace, const models::CostModel& cost) const override;
  void begin_user(RagPipeline& p) override;
  bool needs_knowledge_index() const override;
  sim::Task<void> serve(RagPipeline& p, const traces::Query& q, QueryRecord& rec) override;
  sim::Task<void> idle(RagPipeline& p, sim::Time until) override;

  // Introspection for tests and reports.
  const EngineOptions& options() const { return o_; }
  const QaBank* qa_bank() const { return bank_; }
  const KvTree* kv_tree() const { return tree_; }

  // For the request pipeline's idle stages (policies/pipeline/percache_idle.h, sleeptime_idle.h),
  // where the QA bank and the tree belong to the answer-cache and KV-reuse stages: called before
  // begin_user, the engine then works on these (either may be null: the layer is off) instead of
  // building its own. Both must outlive the engine.
  void share_caches(QaBank* bank, KvTree* tree);
  // What serve() leaves for idle time once it has answered `q` (its own serve calls these too):
  // on a QA hit, the real answer generated later (answer_hits_later) and the query kept for
  // history-based prediction; after the LLM answered, the deferred write of its new slices and QA
  // entry (on `chunks`, the answer `answer_tokens` long) and the same history.
  void note_qa_hit(RagPipeline& p, const traces::Query& q);
  void note_answered(const traces::Query& q, const std::vector<std::int32_t>& chunks, std::int64_t answer_tokens);
  // At a query's arrival, before its look-ups: chunks that joined the knowledge bank since are noticed.
  void notice_new_chunks() { poll_new_chunks(); }
  // Ends the idle() call in progress (the next query came first; the rag driver never calls it: its
  // idle work only starts jobs that fit before the arrival). The job being run stops at its next
  // step (the step in flight on the device finishes) and goes back to the front of the queue,
  // uncommitted, with what planning prepared; an idle() waiting for a job's start returns. With
  // shared caches (the pipeline's idle stages) a background decode stops at its next token.
  void interrupt_idle() { ++idle_generation_; }
  // For the pipeline's idle stage (caching_idle.h), whose answer cache matches requests with its
  // own threshold: called right after each entry of `schedule` is applied (the engine's options and
  // the tree's limit already changed), at the moment the rag loop's look-ups would start using it.
  using ScheduleListener = std::function<void(const ScheduledChange&)>;
  void on_scheduled_change(ScheduleListener listener) { schedule_listener_ = std::move(listener); }
  std::int64_t predicted_queries() const { return predicted_; }
  std::int64_t conversions_qkv_to_qa() const { return conv_qkv_to_qa_; }
  std::int64_t conversions_qa_to_qkv() const { return conv_qa_to_qkv_; }
  std::int64_t refreshes() const { return refreshed_; }
  // Chunk ids present in the knowledge bank now (all of them for traces without late chunks).
  std::vector<std::int32_t> present_chunks() const;
  // Top-k over the chunks present now (the retriever of the user's chunks).
  std::vector<std::int32_t> retrieve_present(const std::string& text, const std::vector<float>& embedding,
                                             std::size_t k) const;
  // A QA entry is stale now when a chunk added after its retrieval ranks in its query's top
  // k_refresh among the chunks present (false without late chunks or a retriever): a QA hit on it
  // counts in the loop's qa_stale.
  bool entry_stale(const QaEntry& e) const;
  // True when predicted queries are populated prefill-only (tau_query above tau_scheduler).
  bool prefill_only() const { return o_.scheduler && o_.tau_query > o_.tau_scheduler; }
  double bytes_per_token() const;
  double slice_bytes(std::int32_t chunk) const;  // a chunk's KV (or QKV) slice on flash

 private:
  enum class JobKind { kStore, kAnswer, kAbstract, kKnowledge, kHistory, kRaw, kPopulate, kDecodePending, kRestore, kRefresh };
  struct Job {
    explicit Job(JobKind k = JobKind::kStore) : kind(k) {}
    JobKind kind;
    sim::Time not_before = 0;
    std::string text;
    std::vector<float> embedding;
    std::vector<std::int32_t> chunks;
    bool have_chunks = false;
    double chunks_at_s = 0;  // when `chunks` was retrieved
    std::string answer;
    std::int64_t answer_tokens = 0;
    std::int64_t query_tokens = 0;
    bool fill_kv = false, fill_qa = false, decode = true, predicted = false;
    std::uint64_t qa_id = 0;
    std::size_t batch = 0;
    bool prepared = false;
    std::vector<std::string> questions;
  };
  struct Step {
    enum Kind { kEmbed, kRetrieve, kKvMatch, kRead, kPrefill, kCompute, kDecode, kWrite };
    explicit Step(Kind k) : kind(k) {}
    Kind kind;
    models::PrefillShape shape{};
    models::Work work{};
    double bytes = 0;
    std::int64_t context = 0, n = 0;
    std::string label;
  };
  struct Plan {
    std::vector<Step> steps;
    double seconds = 0;
  };

  // Serving helpers.
  std::int64_t reusable_tokens(const KvMatch& m) const;
  void add_prefill_steps(Plan& plan, std::int64_t prompt, std::int64_t reused, const std::string& label) const;
  sim::Task<void> run_step(RagPipeline& p, QueryRecord& rec, const Step& s);
  sim::Task<void> run_idle_step(RagPipeline& p, const Step& s, std::uint64_t generation, bool& whole);
  std::vector<KvSlice> slices(const std::vector<std::int32_t>& chunks) const;
  KvSlice root_slice() const;
  double slice_cost_s(std::int64_t tokens, std::int64_t prefix) const;
  mutable std::unordered_map<std::uint64_t, double> slice_cost_memo_;  // by tokens << 32 | prefix; lookups only

  // Background.
  Plan plan_job(Job& j);
  void commit_job(Job& j);
  void add_conversion_jobs();
  bool any_restore_may_fit() const;
  // Queues a prediction-type job (no query attached) that may start at `not_before`.
  void schedule_job(JobKind kind, sim::Time not_before, std::size_t batch = 0);
  // Notices chunks whose added_s has passed: abstract batch + refresh jobs for them.
  void poll_new_chunks();
  double now_s() const;
  bool present(const traces::UserTrace& u, std::size_t c) const;
  std::size_t front_insert_position() const;
  void apply_schedule();
  void enqueue_history();
  std::vector<std::string> predict(Job& j);
  void prepare_populate(Job& j);
  std::string proxy_answer(const std::vector<std::int32_t>& chunks) const;
  double similarity(const std::string& a, const std::string& b) const;
  std::int64_t count_tokens(const std::string& text) const;
  PredictionContext context() const;

  EngineOptions o_;
  ConfigSource source_;
  YAML::Node node_;
  // Per-user state (a policy instance serves one user).
  RagPipeline* pipe_ = nullptr;
  // The layers: the engine's own (own_*) or those share_caches() named.
  std::unique_ptr<QaBank> own_bank_;
  std::unique_ptr<KvTree> own_tree_;
  QaBank* bank_ = nullptr;
  KvTree* tree_ = nullptr;
  QaBank* shared_bank_ = nullptr;
  KvTree* shared_tree_ = nullptr;
  bool caches_shared_ = false;
  std::uint64_t idle_generation_ = 0;  // bumped by interrupt_idle()
  std::unique_ptr<QueryPredictor> predictor_;
  // Retriever and phrase index of the user's chunks: the driver's shared one (or our own).
  std::shared_ptr<const KnowledgeIndex> index_;
  const traces::Retriever* retriever_ = nullptr;
  std::unique_ptr<models::Tokenizer> tokenizer_;
  const PhraseIndex* phrases_ = nullptr;
  mutable std::unordered_map<std::string, std::vector<float>> embed_cache_;  // lookups only
  const std::vector<float>& embed(const std::string& text) const;
  KnowledgeAbstract abstract_;
  std::vector<std::string> abstract_items_;
  std::deque<Job> jobs_;
  std::vector<std::string> history_;
  std::vector<std::vector<std::int32_t>> history_chunks_;
  std::int64_t served_ = 0;
  std::size_t raw_cursor_ = 0;
  std::size_t schedule_applied_ = 0;
  ScheduleListener schedule_listener_;  // empty: nobody outside the engine follows the schedule
  bool started_ = false;
  std::int64_t predicted_ = 0, conv_qkv_to_qa_ = 0, conv_qa_to_qkv_ = 0;
  std::unordered_set<std::uint64_t> restore_attempted_;
  double user_bytes_per_token_ = 0;  // bytes_per_token() of the current user's pipeline  // QA entries whose restore was queued
  // Late chunks in added_s order and how many of them have been noticed.
  std::vector<std::int32_t> late_;
  std::size_t late_seen_ = 0;
  std::int64_t deferred_ = 0;  // idle-work starts put off because the phone disallowed background work
  std::int64_t refreshed_ = 0;
};

}  // namespace mobisim::policies
