#include "policies/apps/pipeline_app.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "sim/error.h"
#include "sim/registry.h"
#include "traces/metrics.h"

namespace mobisim::policies {

using namespace pipeline;  // the stages this app fills (policies/pipeline/)

ParamSchema PipelineApp::schema() {
  ParamSchema s;
  add_app_params(s);
  s.node("model", "model: built-in name, YAML path, or {base: NAME, field: override}");
  s.text("unit", std::string("cpu"), "compute unit that recomputes, prefills and decodes (cpu, gpu, npu, ...)");
  s.node("workload", "{trace: FILE.h5} or {generate: default|PATH|{...}} (queries with precomputed retrieval)");
  s.node("conversation",
         "instead of `workload`: one chat conversation {turns, prompt_tokens, answer_tokens}; turn i's prompt is "
         "the system prompt, every earlier turn (its prompt and answer) and its own prompt_tokens, one turn every "
         "interarrival_s");
  s.text("user", std::string(""), "user id replayed (empty: the workload's first user)");
  s.integer("max_queries", 0, "replay only the first N queries (0: all)").non_negative();
  s.real("interarrival_s", 0.0, "query i arrives at start_s + i x interarrival_s (0: the workload's arrivals)")
      .non_negative()
      .with_unit("s");
  s.integer("system_prompt_tokens", 64, "tokens of the system prompt that opens every prompt").non_negative();
  s.integer("top_k", 3, "retrieved chunks placed in the prompt, best first").range(0, 1024);
  s.integer("answer_tokens", 0, "> 0: every answer has this length (0: the workload's)").non_negative();
  s.real("retrieval_ms", 0.0, "fixed cost of retrieving a query's context on `unit`, after an answer-cache miss "
         "(PerCache Table 1: 3940 ms)")
      .non_negative()
      .with_unit("ms");
  s.real("kv_match_ms", 0.0, "fixed cost of matching the prompt against the KV-reuse stage's store on `unit` "
         "(PerCache Table 1: 15 ms)")
      .non_negative()
      .with_unit("ms");
  s.node("kv_reuse", "KV-reuse stage: {impl: none|prefix_store|chunk_tree, ...} (default none)");
  s.node("answer_cache", "answer-cache stage: {impl: semantic, tau_query, embed_ms, match_ms, ...} (default: none)");
  s.node("prefill", "prefill stage: {impl: unit|npu_graphs|qkv_reuse|coordgen, ...} (default: one pass on `unit`; "
                    "coordgen: the speculative decode stage's policy's own prefill)");
  s.node("decode", "decode stage: {impl: vanilla|speculative, ...} (default: vanilla, one token per step on `unit`)");
  s.node("kv_residency", "KV-residency stage: {impl: dram|dynakv, ...} (default: dram, all K/V in DRAM)");
  s.node("idle", "idle-work stage between requests: {impl: prefetch|percache_scheduler|sleeptime, ...} (default: none)");
  s.node("load_or_recompute",
         "how stored K/V comes back: {impl: always_load|always_recompute|cake|kvpr_ilp|kvpr_closed_form, ...} "
         "(default always_load)");
  return s;
}

namespace {
// The `conversation` workload's three numbers (all zero when it is not given).
PipelineApp::Conversation conversation_of(const Params& p) {
  if (!p.has("conversation")) {
    if (!p.has("workload")) p.fail("workload", "give a RAG workload ({trace|generate}) or a `conversation`");
    return {};
  }
  if (p.has("workload")) p.fail("conversation", "give either `workload` or `conversation`, not both");
  ParamSchema s;
  s.integer("turns", std::nullopt, "turns of the conversation").range(1, 1 << 20);
  s.integer("prompt_tokens", 128, "new tokens the user sends per turn").range(1, 1 << 20);
  s.integer("answer_tokens", 256, "tokens of every answer").range(1, 1 << 20);
  const Params c(p.node("conversation"), s, p.source_of("conversation"), {});
  if (p.real("interarrival_s") <= 0) p.fail("interarrival_s", "a conversation needs the time between turns (> 0)");
  return {c.integer("turns"), c.integer("prompt_tokens"), c.integer("answer_tokens")};
}

YAML::Node or_default(const Params& p, const std::string& key, const char* impl) {
  return p.has(key) ? yaml_clone(p.node(key)) : YAML::Load(fmt::format("{{impl: {}}}", impl));
}
}  // namespace

PipelineApp::PipelineApp(const Params& p)
    : App(p),
      cost_(models::load_model_spec(p.node("model"), p.source_of("model"))),
      unit_(p.text("unit")),
      workload_(yaml_clone(p.node("workload"))),
      conversation_(conversation_of(p)),
      workload_source_(p.source_of("workload")),
      user_id_(p.text("user")),
      max_queries_(p.integer("max_queries")),
      system_prompt_tokens_(p.integer("system_prompt_tokens")),
      top_k_(p.integer("top_k")),
      answer_tokens_(p.integer("answer_tokens")),
      interarrival_s_(p.real("interarrival_s")),
      retrieval_ms_(p.real("retrieval_ms")),
      kv_match_ms_(p.real("kv_match_ms")),
      resolved_(p.resolved()) {
  const YAML::Node reuse = or_default(p, "kv_reuse", "none");
  const YAML::Node split = or_default(p, "load_or_recompute", "always_load");
  YAML::Node prefill = or_default(p, "prefill", "unit");
  if (prefill.IsMap() && prefill["impl"] && (prefill["impl"].Scalar() == "unit" || prefill["impl"].Scalar() == "qkv_reuse") &&
      !prefill["unit"])
    prefill["unit"] = unit_;
  YAML::Node decode = or_default(p, "decode", "vanilla");
  if (decode.IsMap() && decode["impl"] && decode["impl"].Scalar() == "vanilla" && !decode["unit"]) decode["unit"] = unit_;
  const YAML::Node residency = or_default(p, "kv_residency", "dram");
  PipelineOptions options;
  options.unit = unit_;
  options.priority = priority();
  options.retrieval_ms = p.real("retrieval_ms");
  options.kv_match_ms = p.real("kv_match_ms");
  // A store of Q/K/V slices (chunk_tree's payload: qkv) is read back at that weight.
  const YAML::Node reuse_keys = Registry<KvReuse>::instance().resolve(reuse, p.source_of("kv_reuse"));
  if (reuse_keys.IsMap() && reuse_keys["payload"] && reuse_keys["payload"].IsScalar() &&
      reuse_keys["payload"].Scalar() == "qkv")
    options.payload = kvsplit::Payload::kQkv;
  pipeline_ = std::make_unique<Pipeline>(
      cost_, options,
      Registry<KvReuse>::instance().create(reuse, p.source_of("kv_reuse")),
      Registry<kvsplit::KvSplitStrategy>::instance().create(split, p.source_of("load_or_recompute")),
      Registry<PrefillStage>::instance().create(prefill, p.source_of("prefill")),
      p.has("answer_cache") ? Registry<AnswerCache>::instance().create(p.node("answer_cache"), p.source_of("answer_cache"))
                            : nullptr,
      Registry<DecodeStage>::instance().create(decode, p.source_of("decode")),
      Registry<KvResidency>::instance().create(residency, p.source_of("kv_residency")),
      p.has("idle") ? Registry<IdleStage>::instance().create(p.node("idle"), p.source_of("idle")) : nullptr);
  if (p.has("idle")) {
    resolved_["idle"] = Registry<IdleStage>::instance().resolve(p.node("idle"), p.source_of("idle"));
    idle_source_ = p.source_of("idle").where(p.node("idle"));
  }
  resolved_["decode"] = Registry<DecodeStage>::instance().resolve(decode, p.source_of("decode"));
  resolved_["kv_residency"] = Registry<KvResidency>::instance().resolve(residency, p.source_of("kv_residency"));
  resolved_["prefill"] = Registry<PrefillStage>::instance().resolve(prefill, p.source_of("prefill"));
  for (const char* stage : {"prefill", "decode"}) {
    const YAML::Node n = resolved_[stage];
    if (!n.IsMap()) continue;
    const std::string impl = n["impl"] && n["impl"].IsScalar() ? n["impl"].Scalar() : std::string();
    if (impl == "npu_graphs") stage_units_.emplace_back("npu", false);
    if (impl == "speculative" || impl == "coordgen") {
      stage_units_.emplace_back("npu", false);
      stage_units_.emplace_back("cpu", true);
    }
    if (n["unit"] && n["unit"].IsScalar()) stage_units_.emplace_back(n["unit"].Scalar(), false);
  }
  if (p.has("answer_cache"))
    resolved_["answer_cache"] = Registry<AnswerCache>::instance().resolve(p.node("answer_cache"), p.source_of("answer_cache"));
  resolved_["model"] = yaml_clone(cost_.spec().resolved);
  resolved_["kv_reuse"] = Registry<KvReuse>::instance().resolve(reuse, p.source_of("kv_reuse"));
  resolved_["load_or_recompute"] =
      Registry<kvsplit::KvSplitStrategy>::instance().resolve(split, p.source_of("load_or_recompute"));
}

// The user's queries as requests: system prompt, the top-k retrieved chunks (best first), the query.
void PipelineApp::prepare(const AppEnvironment& env) {
  if (env.device) {
    env.device->require_engine_values(unit_, cost_.spec(), "pipeline app 'unit'");
    for (const auto& [u, attention] : stage_units_)
      env.device->require_engine_values(u, cost_.spec(), "pipeline app's prefill/decode stage",
                                        attention ? std::vector<models::DType>{cost_.spec().activation_dtype}
                                                  : std::vector<models::DType>{});
  }
  if (conversation_.turns > 0) {
    if (pipeline_->idle_stage_needs_rag_workload())
      throw ConfigError(fmt::format("{}: the idle stage '{}' reads the texts of a RAG workload (its predictions and "
                                    "retrievals): give the pipeline app a `workload:`, not a `conversation:`",
                                    idle_source_, resolved_["idle"]["impl"].Scalar()));
    return prepare_conversation();
  }
  if (!env.rag_workload) throw Error("internal: the pipeline app needs a RAG workload loader");
  const traces::RagTrace trace = env.rag_workload(workload_, workload_source_);
  const traces::UserTrace& u = pick_user(trace, user_id_, workload_source_.where(workload_));
  std::size_t n = u.queries.size();
  if (max_queries_ > 0) n = std::min(n, static_cast<std::size_t>(max_queries_));
  requests_.clear();
  for (std::size_t i = 0; i < n; ++i) {
    const double arrival_s =
        start_s() + (interarrival_s_ > 0 ? static_cast<double>(i) * interarrival_s_ : u.queries[i].arrival_s);
    requests_.push_back(pipeline::rag_request(u, i, arrival_s, RagLayout{system_prompt_tokens_, top_k_, answer_tokens_},
                                              workload_source_.where(workload_)));
  }
  set_next_arrivals();
  if (pipeline_->has_idle_stage())
    pipeline_->use_workload(idle_workload(trace, u, n, env.knowledge_index ? env.knowledge_index(u) : nullptr));
}

Request pipeline::rag_request(const traces::UserTrace& u, std::size_t i, double arrival_s, const RagLayout& layout,
                              const std::string& where) {
  const traces::Query& q = u.queries.at(i);
  if (layout.top_k > 0 && q.retrieved.empty())
    throw ConfigError(fmt::format("{}: query {} of user '{}' carries no precomputed retrieval (the pipeline app reads "
                                  "the workload's retrieved chunk ids); generate or import it with retrieval",
                                  where, i, u.user_id));
  Request r;
  r.id = static_cast<std::int64_t>(i);
  r.arrival_s = arrival_s;
  if (layout.system_prompt_tokens > 0) r.prompt.push_back({"system", 0x5157E1ULL, layout.system_prompt_tokens});
  r.chunks_at = r.prompt.size();
  r.top_k = layout.top_k;
  if (layout.top_k > 0)
    for (const std::int32_t id : q.retrieved) {
      if (id < 0 || static_cast<std::size_t>(id) >= u.chunks.size())
        throw InputError(fmt::format("{}: query {} retrieves chunk {} of {}", where, i, id, u.chunks.size()));
      const traces::Chunk& c = u.chunks[static_cast<std::size_t>(id)];
      r.ranked.push_back({id, c.tokens, c.added_s});
    }
  r.prompt.push_back({"query", 0x9E000000000ULL + i, std::max<std::int64_t>(1, q.tokens)});
  retrieve_at(r, sim::from_seconds(arrival_s));  // the chunks there at its arrival, until it is served
  r.output_tokens = std::max<std::int64_t>(1, layout.answer_tokens > 0 ? layout.answer_tokens : q.answer_tokens);
  r.embedding = q.embedding;
  r.answer_text = q.answer_text;
  return r;
}

// The replay knows when each request's successor is due (none after the last).
void PipelineApp::set_next_arrivals() {
  for (std::size_t i = 0; i < requests_.size(); ++i)
    requests_[i].next_arrival_s =
        i + 1 < requests_.size() ? requests_[i + 1].arrival_s : std::numeric_limits<double>::infinity();
}

// The user's first `n` queries, arriving when the app issues them, with the app's prompt layout:
// what the idle stage reads (query prediction reads the texts).
std::shared_ptr<const IdleWorkload> PipelineApp::idle_workload(
    const traces::RagTrace& trace, const traces::UserTrace& u, std::size_t n,
    std::shared_ptr<const KnowledgeIndex> knowledge) const {
  auto w = std::make_shared<IdleWorkload>();
  w->knowledge = std::move(knowledge);
  w->trace.meta = trace.meta;
  w->trace.users.push_back(u);
  traces::UserTrace& mine = w->trace.users.front();
  mine.queries.resize(n);
  for (std::size_t i = 0; i < n; ++i) mine.queries[i].arrival_s = requests_[i].arrival_s;
  w->unit = unit_;
  w->priority = priority();
  w->system_prompt_tokens = system_prompt_tokens_;
  w->top_k = top_k_;
  w->answer_tokens = answer_tokens_;
  w->retrieval_ms = retrieval_ms_;
  w->kv_match_ms = kv_match_ms_;
  return w;
}

// Turn i: the system prompt, every earlier turn's prompt and answer, then its own prompt. A turn's
// prompt has the same key in every later request, so each prompt is a prefix of the next one's.
void PipelineApp::prepare_conversation() {
  requests_.clear();
  for (std::int64_t i = 0; i < conversation_.turns; ++i) {
    Request r;
    r.id = i;
    r.arrival_s = start_s() + static_cast<double>(i) * interarrival_s_;
    if (system_prompt_tokens_ > 0) r.prompt.push_back({"system", 0x5157E1ULL, system_prompt_tokens_});
    for (std::int64_t j = 0; j < i; ++j) {
      r.prompt.push_back({"history", 0xC0A7000000ULL + static_cast<std::uint64_t>(j), conversation_.prompt_tokens});
      r.prompt.push_back({"answer", 0xA5000000000ULL + static_cast<std::uint64_t>(j), conversation_.answer_tokens});
    }
    r.prompt.push_back({"query", 0xC0A7000000ULL + static_cast<std::uint64_t>(i), conversation_.prompt_tokens});
    r.output_tokens = conversation_.answer_tokens;
    r.kv_session = 0;  // the app's one conversation
    r.kv_session_ends = i + 1 == conversation_.turns;
    requests_.push_back(std::move(r));
  }
  set_next_arrivals();
}

std::vector<std::pair<std::string, double>> PipelineApp::resident_dram() const {
  return {{"weights", cost_.spec().weight_bytes()}};
}

sim::Task<void> PipelineApp::run(devices::Device& device, std::string owner, sim::StatGroup& stats) {
  (void)stats;
  device.profile().require_unit(unit_, "pipeline app 'unit'");
  co_await pipeline_->start(device, owner);
  sim::Simulator& sim = device.sim();
  const std::string kv_owner = owner + "/kv";
  for (const Request& r : requests_) {
    const sim::Time arrival = sim::from_seconds(r.arrival_s);
    if (sim.now() < arrival) co_await sim.timeout(arrival - sim.now());
    co_await wait_for_headroom(device);  // a background app defers while the phone is hot or low
    Served out;
    co_await pipeline_->serve(device, kv_owner, r, out);
    served_.push_back(out);
  }
}

void PipelineApp::records(h5::Table& out) const {
  std::vector<RequestTimes> times;
  std::vector<std::int64_t> prompt, reused, recomputed, loaded, answer_hit, steps, prefetched, bg_jobs;
  std::vector<double> split, estimate, prefill, decode, stored, accepted, decode_estimate, kv_read, bg_s, bg_flops,
      bg_energy, embed, qa_match, retrieval, kv_match, rouge, bleu;
  std::vector<std::int64_t> stale, retrieved;
  for (const Served& s : served_) {
    embed.push_back(s.embed_s);
    qa_match.push_back(s.qa_match_s);
    retrieval.push_back(s.retrieval_s);
    kv_match.push_back(s.kv_match_s);
    retrieved.push_back(s.retrieved_chunks);
    stale.push_back(s.answer_stale ? 1 : 0);
    const traces::AnswerScore score = answer_score(s);
    rouge.push_back(score.rouge_l);
    bleu.push_back(score.bleu);
    times.push_back(s.times);
    prompt.push_back(s.prompt_tokens);
    answer_hit.push_back(s.answer_hit ? 1 : 0);
    reused.push_back(s.reused_tokens);
    recomputed.push_back(s.recomputed_tokens);
    loaded.push_back(s.loaded_tokens);
    split.push_back(s.split_s);
    estimate.push_back(s.split_estimate_s);
    prefill.push_back(s.prefill_s);
    decode.push_back(s.decode_s);
    stored.push_back(s.stored.bytes);
    steps.push_back(s.decode_steps);
    accepted.push_back(s.accepted_per_step);
    decode_estimate.push_back(s.decode_estimate_s);
    kv_read.push_back(s.kv_read_bytes);
    prefetched.push_back(s.prefetched_tokens);
    bg_s.push_back(s.idle_work.busy_s);
    bg_flops.push_back(s.idle_work.flops);
    bg_energy.push_back(s.idle_work.energy_j);
    bg_jobs.push_back(s.idle_work.jobs);
  }
  add_request_columns(out, times);
  out.add("prompt_tokens", prompt, "tokens");
  out.add("answer_hit", answer_hit, "bool");
  out.add("reused_tokens", reused, "tokens");
  out.add("recomputed_tokens", recomputed, "tokens");
  out.add("loaded_tokens", loaded, "tokens");
  out.add("split_s", split, "s");
  out.add("split_estimate_s", estimate, "s");
  out.add("prefill_s", prefill, "s");
  out.add("decode_s", decode, "s");
  out.add("stored_bytes", stored, "bytes");
  out.add("decode_steps", steps, "count");
  out.add("accepted_per_step", accepted, "tokens");
  out.add("decode_estimate_s", decode_estimate, "s");
  out.add("kv_read_bytes", kv_read, "bytes");
  out.add("prefetched_tokens", prefetched, "tokens");
  // The idle stage's background work in the idle time before each request (as the rag driver's bg_*).
  out.add("bg_s", bg_s, "s");
  out.add("bg_flops", bg_flops, "FLOP");
  out.add("bg_energy_j", bg_energy, "J");
  out.add("bg_jobs", bg_jobs, "count");
  // As the rag driver's records: the phases before the split (the answer cache's embedding and
  // matching, the fixed costs of retrieval and of matching the store), the chunks retrieved, and
  // the served answer's quality against the reference (a generated answer scores 1) and staleness.
  out.add("embed_s", embed, "s");
  out.add("qa_match_s", qa_match, "s");
  out.add("retrieval_s", retrieval, "s");
  out.add("kv_match_s", kv_match, "s");
  out.add("retrieved_chunks", retrieved, "count");
  out.add("answer_stale", stale, "bool");
  out.add("rouge_l", rouge, "F");
  out.add("bleu", bleu, "score");
}

traces::AnswerScore PipelineApp::answer_score(const Served& s) const {
  const auto i = static_cast<std::size_t>(s.times.request);
  const std::string& reference = i < requests_.size() ? requests_[i].answer_text : std::string();
  return traces::score_served_answer(s.served_answer, reference);
}

PipelineApp::AnswerQuality PipelineApp::answer_quality() const {
  AnswerQuality a;
  for (const Served& s : served_) {
    a.answer_hits += s.answer_hit ? 1 : 0;
    a.stale_hits += s.answer_stale ? 1 : 0;
    const traces::AnswerScore score = answer_score(s);
    a.mean_rouge_l += score.rouge_l;
    a.mean_bleu += score.bleu;
  }
  if (!served_.empty()) {
    a.mean_rouge_l /= static_cast<double>(served_.size());
    a.mean_bleu /= static_cast<double>(served_.size());
  }
  return a;
}

AppTotals PipelineApp::totals() const {
  AppTotals a;
  for (const Served& s : served_) a.add(s.times);
  return a;
}

MOBISIM_REGISTER(App, PipelineApp, "pipeline",
                 "Requests through the stage slots: answer_cache, kv_reuse, load_or_recompute (a kv_split_strategy), "
                 "prefill, decode, kv_residency, idle; a RAG workload or a chat conversation.")

}  // namespace mobisim::policies
