#include "policies/apps/rag_app.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/error.h"
#include "sim/registry.h"

namespace mobisim::policies {

ParamSchema RagApp::schema() {
  ParamSchema s;
  add_app_params(s);
  s.node("model", "model: built-in name, YAML path, or {base: NAME, field: override}");
  s.node("pipeline", "RAG pipeline settings: compute_unit, system_prompt_tokens, top_k, answer_tokens, ...");
  s.node("policy", "the RAG policy: {impl: naive|percache|ragcache|meancache|sleeptime|..., ...}");
  s.node("workload", "{trace: FILE.h5} or {generate: default|PATH|{...}}");
  s.text("user", std::string(""), "user id replayed (empty: the workload's first user)");
  s.integer("max_queries", 0, "replay only the first N queries (0: all)").non_negative();
  s.real("interarrival_s", 0.0,
         "re-time the queries: query i arrives at start_s + i x interarrival_s (0: the workload's own arrivals)")
      .non_negative()
      .with_unit("s");
  return s;
}

namespace {
PipelineConfig pipeline_of(const Params& p) {
  ParamSchema ps = PipelineConfig::schema();
  return PipelineConfig::from_params(Params(p.node("pipeline"), ps, p.source_of("pipeline"), {}));
}
}  // namespace

RagApp::RagApp(const Params& p)
    : App(p),
      cost_(models::load_model_spec(p.node("model"), p.source_of("model"))),
      pipeline_(pipeline_of(p)),
      workload_(yaml_clone(p.node("workload"))),
      workload_source_(p.source_of("workload")),
      user_id_(p.text("user")),
      max_queries_(p.integer("max_queries")),
      interarrival_s_(p.real("interarrival_s")),
      resolved_(p.resolved()) {
  const YAML::Node policy = p.node("policy");
  if (!policy.IsDefined() || policy.IsNull()) p.fail("policy", "missing: {impl: NAME, ...} of a RAG policy");
  policy_ = Registry<RagPolicy>::instance().create(policy, p.source_of("policy"));
  stages_ = pipeline_stages_for(policy, p.source_of("policy"), pipeline_);
  resolved_["model"] = yaml_clone(cost_.spec().resolved);
  ParamSchema ps = PipelineConfig::schema();
  resolved_["pipeline"] = Params(p.node("pipeline"), ps, p.source_of("pipeline"), {}).resolved();
  resolved_["policy"] = Registry<RagPolicy>::instance().resolve(policy, p.source_of("policy"));
  served_by_ = stages_app(p);
}

// The policy's stages as a `pipeline` app with this app's model, priority, start and re-timing;
// its workload is the user prepare() picks (a placeholder here).
std::unique_ptr<PipelineApp> RagApp::stages_app(const Params& p) const {
  YAML::Node node = yaml_clone(stages_.app);
  node["impl"] = "pipeline";
  for (const char* key : {"priority", "start_s", "background_recheck_s", "background_max_wait_s", "max_queries",
                          "interarrival_s"})
    node[key] = yaml_clone(resolved_[key]);
  node["model"] = yaml_clone(cost_.spec().resolved);
  node["workload"] = YAML::Load("{generate: default}");  // prepare() gives the app its user
  std::unique_ptr<App> app = Registry<App>::instance().create(node, p.source_of("policy"));
  auto* stages = dynamic_cast<PipelineApp*>(app.get());
  if (!stages) throw Error("internal: the registered `pipeline` app is not a PipelineApp");
  app.release();
  return std::unique_ptr<PipelineApp>(stages);
}

void RagApp::prepare(const AppEnvironment& env) {
  if (!env.rag_workload) throw Error("internal: the rag app needs a RAG workload loader");
  if (env.device)
    for (const auto* unit : {&pipeline_.compute_unit, &pipeline_.prefill_unit, &pipeline_.decode_unit})
      env.device->require_engine_values(*unit, cost_.spec(), "rag app pipeline (compute_unit, prefill_unit, decode_unit)");
  const traces::RagTrace trace = env.rag_workload(workload_, workload_source_);
  traces::RagTrace one;
  one.meta = trace.meta;
  one.users.push_back(pick_user(trace, user_id_, workload_source_.where(workload_)));
  // The user as served: the first max_queries queries, re-timed. The policy checks it first (its
  // own errors for a workload it cannot serve).
  traces::RagTrace retimed = one;
  traces::UserTrace& u = retimed.users.front();
  if (max_queries_ > 0 && u.queries.size() > static_cast<std::size_t>(max_queries_))
    u.queries.resize(static_cast<std::size_t>(max_queries_));
  for (std::size_t i = 0; i < u.queries.size(); ++i)
    u.queries[i].arrival_s = start_s() + (interarrival_s_ > 0 ? static_cast<double>(i) * interarrival_s_
                                                               : u.queries[i].arrival_s);
  policy_->check_workload(retimed, cost_);
  user_ = std::move(u);
  // The stages app picks the same queries and re-times them itself (it has this app's keys).
  AppEnvironment inner = env;
  inner.rag_workload = [&one](const YAML::Node&, const ConfigSource&) { return one; };
  served_by_->prepare(inner);
}

std::vector<std::pair<std::string, double>> RagApp::resident_dram() const {
  return {{"weights", cost_.spec().weight_bytes()}};
}

sim::Task<void> RagApp::run(devices::Device& device, std::string owner, sim::StatGroup& stats) {
  device.profile().require_unit(pipeline_.compute_unit, "rag app pipeline.compute_unit");
  co_await served_by_->run(device, owner, stats);
  const double embed_ms = embed_in_retrieval_ms(stages_, pipeline_);
  for (const pipeline::Served& s : served_by_->served()) {
    records_.push_back(record_of_served(s, user_, embed_ms));
    if (auto* timeline = device.timeline())
      timeline->span("queries", fmt::format("query {}#{}", user_.user_id, s.times.request),
                     sim::from_seconds(s.times.arrival_s), sim::from_seconds(s.times.end_s), "query");
  }
}

namespace {
// A query's record as the times every app reports: its first token comes with the prefill's
// logits, i.e. once everything before decoding is done.
RequestTimes times_of(const QueryRecord& r) {
  return RequestTimes{r.query_index, r.answer_tokens, r.arrival_s, r.start_s, r.end_s - r.decode_s, r.end_s,
                      r.active_energy_j};
}
}  // namespace

void RagApp::records(h5::Table& out) const {
  std::vector<RequestTimes> times;
  std::vector<std::int64_t> prompt, qa_hit;
  std::vector<double> prefill, decode, load;
  for (const QueryRecord& r : records_) {
    times.push_back(times_of(r));
    prefill.push_back(r.prefill_s);
    decode.push_back(r.decode_s);
    load.push_back(r.load_s);
    prompt.push_back(r.prompt_tokens);
    qa_hit.push_back(r.qa_hit ? 1 : 0);
  }
  add_request_columns(out, times);
  out.add("prefill_s", prefill, "s");
  out.add("decode_s", decode, "s");
  out.add("load_s", load, "s");
  out.add("prompt_tokens", prompt, "tokens");
  out.add("qa_hit", qa_hit, "bool");
}

AppTotals RagApp::totals() const {
  AppTotals a;
  for (const QueryRecord& r : records_) a.add(times_of(r));
  return a;
}

MOBISIM_REGISTER(App, RagApp, "rag",
                 "A RAG assistant: one user's queries served by any RAG policy (PerCache, RAGCache, ...) on the shared phone.")

}  // namespace mobisim::policies
