#include "policies/rag/cache_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/error.h"
#include "sim/rng.h"
#include "traces/embedder.h"
#include "traces/text.h"
#include "traces/workload.h"

namespace mobisim::policies {

ReuseMode parse_reuse_mode(const std::string& s) {
  if (s == "qkv_projection") return ReuseMode::kQkvProjection;
  if (s == "kv_projection") return ReuseMode::kKvProjection;
  if (s == "prefix_skip") return ReuseMode::kPrefixSkip;
  throw ConfigError(fmt::format("unknown reuse mode '{}' (known: qkv_projection, kv_projection, prefix_skip)", s));
}

const char* to_string(ReuseMode m) {
  switch (m) {
    case ReuseMode::kQkvProjection: return "qkv_projection";
    case ReuseMode::kKvProjection: return "kv_projection";
    case ReuseMode::kPrefixSkip: return "prefix_skip";
  }
  return "?";
}

// ---------------------------------------------------------------------------
// Parameters.
// ---------------------------------------------------------------------------
void add_qa_params(ParamSchema& s, double default_tau) {
  s.real("tau_query", default_tau, "QA bank cosine-similarity threshold: a hit returns the cached answer").range(0, 1);
  s.real("qa_capacity_mb", 100.0, "QA bank storage cap (LFU eviction); PerCache: 100 MB").positive().with_unit("MB");
  s.real("qa_entry_kb", 4.0, "flash size of one QA entry (query, embedding, answer); Table 1: 4 KB")
      .positive()
      .with_unit("KB");
}

void add_kv_params(ParamSchema& s, const std::string& default_mode, const std::string& default_eviction) {
  s.real("storage_limit_gb", 8.0, "flash budget of the knowledge cache tree (eviction keeps it below)")
      .positive()
      .with_unit("GB");
  s.text("reuse_mode", default_mode, "what a cached token saves: qkv_projection | kv_projection | prefix_skip")
      .in({"qkv_projection", "kv_projection", "prefix_skip"});
  s.text("eviction", default_eviction, "tree eviction: lfu (PerCache) | pgdsf (RAGCache)").in({"lfu", "pgdsf"});
  s.boolean("boundary_rules", true, "apply the tokenization-boundary rules of PerCache appendix B.2");
  s.integer("boundary_tokens", 4, "B.2 rule 2: tokens at the end of the last matched slice recomputed from text")
      .range(0, 1 << 20);
}

void add_prediction_params(ParamSchema& s) {
  s.integer("prediction_stride", 5, "queries predicted per prediction (PerCache's stride)").range(1, 1000);
  s.integer("predicted_answer_tokens", 136, "decode length of a predicted query's answer (Table 1: 136)")
      .range(1, 1 << 20);
  s.integer("predicted_answer_words", 60, "words of the extractive stand-in answer stored for a predicted query")
      .range(1, 1 << 20);
  s.text("knowledge_type", std::string("meeting record"),
         "the B.3 prompt's [personal emails/daily dialog/meeting record] slot");
  s.text("tokenizer", std::string(""), "SentencePiece model counting prompt tokens; empty: documented estimate")
      .input_path();
  s.node("predictor", "how predicted texts are produced: {impl: generator|file|oracle, ...} (default generator)");
  s.boolean("charging_only", false, "run background work only inside the trace's charging idle windows");
  s.real("background_recheck_s", 60.0,
         "with a thermal model: how long idle work waits before looking again when the phone has no thermal "
         "headroom or a low battery (Device::background_allowed)")
      .positive()
      .with_unit("s");
}

void read_qa_params(const Params& p, EngineOptions& o) {
  o.tau_query = p.real("tau_query");
  o.qa_capacity_mb = p.real("qa_capacity_mb");
  o.qa_entry_kb = p.real("qa_entry_kb");
}

void read_kv_params(const Params& p, EngineOptions& o) {
  o.storage_limit_gb = p.real("storage_limit_gb");
  o.reuse = parse_reuse_mode(p.text("reuse_mode"));
  o.eviction = parse_kv_eviction(p.text("eviction"));
  o.boundary_rules = p.boolean("boundary_rules");
  o.boundary_tokens = p.integer("boundary_tokens");
}

void read_prediction_params(const Params& p, EngineOptions& o) {
  o.stride = p.integer("prediction_stride");
  o.predicted_answer_tokens = p.integer("predicted_answer_tokens");
  o.predicted_answer_words = p.integer("predicted_answer_words");
  o.knowledge_type = p.text("knowledge_type");
  o.tokenizer = p.text("tokenizer");
  o.predictor = p.node("predictor");
  o.predictor_source = p.source_of("predictor");
  o.charging_only = p.boolean("charging_only");
  o.background_recheck_s = p.real("background_recheck_s");
  // Validate the predictor now (unknown impl or keys fail before any simulation).
  (void)make_predictor(o.predictor, o.predictor_source);
}

std::vector<ScheduledChange> parse_schedule(const Params& p, const std::string& key) {
  std::vector<ScheduledChange> out;
  const YAML::Node list = p.node(key);
  if (!list.IsDefined() || list.IsNull()) return out;
  if (!list.IsSequence()) p.fail(key, "expected a list of {after_query: N, set: {...}}");
  ParamSchema entry;
  entry.integer("after_query", std::nullopt, "the change applies once this many queries have been served")
      .range(1, 1e9);
  entry.node("set", "the values to change: tau_query, storage_limit_gb, scheduler, conversions");
  ParamSchema set;
  set.real("tau_query", std::nullopt, "new QA threshold").range(0, 1).optional();
  set.real("storage_limit_gb", std::nullopt, "new tree storage limit").positive().optional();
  set.boolean("scheduler", std::nullopt, "scheduler on/off").optional();
  set.boolean("conversions", std::nullopt, "conversions on/off").optional();
  for (std::size_t i = 0; i < list.size(); ++i) {
    const ConfigSource src = p.source_of(key).element(i);
    Params e(list[i], entry, src, {});
    Params s(e.node("set"), set, src.child("set"), {});
    ScheduledChange c;
    c.after_query = e.integer("after_query");
    if (s.has("tau_query")) c.tau_query = s.real("tau_query");
    if (s.has("storage_limit_gb")) c.storage_limit_gb = s.real("storage_limit_gb");
    if (s.has("scheduler")) c.scheduler = s.boolean("scheduler");
    if (s.has("conversions")) c.conversions = s.boolean("conversions");
    if (!out.empty() && c.after_query < out.back().after_query)
      throw ConfigError(fmt::format("{}: schedule entries must be in after_query order", src.where(list[i])));
    out.push_back(c);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Construction and checks.
// ---------------------------------------------------------------------------
CachingPolicy::CachingPolicy(EngineOptions options, const Params& params)
    : CachingPolicy(std::move(options), params.source(), params.yaml()) {}

CachingPolicy::CachingPolicy(EngineOptions options, ConfigSource source, YAML::Node node)
    : o_(std::move(options)), source_(std::move(source)), node_(std::move(node)) {}

double CachingPolicy::bytes_per_token() const {
  const auto& spec = pipe_ ? pipe_->cost().spec() : models::ModelSpec{};
  return o_.reuse == ReuseMode::kQkvProjection ? spec.qkv_bytes_per_token(spec.activation_dtype)
                                               : spec.kv_bytes_per_token(spec.kv_dtype);
}

void CachingPolicy::check_workload(const traces::RagTrace& trace, const models::CostModel& cost) const {
  const bool semantic = o_.qa_bank || o_.uses_prediction();
  // Predicted questions (and refreshed entries) are embedded here and compared with the trace's query
  // and chunk embeddings: that needs the trace's own embedder, which must be one mobisim can run.
  if (needs_knowledge_index() && trace.meta.embedding_dim > 0 && !traces::EmbedderConfig::parse(trace.meta.embedder))
    throw ConfigError(fmt::format(
        "{}: this policy embeds the questions it predicts and compares them with the trace's query embeddings, but "
        "the trace's embeddings come from '{}', which mobisim cannot run (only its built-in embedder, {}); use a "
        "trace embedded by the built-in embedder (the default of `mobisim trace generate` and `mobisim trace "
        "import`), or a policy without query prediction and refresh",
        source_.where(node_), trace.meta.embedder, traces::EmbedderConfig{}.name()));
  auto where = [&](const std::string& key) {
    return node_.IsMap() && node_[key] ? source_.child(key).where(node_[key]) : source_.where(node_);
  };
  for (const auto& u : trace.users) {
    if (semantic)
      for (std::size_t i = 0; i < u.queries.size(); ++i)
        if (u.queries[i].embedding.empty())
          throw ConfigError(fmt::format(
              "{}: this policy matches queries by embedding, but query {} of user '{}' in the workload has none "
              "(import or generate the trace with embeddings, or attach them with `mobisim trace embeddings`)",
              source_.where(node_), i, u.user_id));
    if (o_.uses_prediction())
      for (std::size_t i = 0; i < u.chunks.size(); ++i)
        if (u.chunks[i].text.empty())
          throw ConfigError(fmt::format("{}: query prediction needs chunk texts, but chunk {} of user '{}' has none",
                                        source_.where(node_), i, u.user_id));
  }
  if (o_.kv_cache) {
    const auto& spec = cost.spec();
    const double bpt = o_.reuse == ReuseMode::kQkvProjection ? spec.qkv_bytes_per_token(spec.activation_dtype)
                                                             : spec.kv_bytes_per_token(spec.kv_dtype);
    std::int64_t max_tokens = 0;
    for (const auto& u : trace.users)
      for (const auto& c : u.chunks) max_tokens = std::max<std::int64_t>(max_tokens, c.tokens);
    double limit = o_.storage_limit_gb;
    for (const auto& c : o_.schedule)
      if (c.storage_limit_gb) limit = std::min(limit, *c.storage_limit_gb);
    const double need = static_cast<double>(max_tokens) * bpt;
    if (limit * 1e9 < need)
      throw ConfigError(fmt::format(
          "{}: storage limit {:.3f} GB is smaller than one chunk's tensors ({:.3f} GB: {} tokens x {:.0f} bytes of "
          "{} per token for {})",
          where("storage_limit_gb"), limit, need / 1e9, max_tokens, bpt,
          o_.reuse == ReuseMode::kQkvProjection ? "Q/K/V" : "K/V", spec.name));
  }
}

void CachingPolicy::begin_user(RagPipeline& p) {
  pipe_ = &p;
  user_bytes_per_token_ = bytes_per_token();  // fixed for the user's pipeline; read per slice on hot paths
  slice_cost_memo_.clear();
  const auto& user = p.user();
  if (caches_shared_) {
    bank_ = shared_bank_;
    tree_ = shared_tree_;
  } else {
    if (o_.qa_bank || o_.uses_prediction()) own_bank_ = std::make_unique<QaBank>(o_.qa_capacity_mb * 1e6, o_.qa_entry_kb * 1e3);
    if (o_.kv_cache) own_tree_ = std::make_unique<KvTree>(o_.storage_limit_gb * 1e9, o_.eviction, o_.boundary_rules);
    bank_ = own_bank_.get();
    tree_ = own_tree_.get();
  }
  late_.clear();
  late_seen_ = 0;
  for (std::size_t c = 0; c < user.chunks.size(); ++c)
    if (user.chunks[c].added_s > 0) late_.push_back(static_cast<std::int32_t>(c));
  std::stable_sort(late_.begin(), late_.end(), [&](std::int32_t a, std::int32_t b) {
    return user.chunks[static_cast<std::size_t>(a)].added_s < user.chunks[static_cast<std::size_t>(b)].added_s;
  });
  const bool refresh = o_.refresh && bank_ && !late_.empty();
  if (o_.uses_prediction() || refresh) {
    if (o_.uses_prediction()) predictor_ = make_predictor(o_.predictor, o_.predictor_source);
    tokenizer_ = traces::make_tokenizer(o_.tokenizer);
    index_ = p.knowledge_index();
    if (!index_) index_ = KnowledgeIndex::build(user);  // no shared one: build our own
    retriever_ = index_->retriever.get();
    phrases_ = index_->phrases.get();
  }
}

void CachingPolicy::share_caches(QaBank* bank, KvTree* tree) {
  caches_shared_ = true;
  shared_bank_ = bank;
  shared_tree_ = tree;
}

bool CachingPolicy::needs_knowledge_index() const { return o_.uses_prediction() || o_.refresh; }

double CachingPolicy::now_s() const { return sim::to_seconds(pipe_->sim().now()); }

// In simulator time units (a chunk added at added_s is present once the clock reaches
// from_seconds(added_s): the idle loop waits exactly that long).
bool CachingPolicy::present(const traces::UserTrace& u, std::size_t c) const {
  return sim::from_seconds(u.chunks[c].added_s) <= pipe_->sim().now();
}

std::vector<std::int32_t> CachingPolicy::present_chunks() const {
  std::vector<std::int32_t> out;
  const auto& u = pipe_->user();
  for (std::size_t c = 0; c < u.chunks.size(); ++c)
    if (present(u, c)) out.push_back(static_cast<std::int32_t>(c));
  return out;
}

std::vector<std::int32_t> CachingPolicy::retrieve_present(const std::string& text, const std::vector<float>& embedding,
                                                          std::size_t k) const {
  std::vector<std::int32_t> out;
  const auto& u = pipe_->user();
  if (late_.empty()) {
    for (const auto& h : index_->retrieve(text, embedding, k)) out.push_back(h.chunk);
    return out;
  }
  // Rank everything, keep the first k chunks already in the knowledge bank.
  for (const auto& h : index_->retrieve(text, embedding, u.chunks.size())) {
    if (!present(u, static_cast<std::size_t>(h.chunk))) continue;
    out.push_back(h.chunk);
    if (out.size() == k) break;
  }
  return out;
}

bool CachingPolicy::entry_stale(const QaEntry& e) const {
  if (late_.empty() || !retriever_) return false;
  const auto& u = pipe_->user();
  for (auto c : retrieve_present(e.query, e.embedding, static_cast<std::size_t>(o_.k_refresh)))
    if (u.chunks[static_cast<std::size_t>(c)].added_s > e.chunks_at_s) return true;
  return false;
}

void CachingPolicy::poll_new_chunks() {
  const auto& u = pipe_->user();
  std::vector<std::int32_t> fresh;
  while (late_seen_ < late_.size() && present(u, static_cast<std::size_t>(late_[late_seen_])))
    fresh.push_back(late_[late_seen_++]);
  if (fresh.empty()) return;
  std::vector<Job> work;
  // Refresh (4.1.3): QA entries whose query now ranks a new chunk in its top-k_refresh.
  if (o_.refresh && bank_ && retriever_) {
    for (const auto& e : bank_->entries()) {
      bool queued = false;
      for (const auto& j : jobs_) queued = queued || (j.kind == JobKind::kRefresh && j.qa_id == e.id);
      if (queued) continue;
      const auto top = retrieve_present(e.query, e.embedding, static_cast<std::size_t>(o_.k_refresh));
      bool hit = false;
      for (auto c : top) hit = hit || std::find(fresh.begin(), fresh.end(), c) != fresh.end();
      if (!hit) continue;
      Job j{JobKind::kRefresh};
      j.text = e.query;
      j.embedding = e.embedding;
      j.qa_id = e.id;
      j.decode = e.answered;
      j.predicted = e.predicted;
      j.fill_kv = tree_ != nullptr;
      j.answer_tokens = std::max<std::int64_t>(e.answer_tokens, 1);
      j.query_tokens = tokenizer_ ? count_tokens(e.query) : 16;
      work.push_back(std::move(j));
    }
  }
  const auto at = jobs_.begin() + static_cast<std::ptrdiff_t>(front_insert_position());
  jobs_.insert(at, std::make_move_iterator(work.begin()), std::make_move_iterator(work.end()));
  // The abstract absorbs the new chunks in a batch once no chunk arrived for abstract_quiet_s (4.1.2),
  // followed by one knowledge-based prediction round.
  if (o_.knowledge_prediction && started_ && phrases_) {
    const sim::Time quiet = pipe_->sim().now() + sim::from_seconds(o_.abstract_quiet_s);
    for (auto& j : jobs_)
      if ((j.kind == JobKind::kAbstract || j.kind == JobKind::kKnowledge) && !j.prepared) j.not_before = quiet;
    const KnowledgeAbstract add =
        build_abstract(u, *phrases_, "key_phrases", static_cast<std::size_t>(o_.abstract_batch_chunks), fresh);
    for (const auto& b : add.batches) {
      abstract_.batches.push_back(b);
      schedule_job(JobKind::kAbstract, quiet, abstract_.batches.size() - 1);
    }
    schedule_job(JobKind::kKnowledge, quiet);
  }
}

// ---------------------------------------------------------------------------
// Cost pieces.
// ---------------------------------------------------------------------------
std::int64_t CachingPolicy::reusable_tokens(const KvMatch& m) const {
  if (m.nodes.empty()) return 0;
  std::int64_t trim = 0;
  if (o_.boundary_rules) {
    const auto& last = tree_->nodes()[static_cast<std::size_t>(m.nodes.back())];
    trim = std::min<std::int64_t>(o_.boundary_tokens, last.tokens);
  }
  return m.tokens - trim;
}

void CachingPolicy::add_prefill_steps(Plan& plan, std::int64_t prompt, std::int64_t reused,
                                      const std::string& label) const {
  Step s{Step::kPrefill};
  s.label = label;
  if (o_.reuse == ReuseMode::kPrefixSkip) {
    s.shape = models::PrefillShape{prompt - reused, reused, 0, 1};
  } else {
    s.shape = models::PrefillShape{prompt, 0, reused, 1};
  }
  plan.steps.push_back(s);
  plan.seconds += pipe_->estimate_compute_s(pipe_->cost().prefill(s.shape));
  if (o_.reuse == ReuseMode::kKvProjection && reused > 0) {
    Step q{Step::kCompute};
    q.work = pipe_->cost().q_projection(reused);
    q.label = label + " (Q of cached positions)";
    plan.seconds += pipe_->estimate_compute_s(q.work);
    plan.steps.push_back(q);
  }
}

sim::Task<void> CachingPolicy::run_step(RagPipeline& p, QueryRecord& rec, const Step& s) {
  switch (s.kind) {
    case Step::kEmbed: co_await p.embed(rec); break;
    case Step::kRetrieve: co_await p.retrieve(rec); break;
    case Step::kKvMatch: co_await p.kv_match(rec); break;
    case Step::kRead: co_await p.load(rec, s.bytes, s.label); break;
    case Step::kPrefill: co_await p.prefill(rec, s.shape, s.label); break;
    case Step::kCompute: co_await p.compute(rec, s.work, s.label); break;
    case Step::kDecode: co_await p.decode(rec, s.context, s.n, s.label); break;
    case Step::kWrite: co_await p.store(rec, s.bytes, s.label); break;
  }
}

// A background step. A decode that may be interrupted (interrupt_idle: the pipeline's idle stages)
// is issued token by token and stops, `whole` false, at the first token after the interruption;
// otherwise it is issued as serve() issues it.
sim::Task<void> CachingPolicy::run_idle_step(RagPipeline& p, const Step& s, std::uint64_t generation, bool& whole) {
  whole = true;
  if (s.kind != Step::kDecode || !caches_shared_) {
    co_await run_step(p, p.background(), s);
    co_return;
  }
  for (std::int64_t i = 0; i < s.n; ++i) {
    if (generation != idle_generation_) {
      whole = false;
      co_return;
    }
    co_await p.decode(p.background(), s.context + i, 1, s.label);
  }
}

double CachingPolicy::slice_cost_s(std::int64_t tokens, std::int64_t prefix) const {
  auto compute = [&] {
    return pipe_->estimate_compute_s(pipe_->cost().prefill(models::PrefillShape{tokens, prefix, 0, 0}));
  };
  // A pure function of (tokens, prefix) on this pipeline; the same chunk paths recur in every
  // match, insert and conversion, so each pair is costed once per user.
  constexpr std::int64_t kKeyLimit = std::int64_t{1} << 31;
  if (tokens < 0 || prefix < 0 || tokens >= kKeyLimit || prefix >= kKeyLimit) return compute();
  const std::uint64_t key = (static_cast<std::uint64_t>(tokens) << 32) | static_cast<std::uint64_t>(prefix);
  auto it = slice_cost_memo_.find(key);
  if (it == slice_cost_memo_.end()) it = slice_cost_memo_.emplace(key, compute()).first;
  return it->second;
}

KvSlice CachingPolicy::root_slice() const {
  const std::int64_t t = pipe_->config().system_prompt_tokens;
  return KvSlice{-1, t, static_cast<double>(t) * bytes_per_token(), slice_cost_s(t, 0)};
}

double CachingPolicy::slice_bytes(std::int32_t chunk) const {
  return static_cast<double>(pipe_->user().chunks.at(static_cast<std::size_t>(chunk)).tokens) * user_bytes_per_token_;
}

std::vector<KvSlice> CachingPolicy::slices(const std::vector<std::int32_t>& chunks) const {
  std::vector<KvSlice> out;
  std::int64_t prefix = pipe_->config().system_prompt_tokens;
  for (auto c : chunks) {
    const std::int64_t t = pipe_->user().chunks.at(static_cast<std::size_t>(c)).tokens;
    out.push_back(KvSlice{c, t, slice_bytes(c), slice_cost_s(t, prefix)});
    prefix += t;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Serving a user query.
// ---------------------------------------------------------------------------
sim::Task<void> CachingPolicy::serve(RagPipeline& p, const traces::Query& q, QueryRecord& rec) {
  poll_new_chunks();
  rec.cache_bytes = (tree_ ? tree_->used_bytes() : 0.0) + (bank_ ? bank_->used_bytes() : 0.0);
  co_await p.embed(rec);
  if (o_.qa_bank) {
    co_await p.qa_match(rec);
    const QaMatch m = bank_->match(q.embedding, o_.tau_query);
    rec.qa_similarity = m.similarity;
    if (m.index) {
      bank_->touch(*m.index);
      const QaEntry& e = bank_->entries()[*m.index];
      rec.qa_hit = true;
      rec.qa_stale = entry_stale(e);
      rec.served_answer = e.answer.empty() ? std::string(" ") : e.answer;
      note_qa_hit(p, q);
      co_return;
    }
  }
  co_await p.retrieve(rec);
  const auto chunks = p.retrieved_chunks(q);
  rec.retrieved_chunks = static_cast<std::int64_t>(chunks.size());
  const std::int64_t prompt = p.prompt_tokens(q, chunks);
  rec.prompt_tokens = prompt;
  std::int64_t reused = 0;
  if (tree_) {
    co_await p.kv_match(rec);
    const KvMatch m = tree_->match(chunks);
    if (!m.nodes.empty()) {
      tree_->touch(m);
      rec.kv_hit_chunks = m.chunks;
      reused = reusable_tokens(m);
      // One file per slice, loaded on demand.
      for (auto id : m.nodes) co_await p.load(rec, tree_->nodes()[static_cast<std::size_t>(id)].bytes, "load slice");
    }
  }
  Plan plan;
  add_prefill_steps(plan, prompt, reused, "prefill");
  for (const auto& s : plan.steps) co_await run_step(p, rec, s);
  const std::int64_t answer = p.answer_tokens(q);
  rec.answer_tokens = answer;
  co_await p.decode(rec, prompt, answer - 1, "decode");
  note_answered(q, chunks, answer);
}

void CachingPolicy::note_qa_hit(RagPipeline& p, const traces::Query& q) {
  if (o_.qa_answer_hits_later) {
    // PerCache 4.2.1: the real answer to this query is generated in idle time and stored.
    Job j{JobKind::kAnswer};
    j.text = q.text;
    j.embedding = q.embedding;
    j.chunks = p.retrieved_chunks(q);
    j.have_chunks = true;
    j.chunks_at_s = now_s();
    j.answer = q.answer_text;
    j.answer_tokens = p.answer_tokens(q);
    j.query_tokens = q.tokens;
    j.fill_kv = o_.kv_cache;
    j.fill_qa = true;
    j.decode = true;
    jobs_.push_front(std::move(j));
  }
  history_.push_back(q.text);
  history_chunks_.push_back({});
  ++served_;
  enqueue_history();
}

void CachingPolicy::note_answered(const traces::Query& q, const std::vector<std::int32_t>& chunks,
                                  std::int64_t answer_tokens) {
  // Population of the caches with this query (new slices and QA entry are written in idle time).
  const bool store_qa = o_.qa_bank && bank_ && o_.qa_stores_served;
  if (tree_ || store_qa) {
    Job j{JobKind::kStore};
    j.text = q.text;
    j.embedding = q.embedding;
    j.chunks = chunks;
    j.have_chunks = true;
    j.chunks_at_s = now_s();
    j.answer = q.answer_text;
    j.answer_tokens = answer_tokens;
    j.fill_kv = tree_ != nullptr;
    j.fill_qa = store_qa;
    jobs_.push_front(std::move(j));
  }
  history_.push_back(q.text);
  history_chunks_.push_back(chunks);
  ++served_;
  enqueue_history();
}

// ---------------------------------------------------------------------------
// Background work.
// ---------------------------------------------------------------------------
void CachingPolicy::enqueue_history() {
  if (!o_.history_prediction && !(o_.raw_context_prediction && o_.raw_rounds_per_idle > 0)) return;
  const sim::Time at = pipe_->sim().now() + sim::from_seconds(o_.quiet_period_s);
  // A query within the quiet period postpones the pending history prediction.
  for (auto& j : jobs_)
    if ((j.kind == JobKind::kHistory || j.kind == JobKind::kRaw) && !j.prepared && j.not_before > 0) {
      j.not_before = at;
      return;
    }
  if (o_.history_prediction) {
    schedule_job(JobKind::kHistory, at);
  }
  for (std::int64_t r = 0; o_.raw_context_prediction && r < o_.raw_rounds_per_idle; ++r) {
    schedule_job(JobKind::kRaw, at);
  }
}

PredictionContext CachingPolicy::context() const {
  PredictionContext c;
  c.user = &pipe_->user();
  c.phrases = phrases_;
  c.knowledge_type = o_.knowledge_type;
  c.abstract = abstract_items_;
  const std::size_t n = std::min<std::size_t>(history_.size(), static_cast<std::size_t>(o_.history_buffer));
  c.history.assign(history_.end() - static_cast<std::ptrdiff_t>(n), history_.end());
  c.history_chunks.assign(history_chunks_.end() - static_cast<std::ptrdiff_t>(n), history_chunks_.end());
  c.queries_served = served_;
  c.similarity = [this](const std::string& a, const std::string& b) { return similarity(a, b); };
  c.similarities = [this](const std::string& a, const std::vector<std::string>& bs) {
    // References into embed_cache_ stay valid while it grows (node-based map).
    const std::vector<float>& ea = embed(a);
    std::vector<const std::vector<float>*> rows;
    rows.reserve(bs.size());
    for (const auto& b : bs) rows.push_back(&embed(b));
    return traces::dots(ea, rows);  // dots(ea, eb) = dot(ea, eb) = similarity(a, b), each
  };
  return c;
}

const std::vector<float>& CachingPolicy::embed(const std::string& text) const {
  auto it = embed_cache_.find(text);
  if (it == embed_cache_.end()) it = embed_cache_.emplace(text, index_->embed(text)).first;
  return it->second;
}

double CachingPolicy::similarity(const std::string& a, const std::string& b) const {
  return traces::dot(embed(a), embed(b));
}

std::int64_t CachingPolicy::count_tokens(const std::string& text) const {
  return static_cast<std::int64_t>(tokenizer_->count(text));
}

std::string CachingPolicy::proxy_answer(const std::vector<std::int32_t>& chunks) const {
  // Stand-in for the LLM's answer to a predicted query: the opening words of its best chunk.
  if (chunks.empty()) return "";
  return traces::first_words(pipe_->user().chunks.at(static_cast<std::size_t>(chunks[0])).text,
                             static_cast<std::size_t>(o_.predicted_answer_words));
}

void CachingPolicy::prepare_populate(Job& j) {
  if (j.have_chunks) return;
  if (j.embedding.empty()) j.embedding = embed(j.text);
  if (retriever_) {
    j.chunks = retrieve_present(j.text, j.embedding, static_cast<std::size_t>(pipe_->config().top_k));
  } else {
    traces::Query q;
    q.embedding = j.embedding;
    j.chunks = pipe_->retrieved_chunks(q);
  }
  j.have_chunks = true;
  j.chunks_at_s = now_s();
  if (j.query_tokens == 0) j.query_tokens = tokenizer_ ? count_tokens(j.text) : 16;
  if (j.predicted && j.answer.empty()) j.answer = proxy_answer(j.chunks);
}

std::vector<std::string> CachingPolicy::predict(Job& j) {
  if (j.prepared) return j.questions;
  PredictionContext c = context();
  const int n = static_cast<int>(o_.stride);
  if (j.kind == JobKind::kKnowledge) {
    j.questions = predictor_->knowledge_based(c, n);
  } else if (j.kind == JobKind::kHistory) {
    j.questions = predictor_->history_based(c, n);
  } else {
    const auto present_ids = present_chunks();
    const std::size_t nc = present_ids.size();
    for (std::int64_t i = 0; i < o_.raw_window_chunks && nc > 0; ++i)
      c.raw_chunks.push_back(present_ids[(raw_cursor_ + static_cast<std::size_t>(i)) % nc]);
    raw_cursor_ = nc ? (raw_cursor_ + static_cast<std::size_t>(o_.raw_window_chunks)) % nc : 0;
    j.chunks = c.raw_chunks;
    j.questions = predictor_->raw_context(c, n);
  }
  j.prepared = true;
  return j.questions;
}

CachingPolicy::Plan CachingPolicy::plan_job(Job& j) {
  Plan plan;
  auto add = [&](Step s, double sec) {
    plan.steps.push_back(std::move(s));
    plan.seconds += sec;
  };
  const auto& cfg = pipe_->config();
  auto llm = [&](std::int64_t prompt_tokens, std::int64_t output_tokens, const std::string& label) {
    add_prefill_steps(plan, prompt_tokens, 0, label + " prefill");
    if (output_tokens > 1) {
      Step d{Step::kDecode};
      d.context = prompt_tokens;
      d.n = output_tokens - 1;
      d.label = label + " decode";
      add(d, static_cast<double>(d.n) *
                 pipe_->estimate_compute_s(pipe_->cost().decode(prompt_tokens + output_tokens / 2)));
    }
  };
  auto write_new = [&](const std::vector<std::int32_t>& chunks, bool fill_kv) {
    double bytes = 0;
    if (fill_kv && tree_) {
      const KvMatch m = tree_->match(chunks);
      const auto sl = slices(chunks);
      if (m.nodes.empty()) bytes += root_slice().bytes;
      // New slices: those past the match, plus (B.2 rule 1) a copy of the last matched chunk
      // when the path continues beyond it.
      std::size_t from = static_cast<std::size_t>(m.chunks);
      if (o_.boundary_rules && from > 0 && from < chunks.size()) --from;
      for (std::size_t i = from; i < sl.size(); ++i) bytes += sl[i].bytes;
    }
    if (bytes > 0) {
      Step w{Step::kWrite};
      w.bytes = bytes;
      w.label = "write slices";
      add(w, pipe_->estimate_write_s(bytes));
    }
  };
  // Match + load + prefill (+ decode) + write of one query through the tree.
  // prefill_needed false: decode from the stored tensors (QKV->QA conversion): the cached
  // positions' K/V are loaded, only the positions not in the tree (query, unmatched chunks,
  // B.2 boundary tokens) are prefilled against them, then the answer is decoded.
  auto populate = [&](Job& job, bool embed_and_retrieve, bool prefill_needed) {
    if (embed_and_retrieve) {
      add(Step{Step::kEmbed}, cfg.embed_query_ms / 1e3);
      add(Step{Step::kRetrieve}, cfg.retrieval_ms / 1e3);
    }
    prepare_populate(job);
    std::int64_t prompt = cfg.system_prompt_tokens + job.query_tokens;
    for (auto c : job.chunks) prompt += pipe_->user().chunks.at(static_cast<std::size_t>(c)).tokens;
    std::int64_t reused = 0;
    if (tree_) {
      add(Step{Step::kKvMatch}, cfg.kv_match_ms / 1e3);
      const KvMatch m = tree_->match(job.chunks);
      if (!m.nodes.empty()) {
        reused = reusable_tokens(m);
        Step r{Step::kRead};
        r.bytes = m.bytes;
        r.label = "load slices";
        add(r, pipe_->estimate_read_s(m.bytes));
      }
    }
    if (prefill_needed) {
      add_prefill_steps(plan, prompt, reused, "populate");
    } else {
      Step s{Step::kPrefill};
      s.label = "decode-pending suffix prefill";
      s.shape = models::PrefillShape{prompt - reused, reused, 0, 1};
      add(s, pipe_->estimate_compute_s(pipe_->cost().prefill(s.shape)));
    }
    if (job.decode && job.answer_tokens > 1) {
      Step d{Step::kDecode};
      d.context = prompt;
      d.n = job.answer_tokens - 1;
      d.label = "populate decode";
      add(d, static_cast<double>(d.n) * pipe_->estimate_compute_s(pipe_->cost().decode(prompt + d.n / 2)));
    }
    write_new(job.chunks, job.fill_kv);
  };

  switch (j.kind) {
    case JobKind::kStore:
      write_new(j.chunks, j.fill_kv);
      break;
    case JobKind::kAnswer:
      populate(j, true, true);
      break;
    case JobKind::kPopulate:
      populate(j, true, true);
      break;
    case JobKind::kRestore:
      populate(j, false, true);
      break;
    case JobKind::kDecodePending:
      // QKV->QA: "decoding without prefilling" (4.3.3): decode from the pending query's stored slices.
      populate(j, false, false);
      break;
    case JobKind::kRefresh:
      // Re-retrieve over the current knowledge bank, prefill (reusing cached slices), decode if answered.
      add(Step{Step::kRetrieve}, cfg.retrieval_ms / 1e3);
      j.chunks = retrieve_present(j.text, j.embedding, static_cast<std::size_t>(cfg.top_k));
      j.have_chunks = true;
      j.chunks_at_s = now_s();
      j.answer = proxy_answer(j.chunks);
      populate(j, false, true);
      break;
    case JobKind::kAbstract: {
      const auto& b = abstract_.batches[j.batch];
      std::vector<std::string> texts;
      for (auto c : b.chunks) texts.push_back(pipe_->user().chunks.at(static_cast<std::size_t>(c)).text);
      const std::int64_t out = std::max<std::int64_t>(8, count_tokens(traces::join(b.items, "; ")));
      llm(count_tokens(abstract_prompt(texts)), out, "abstract");
      break;
    }
    case JobKind::kKnowledge:
    case JobKind::kHistory:
    case JobKind::kRaw: {
      const auto qs = predict(j);
      std::string prompt;
      if (j.kind == JobKind::kKnowledge) {
        prompt = knowledge_prediction_prompt(o_.knowledge_type, traces::join(abstract_items_, "; "),
                                             static_cast<int>(o_.stride));
      } else if (j.kind == JobKind::kHistory) {
        prompt = history_prediction_prompt(o_.knowledge_type, context().history, static_cast<int>(o_.stride));
      } else {
        std::vector<std::string> texts;
        for (auto c : j.chunks) texts.push_back(pipe_->user().chunks.at(static_cast<std::size_t>(c)).text);
        prompt = knowledge_prediction_prompt(o_.knowledge_type, traces::join(texts, "\n"), static_cast<int>(o_.stride));
      }
      llm(count_tokens(prompt), std::max<std::int64_t>(1, count_tokens(prediction_output(qs))), "predict");
      break;
    }
  }
  return plan;
}

void CachingPolicy::commit_job(Job& j) {
  auto insert_tree = [&](const std::vector<std::int32_t>& chunks) {
    if (tree_) tree_->insert(root_slice(), slices(chunks));
  };
  switch (j.kind) {
    case JobKind::kStore:
      if (j.fill_kv) insert_tree(j.chunks);
      if (j.fill_qa && bank_) {
        QaEntry e;
        e.query = j.text;
        e.embedding = j.embedding;
        e.answer = j.answer;
        e.answered = true;
        e.answer_tokens = j.answer_tokens;
        e.chunks = j.chunks;
        e.chunks_at_s = j.chunks_at_s;
        bank_->insert(std::move(e));
      }
      break;
    case JobKind::kAnswer:
    case JobKind::kPopulate: {
      if (j.fill_kv) insert_tree(j.chunks);
      if (j.fill_qa && bank_) {
        QaEntry e;
        e.query = j.text;
        e.embedding = j.embedding;
        e.answered = j.decode;
        if (j.decode) e.answer = j.answer;
        e.answer_tokens = j.answer_tokens;
        e.chunks = j.chunks;
        e.chunks_at_s = j.chunks_at_s;
        e.predicted = j.predicted;
        bank_->insert(std::move(e));
      }
      if (j.predicted) ++predicted_;
      break;
    }
    case JobKind::kRestore:
      insert_tree(j.chunks);
      ++conv_qa_to_qkv_;
      break;
    case JobKind::kDecodePending:
      if (bank_->answer(j.qa_id, j.answer, j.answer_tokens)) ++conv_qkv_to_qa_;
      break;
    case JobKind::kRefresh:
      if (j.fill_kv) insert_tree(j.chunks);
      if (bank_->refresh(j.qa_id, j.chunks, j.chunks_at_s, j.decode, j.answer, j.answer_tokens)) ++refreshed_;
      break;
    case JobKind::kAbstract: {
      const auto& items = abstract_.batches[j.batch].items;
      abstract_items_.insert(abstract_items_.end(), items.begin(), items.end());
      break;
    }
    case JobKind::kKnowledge:
    case JobKind::kHistory:
    case JobKind::kRaw: {
      // The predicted queries are populated next, in order, ahead of other queued work.
      const bool raw = j.kind == JobKind::kRaw;
      std::vector<Job> pops;
      for (const auto& text : j.questions) {
        Job p{JobKind::kPopulate};
        p.text = text;
        p.predicted = true;
        p.fill_kv = o_.predictions_fill_kv && tree_ != nullptr && !raw;
        p.fill_qa = o_.predictions_fill_qa && bank_ != nullptr;
        p.decode = p.fill_qa && !prefill_only();
        p.answer_tokens = o_.predicted_answer_tokens;
        pops.push_back(std::move(p));
      }
      for (auto it = pops.rbegin(); it != pops.rend(); ++it) jobs_.push_front(std::move(*it));
      break;
    }
  }
}

std::size_t CachingPolicy::front_insert_position() const {
  // After the population of the query just served (its tensors are still in memory).
  std::size_t i = 0;
  while (i < jobs_.size() && (jobs_[i].kind == JobKind::kStore || jobs_[i].kind == JobKind::kAnswer)) ++i;
  return i;
}

// Whether any QA entry could be restored into the tree's free space: each needs at least its
// last chunk's slice (see add_conversion_jobs), so when none fits, ranking the bank is skipped.
bool CachingPolicy::any_restore_may_fit() const {
  const double free = tree_->free_bytes();
  for (const auto& e : bank_->entries())
    if (!e.chunks.empty() && slice_bytes(e.chunks.back()) <= free && !restore_attempted_.contains(e.id)) return true;
  return false;
}

void CachingPolicy::add_conversion_jobs() {
  if (!bank_ || !o_.scheduler || !o_.conversions) return;
  for (const auto& j : jobs_)
    if (j.kind == JobKind::kDecodePending || j.kind == JobKind::kRestore) return;  // still converting
  std::vector<Job> conv;
  // QKV -> QA: decode the queries stored prefill-only, once tau_query is at or below the cutoff.
  if (!prefill_only()) {
    for (const auto& e : bank_->entries()) {
      if (e.answered) continue;
      Job j{JobKind::kDecodePending};
      j.text = e.query;
      j.embedding = e.embedding;
      j.chunks = e.chunks;
      j.have_chunks = true;
      j.qa_id = e.id;
      j.answer_tokens = std::max<std::int64_t>(e.answer_tokens, o_.predicted_answer_tokens);
      j.query_tokens = tokenizer_ ? count_tokens(e.query) : 16;
      j.answer = proxy_answer(e.chunks);
      j.decode = true;
      conv.push_back(std::move(j));
    }
  }
  // QA -> QKV: restore the slices of QA entries evicted from the tree while they fit in the free
  // space (no eviction): most-hit entries first, real queries before predicted ones, newest first.
  if (tree_ && any_restore_may_fit()) {
    std::vector<const QaEntry*> order;
    for (const auto& e : bank_->entries()) order.push_back(&e);
    std::stable_sort(order.begin(), order.end(), [](const QaEntry* a, const QaEntry* b) {
      if (a->hits != b->hits) return a->hits > b->hits;
      if (a->predicted != b->predicted) return !a->predicted;
      return a->inserted > b->inserted;
    });
    double free = tree_->free_bytes();
    for (const QaEntry* e : order) {
      if (e->chunks.empty()) continue;
      // An entry not wholly in the tree needs at least its last chunk's slice: when even that
      // does not fit, it is skipped whatever the match (the common case once the cache is full).
      if (slice_bytes(e->chunks.back()) > free) continue;
      if (restore_attempted_.contains(e->id)) continue;
      const KvMatch m = tree_->match(e->chunks);
      if (m.chunks == static_cast<std::int64_t>(e->chunks.size())) continue;
      double need = m.nodes.empty() ? root_slice().bytes : 0.0;
      std::size_t from = static_cast<std::size_t>(m.chunks);
      if (o_.boundary_rules && from > 0 && from < e->chunks.size()) --from;
      for (std::size_t i = from; i < e->chunks.size(); ++i) need += slice_bytes(e->chunks[i]);
      if (need > free) continue;
      free -= need;
      restore_attempted_.insert(e->id);
      Job j{JobKind::kRestore};
      j.text = e->query;
      j.chunks = e->chunks;
      j.have_chunks = true;
      j.query_tokens = tokenizer_ ? count_tokens(e->query) : 16;
      j.fill_kv = true;
      j.decode = false;
      conv.push_back(std::move(j));
    }
  }
  const auto at = jobs_.begin() + static_cast<std::ptrdiff_t>(front_insert_position());
  jobs_.insert(at, std::make_move_iterator(conv.begin()), std::make_move_iterator(conv.end()));
}

void CachingPolicy::apply_schedule() {
  while (schedule_applied_ < o_.schedule.size() && served_ >= o_.schedule[schedule_applied_].after_query) {
    const auto& c = o_.schedule[schedule_applied_++];
    if (c.tau_query) o_.tau_query = *c.tau_query;
    if (c.scheduler) o_.scheduler = *c.scheduler;
    if (c.conversions) o_.conversions = *c.conversions;
    if (c.storage_limit_gb) {
      o_.storage_limit_gb = *c.storage_limit_gb;
      if (tree_) tree_->set_limit(o_.storage_limit_gb * 1e9);
      restore_attempted_.clear();
    }
    if (schedule_listener_) schedule_listener_(c);
  }
}

sim::Task<void> CachingPolicy::idle(RagPipeline& p, sim::Time until) {
  apply_schedule();
  if (!started_) {
    started_ = true;
    const sim::Time quiet = p.sim().now() + sim::from_seconds(o_.abstract_quiet_s);
    // Chunks already present are part of the initial abstract; later ones are noticed by poll_new_chunks.
    const auto present_ids = present_chunks();
    while (late_seen_ < late_.size() &&
           present(p.user(), static_cast<std::size_t>(late_[late_seen_])))
      ++late_seen_;
    if (o_.knowledge_prediction) {
      abstract_ = build_abstract(p.user(), *phrases_, o_.abstract_source, static_cast<std::size_t>(o_.abstract_batch_chunks),
                                 present_ids);
      for (std::size_t b = 0; b < abstract_.batches.size(); ++b) {
        schedule_job(JobKind::kAbstract, quiet, b);
      }
      for (std::int64_t r = 0; r < o_.knowledge_rounds; ++r) {
        schedule_job(JobKind::kKnowledge, quiet);
      }
    }
    for (std::int64_t r = 0; o_.raw_context_prediction && r < o_.raw_rounds_initial; ++r) {
      schedule_job(JobKind::kRaw, quiet);
    }
  }
  const auto& windows = p.user().idle_windows;
  const std::uint64_t generation = idle_generation_;
  while (true) {
    if (generation != idle_generation_) co_return;  // interrupted while it waited
    poll_new_chunks();
    // Conversions (once turned on they execute automatically, 4.3.3) use the idle time that the
    // population and prediction work leaves: they are queued when no other job may start now, so
    // they never push back a prediction that is due (they may still run while one waits for its
    // quiet period).
    if (std::none_of(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.not_before <= p.sim().now(); }))
      add_conversion_jobs();
    if (jobs_.empty()) {
      // Nothing to do until the next chunk joins the knowledge bank (if before the next query).
      if (late_seen_ < late_.size()) {
        const sim::Time next =
            sim::from_seconds(p.user().chunks[static_cast<std::size_t>(late_[late_seen_])].added_s);
        if (next < until) {
          if (next > p.sim().now()) co_await p.sim().timeout(next - p.sim().now());
          continue;
        }
      }
      break;
    }
    // The first job in queue order that may start now; else the earliest one.
    std::size_t pick = jobs_.size();
    sim::Time earliest = std::numeric_limits<sim::Time>::max();
    std::size_t earliest_i = 0;
    for (std::size_t i = 0; i < jobs_.size(); ++i) {
      if (jobs_[i].not_before <= p.sim().now()) {
        pick = i;
        break;
      }
      if (jobs_[i].not_before < earliest) {
        earliest = jobs_[i].not_before;
        earliest_i = i;
      }
    }
    sim::Time start = p.sim().now();
    if (pick == jobs_.size()) {
      pick = earliest_i;
      start = earliest;
    }
    sim::Time window_end = until;
    if (o_.charging_only) {
      bool found = false;
      for (const auto& w : windows) {
        if (!w.charging) continue;
        const sim::Time ws = sim::from_seconds(w.start_s), we = sim::from_seconds(w.end_s);
        if (we <= start) continue;
        start = std::max(start, ws);
        window_end = std::min(until, we);
        found = true;
        break;
      }
      if (!found) break;
    }
    if (start >= window_end) break;
    // Planned in place: the queue keeps what planning prepared (predicted texts, retrieval) also
    // when the job does not fit now. Nothing below touches jobs_ until the job is taken out.
    const Plan plan = plan_job(jobs_[pick]);
    const sim::Time need = sim::from_seconds(plan.seconds * 1.02 + 0.5);
    if (start + need > window_end) {
      if (o_.charging_only && window_end < until) {
        // Try the next charging window.
        co_await p.sim().timeout(window_end - p.sim().now());
        continue;
      }
      break;  // does not fit before the next query: it waits for the next idle period
    }
    if (start > p.sim().now()) co_await p.sim().timeout(start - p.sim().now());
    if (generation != idle_generation_) co_return;
    if (!p.device().background_allowed()) {
      // No thermal headroom or a low battery (devices/power_manager.h; never with thermal: none):
      // the job stays queued; look again later in this idle period.
      ++deferred_;
      const sim::Time again = p.sim().now() + sim::from_seconds(o_.background_recheck_s);
      if (again >= window_end) break;
      co_await p.sim().timeout(again - p.sim().now());
      continue;
    }
    Job job = std::move(jobs_[pick]);
    jobs_.erase(jobs_.begin() + static_cast<std::ptrdiff_t>(pick));
    for (const auto& s : plan.steps) {
      bool whole = generation == idle_generation_;  // false: interrupted before this step
      if (whole) co_await run_idle_step(p, s, generation, whole);  // false: interrupted within its decode
      if (!whole) {
        // The job is left undone (its steps so far were charged) and runs again, from the start, in
        // a later idle period, after the work of the query that interrupted it.
        jobs_.insert(jobs_.begin() + static_cast<std::ptrdiff_t>(front_insert_position()), std::move(job));
        co_return;
      }
    }
    ++p.background_jobs();
    commit_job(job);
  }
}

void CachingPolicy::schedule_job(JobKind kind, sim::Time not_before, std::size_t batch) {
  Job j{kind};
  j.not_before = not_before;
  j.batch = batch;
  jobs_.push_back(std::move(j));
}

}  // namespace mobisim::policies
