#include "policies/pipeline/caching_idle.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "sim/error.h"

namespace mobisim::policies::pipeline {

CachingIdle::CachingIdle(EngineOptions options, const Params& p, const char* name)
    : options_(std::move(options)), source_(p.source()), node_(p.yaml()), name_(name) {}

void CachingIdle::fail(const std::string& message) const {
  throw ConfigError(fmt::format("{}: idle stage '{}' {}", source_.where(node_), name_, message));
}

void CachingIdle::link(const StageLinks& links) {
  link_answer_cache(links);
  tree_ = dynamic_cast<ChunkTreeReuse*>(links.reuse);
  check_schedule_owners();
  EngineOptions o = options_;
  o.qa_bank = answers_ != nullptr;
  if (answers_) o.tau_query = answers_->tau_query();
  o.kv_cache = tree_ != nullptr;
  if (tree_) {
    const KvTree& t = tree_->tree();
    o.storage_limit_gb = t.limit_bytes() / 1e9;
    o.eviction = t.eviction();
    o.boundary_rules = tree_->boundary_rules();
    o.boundary_tokens = tree_->boundary_tokens();
    // What a background prefill saves per cached token must be what the tree stores.
    if (tree_->qkv_payload() != (o.reuse == ReuseMode::kQkvProjection))
      fail(fmt::format("has reuse_mode {} but the app's chunk_tree stores {} (qkv_projection goes with payload: qkv, "
                       "kv_projection and prefix_skip with payload: kv)",
                       to_string(o.reuse), tree_->qkv_payload() ? "Q/K/V (payload: qkv)" : "K/V (payload: kv)"));
  }
  complete_options(o);
  engine_ = std::make_unique<CachingPolicy>(o, source_, node_);
  // Without an answer cache the engine has no bank (the loop's `qa_bank: false` engine has an
  // empty one that nothing fills: no QA look-up, no served or predicted entry, no conversion).
  engine_->share_caches(answers_ ? &answers_->bank() : nullptr, tree_ ? &tree_->tree() : nullptr);
  // The engine applies the schedule to its own options and to the shared tree's limit; the answer
  // cache matches requests with its own threshold, which follows at the same moment.
  engine_->on_scheduled_change([answers = answers_](const ScheduledChange& c) {
    if (c.tau_query && answers) answers->set_tau_query(*c.tau_query);
  });
  if (!answers_) return;
  // A served entry is stale as the engine judges it in its own loop (its retriever, the chunks'
  // arrivals); before begin() the engine has no user yet, and no request is served.
  answers_->judge_staleness([this](const QaEntry& e) { return pipe_ != nullptr && engine_->entry_stale(e); });
}

// With an answer cache the stage needs the app's `semantic` one (its QA bank); without one
// (qa_bank: false) the app must have none, and the tree is the only cache the stage works on.
void CachingIdle::link_answer_cache(const StageLinks& links) {
  if (caches_optional_) {
    answers_ = dynamic_cast<SemanticAnswerCache*>(links.answers);
    if (links.answers && !answers_)
      fail("stores served queries in the app's QA bank: its answer cache must be `semantic` (this one is another)");
    if (!answers_ && !dynamic_cast<ChunkTreeReuse*>(links.reuse))
      fail("stores what the app served in its caches, and the app has none: it needs `answer_cache: {impl: semantic, "
           "...}`, `kv_reuse: {impl: chunk_tree, ...}` or both");
    return;
  }
  if (no_answer_cache_embed_ms_) {
    if (links.answers)
      fail("has qa_bank: false (no QA bank) but the app has an answer cache: drop the app's `answer_cache:` or set "
           "the stage's qa_bank: true");
    if (!dynamic_cast<ChunkTreeReuse*>(links.reuse))
      fail("has qa_bank: false, so it works on the app's chunk_tree only, and the app's KV-reuse stage is not a "
           "`chunk_tree`: use `kv_reuse: {impl: chunk_tree, ...}` (PerCache needs at least one cache layer)");
    return;
  }
  answers_ = dynamic_cast<SemanticAnswerCache*>(links.answers);
  if (!answers_)
    fail(fmt::format("works on the app's QA bank: it needs `answer_cache: {{impl: semantic, ...}}` in the same "
                     "pipeline (this one has {}; without a QA bank set the stage's qa_bank: false)",
                     links.answers ? "another answer cache" : "no answer cache"));
}

// A scheduled change needs a linked stage that owns its key: tau_query the answer cache (always
// linked), storage_limit_gb the chunk_tree; scheduler and conversions are this stage's own.
void CachingIdle::check_schedule_owners() const {
  for (std::size_t i = 0; i < options_.schedule.size(); ++i) {
    if (!options_.schedule[i].storage_limit_gb || tree_) continue;
    const ConfigSource key = source_.child("schedule").element(i).child("set").child("storage_limit_gb");
    const YAML::Node where = node_["schedule"][i]["set"]["storage_limit_gb"];
    throw ConfigError(fmt::format(
        "{}: idle stage '{}' schedules a storage_limit_gb change, but the app's KV-reuse stage is not a "
        "`chunk_tree` (the tree whose limit it would change): use `kv_reuse: {{impl: chunk_tree, ...}}` or drop "
        "storage_limit_gb from the schedule",
        key.where(where), name_));
  }
}

void CachingIdle::use_workload(std::shared_ptr<const IdleWorkload> workload, const models::CostModel& cost) {
  if (!engine_) throw Error("internal: an idle stage is given its workload before it is linked");
  if (workload->trace.users.size() != 1) throw Error("internal: an idle stage's workload has one user");
  engine_->check_workload(workload->trace, cost);
  const traces::UserTrace& user = workload->trace.users.front();
  config_.compute_unit = config_.prefill_unit = config_.decode_unit = workload->unit;
  config_.system_prompt_tokens = workload->system_prompt_tokens;
  config_.top_k = workload->top_k;
  config_.answer_tokens_override = workload->answer_tokens;
  if (answers_) {
    config_.embed_query_ms = answers_->embed_ms();
    config_.qa_match_ms = answers_->match_ms();
    config_.retrieval_ms = workload->retrieval_ms;
  } else if (caches_optional_) {
    // A stage that only stores never embeds nor retrieves: no embedding cost to split out.
    config_.embed_query_ms = 0;
    config_.retrieval_ms = workload->retrieval_ms;
  } else {
    // The app's retrieval_ms is the query embedding and the retrieval, back to back.
    const double embed_ms = *no_answer_cache_embed_ms_;
    if (embed_ms > workload->retrieval_ms)
      fail(fmt::format("has embed_ms {} but the app's retrieval_ms is {}: without an answer cache the app's "
                       "retrieval_ms is the query embedding plus the retrieval, so it cannot be less than embed_ms",
                       embed_ms, workload->retrieval_ms));
    config_.embed_query_ms = embed_ms;
    config_.retrieval_ms = workload->retrieval_ms - embed_ms;
  }
  config_.kv_match_ms = workload->kv_match_ms;
  if (tree_) {
    // The engine inserts slices by workload chunk id; the tree stage matches segments by key.
    std::vector<std::uint64_t> keys;
    for (std::size_t c = 0; c < user.chunks.size(); ++c) keys.push_back(chunk_key(c));
    tree_->name_chunks(keys);
  }
  if (engine_->needs_knowledge_index())
    knowledge_ = workload->knowledge ? workload->knowledge : KnowledgeIndex::build(user, workload->trace.meta);
  workload_ = std::move(workload);
}

void CachingIdle::begin(devices::Device& device, const models::CostModel& cost, const std::string& owner) {
  (void)owner;  // the engine's caches live on flash
  if (!workload_)
    fail("reads the texts of the app's RAG workload (its predictions and retrievals): give the pipeline app a "
         "`workload:`, not a `conversation:`");
  const traces::UserTrace& user = workload_->trace.users.front();
  pipe_ = std::make_unique<RagPipeline>(device.sim(), device, cost, config_, user, stats_, knowledge_);
  pipe_->set_priority(workload_->priority);
  engine_->begin_user(*pipe_);
  // The idle time before the first query (PerCache's first knowledge rounds, Sleep-time's first
  // raw-context rounds), as the rag loop gives it.
  if (!user.queries.empty()) device.sim().start(idle_until(user.queries.front().arrival_s), "idle work");
}

sim::Task<void> CachingIdle::idle_until(double next_arrival_s) {
  if (std::isinf(next_arrival_s)) co_return;  // nothing follows: the rag loop stops at the last query
  sim::Simulator& sim = pipe_->sim();
  const sim::Time until =
      next_arrival_s < 0 ? std::numeric_limits<sim::Time>::max() : sim::from_seconds(next_arrival_s);
  if (sim.now() >= until) co_return;  // the next request is due already: no idle time
  co_await engine_->idle(*pipe_, until);
}

sim::Task<void> CachingIdle::after(devices::Device& device, const std::string& owner, KvReuse& reuse,
                                   const Request& r, bool answer_hit, double kv_bytes_per_token) {
  (void)device;
  (void)owner;
  (void)reuse;
  (void)kv_bytes_per_token;
  const auto& queries = workload_->trace.users.front().queries;
  if (r.id < 0 || static_cast<std::size_t>(r.id) >= queries.size())
    throw Error(fmt::format("internal: request {} is not a query of the idle stage's workload ({} queries)", r.id,
                            queries.size()));
  const traces::Query& q = queries[static_cast<std::size_t>(r.id)];
  if (answer_hit) {
    engine_->note_qa_hit(*pipe_, q);
  } else {
    engine_->note_answered(q, chunk_ids(r), r.output_tokens);  // the chunks its prompt was retrieved with
  }
  co_await idle_until(r.next_arrival_s);
}

IdleClaim CachingIdle::claim(devices::Device& device, const std::string& owner, const Request& r) {
  (void)device;
  (void)owner;
  (void)r;
  IdleClaim out;
  if (!pipe_) return out;
  engine_->interrupt_idle();
  engine_->notice_new_chunks();
  // The idle period's background work, as the rag loop moves it into the next query's record.
  QueryRecord& bg = pipe_->background();
  out.work.busy_s = bg.embed_s + bg.qa_match_s + bg.retrieval_s + bg.kv_match_s + bg.load_s + bg.prefill_s + bg.decode_s;
  out.work.flops = bg.flops;
  out.work.energy_j = bg.active_energy_j;
  out.work.jobs = pipe_->background_jobs();
  bg = QueryRecord{};
  pipe_->background_jobs() = 0;
  return out;
}

}  // namespace mobisim::policies::pipeline
