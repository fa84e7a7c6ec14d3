#include "policies/pipeline/pipeline_app.h"

#include <fmt/format.h>

#include <algorithm>

#include "policies/apps/decode_costs.h"
#include "policies/kvsplit/split_costs.h"
#include "sim/error.h"
#include "sim/event.h"
#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema PipelineApp::schema() {
  ParamSchema s;
  add_app_params(s);
  s.node("model", "model: built-in name, YAML path, or {base: NAME, field: override}");
  s.text("unit", std::string("cpu"), "compute unit that recomputes, prefills and decodes (cpu, gpu, npu, ...)");
  s.node("workload", "{trace: FILE.h5} or {generate: default|PATH|{...}} (queries with precomputed retrieval)");
  s.text("user", std::string(""), "user id replayed (empty: the workload's first user)");
  s.integer("max_queries", 0, "replay only the first N queries (0: all)").non_negative();
  s.real("interarrival_s", 0.0, "query i arrives at start_s + i x interarrival_s (0: the workload's arrivals)")
      .non_negative()
      .with_unit("s");
  s.integer("system_prompt_tokens", 64, "tokens of the system prompt that opens every prompt").non_negative();
  s.integer("top_k", 3, "retrieved chunks placed in the prompt, best first").range(0, 1024);
  s.integer("answer_tokens", 0, "> 0: every answer has this length (0: the workload's)").non_negative();
  s.node("kv_reuse", "KV-reuse stage: {impl: none|prefix_store, ...} (default none)");
  s.node("load_or_recompute",
         "how stored K/V comes back: {impl: always_load|always_recompute|cake|kvpr_ilp|kvpr_closed_form, ...} "
         "(default always_load)");
  return s;
}

namespace {
YAML::Node or_default(const Params& p, const std::string& key, const char* impl) {
  return p.has(key) ? yaml_clone(p.node(key)) : YAML::Load(fmt::format("{{impl: {}}}", impl));
}
}  // namespace

PipelineApp::PipelineApp(const Params& p)
    : App(p),
      cost_(models::load_model_spec(p.node("model"), p.source_of("model"))),
      unit_(p.text("unit")),
      workload_(yaml_clone(p.node("workload"))),
      workload_source_(p.source_of("workload")),
      user_id_(p.text("user")),
      max_queries_(p.integer("max_queries")),
      system_prompt_tokens_(p.integer("system_prompt_tokens")),
      top_k_(p.integer("top_k")),
      answer_tokens_(p.integer("answer_tokens")),
      interarrival_s_(p.real("interarrival_s")),
      resolved_(p.resolved()) {
  const YAML::Node reuse = or_default(p, "kv_reuse", "none");
  const YAML::Node split = or_default(p, "load_or_recompute", "always_load");
  reuse_ = Registry<KvReuse>::instance().create(reuse, p.source_of("kv_reuse"));
  split_ = Registry<kvsplit::KvSplitStrategy>::instance().create(split, p.source_of("load_or_recompute"));
  split_name_ = split["impl"].Scalar();
  resolved_["model"] = yaml_clone(cost_.spec().resolved);
  resolved_["kv_reuse"] = Registry<KvReuse>::instance().resolve(reuse, p.source_of("kv_reuse"));
  resolved_["load_or_recompute"] =
      Registry<kvsplit::KvSplitStrategy>::instance().resolve(split, p.source_of("load_or_recompute"));
}

// The user's queries as requests: system prompt, the top-k retrieved chunks (best first), the query.
void PipelineApp::prepare(const AppEnvironment& env) {
  if (!env.rag_workload) throw Error("internal: the pipeline app needs a RAG workload loader");
  if (env.device) env.device->require_unit(unit_, "pipeline app 'unit'");
  const traces::RagTrace trace = env.rag_workload(workload_, workload_source_);
  const traces::UserTrace& u = pick_user(trace, user_id_, workload_source_.where(workload_));
  std::size_t n = u.queries.size();
  if (max_queries_ > 0) n = std::min(n, static_cast<std::size_t>(max_queries_));
  requests_.clear();
  for (std::size_t i = 0; i < n; ++i) {
    const traces::Query& q = u.queries[i];
    if (top_k_ > 0 && q.retrieved.empty())
      throw ConfigError(fmt::format("{}: query {} of user '{}' carries no precomputed retrieval (the pipeline app "
                                    "reads the workload's retrieved chunk ids); generate or import it with retrieval",
                                    workload_source_.where(workload_), i, u.user_id));
    Request r;
    r.id = static_cast<std::int64_t>(i);
    r.arrival_s = start_s() + (interarrival_s_ > 0 ? static_cast<double>(i) * interarrival_s_ : q.arrival_s);
    if (system_prompt_tokens_ > 0) r.prompt.push_back({"system", 0x5157E1ULL, system_prompt_tokens_});
    for (std::size_t k = 0; k < q.retrieved.size() && k < static_cast<std::size_t>(top_k_); ++k) {
      const auto id = static_cast<std::size_t>(q.retrieved[k]);
      if (id >= u.chunks.size())
        throw InputError(fmt::format("{}: query {} retrieves chunk {} of {}", workload_source_.where(workload_), i, id,
                                     u.chunks.size()));
      r.prompt.push_back({"chunk", 0xC4000000ULL + id, u.chunks[id].tokens});
    }
    r.prompt.push_back({"query", 0x9E000000000ULL + i, std::max<std::int64_t>(1, q.tokens)});
    r.output_tokens = std::max<std::int64_t>(1, answer_tokens_ > 0 ? answer_tokens_ : q.answer_tokens);
    requests_.push_back(std::move(r));
  }
}

std::vector<std::pair<std::string, double>> PipelineApp::resident_dram() const {
  return {{"weights", cost_.spec().weight_bytes()}};
}

double PipelineApp::active_energy(const devices::Device& device, double seconds) const {
  const auto [active, idle] = device.profile().unit_power_w(unit_, "pipeline app");
  return (active - idle) * seconds;
}

// Recompute [0, l) on the unit while [l, s) is read from flash, as the split strategy plans it.
sim::Task<void> PipelineApp::bring_back(devices::Device& device, const Request& r, std::int64_t s, Served& out) {
  (void)r;
  sim::Simulator& sim = device.sim();
  const kvsplit::DeviceSplitCosts costs(cost_, device.profile(),
                                        kvsplit::DeviceCostOptions{unit_, "", kvsplit::RecomputeKind::kPrefill,
                                                                   kvsplit::Payload::kKv});
  const kvsplit::SplitPlan plan = split_->plan(costs, kvsplit::SplitRequest{s, false});
  const std::int64_t l = std::clamp<std::int64_t>(plan.recomputed_tokens, 0, s);
  out.recomputed_tokens = l;
  out.loaded_tokens = s - l;
  out.split_estimate_s = plan.time_s;
  const sim::Time t0 = sim.now();
  std::vector<sim::Event> streams;
  if (l > 0) {
    const devices::UnitCost c =
        device.unit_cost(unit_, cost_.prefill(models::PrefillShape{l, 0, 0, 0}), cost_.spec().weight_dtype, "recompute");
    out.times.active_energy_j += active_energy(device, c.seconds);
    streams.push_back(sim.start(device.compute_for(unit_, c, "kv recompute", priority()), "kv recompute").done_event());
  }
  if (s - l > 0)
    streams.push_back(
        sim.start(device.storage().read(static_cast<double>(s - l) * cost_.spec().kv_bytes_per_token(), "kv load"),
                  "kv load")
            .done_event());
  co_await sim::all_of(sim, streams);
  out.split_s = sim::to_seconds(sim.now() - t0);
}

sim::Task<void> PipelineApp::serve(devices::Device& device, const std::string& kv_owner, const Request& r) {
  sim::Simulator& sim = device.sim();
  Served out;
  out.times.request = r.id;
  out.times.arrival_s = r.arrival_s;
  out.times.start_s = sim::to_seconds(sim.now());
  out.times.output_tokens = r.output_tokens;
  const std::int64_t n = r.prompt_tokens();
  out.prompt_tokens = n;
  // KV residency: the request's K/V is held in DRAM while it runs; one that cannot be stops the run.
  const double kv_bytes = static_cast<double>(n + r.output_tokens) * cost_.spec().kv_bytes_per_token();
  device.dram().reserve(kv_owner, kv_bytes);
  // At least the last prompt token is computed: its logits give the first answer token.
  const std::int64_t s = std::min(reuse_->match(r, out.times.start_s).tokens, n - 1);
  out.reused_tokens = s;
  if (s > 0) co_await bring_back(device, r, s, out);
  const sim::Time t_prefill = sim.now();
  const devices::UnitCost prefill = device.unit_cost(unit_, cost_.prefill(models::PrefillShape{n - s, s, 0, 1}),
                                                     cost_.spec().weight_dtype, "prefill");
  co_await device.compute_for(unit_, prefill, "prefill", priority());
  out.times.active_energy_j += active_energy(device, prefill.seconds);
  out.prefill_s = sim::to_seconds(sim.now() - t_prefill);
  out.times.first_token_s = sim::to_seconds(sim.now());
  DecodeCosts decode(cost_, unit_);
  for (std::int64_t i = 1; i < r.output_tokens; ++i) {
    const devices::UnitCost step = decode.at(device, n + i);
    co_await device.compute_for(unit_, step, "decode", priority());
    out.times.active_energy_j += active_energy(device, step.seconds);
  }
  out.times.end_s = sim::to_seconds(sim.now());
  out.decode_s = out.times.end_s - out.times.first_token_s;
  device.dram().release(kv_owner, kv_bytes);
  // What the store keeps is written to flash after the answer (it delays later flash reads).
  out.stored_bytes = reuse_->store(r, out.times.end_s);
  served_.push_back(out);
  if (out.stored_bytes > 0) co_await device.storage().write(out.stored_bytes, "kv store");
}

sim::Task<void> PipelineApp::run(devices::Device& device, std::string owner, sim::StatGroup& stats) {
  (void)stats;
  device.profile().require_unit(unit_, "pipeline app 'unit'");
  reuse_->begin(cost_.spec().kv_bytes_per_token());
  sim::Simulator& sim = device.sim();
  const std::string kv_owner = owner + "/kv";
  for (const Request& r : requests_) {
    const sim::Time arrival = sim::from_seconds(r.arrival_s);
    if (sim.now() < arrival) co_await sim.timeout(arrival - sim.now());
    co_await serve(device, kv_owner, r);
  }
}

void PipelineApp::records(h5::Table& out) const {
  std::vector<RequestTimes> times;
  std::vector<std::int64_t> prompt, reused, recomputed, loaded;
  std::vector<double> split, estimate, prefill, decode, stored;
  for (const Served& s : served_) {
    times.push_back(s.times);
    prompt.push_back(s.prompt_tokens);
    reused.push_back(s.reused_tokens);
    recomputed.push_back(s.recomputed_tokens);
    loaded.push_back(s.loaded_tokens);
    split.push_back(s.split_s);
    estimate.push_back(s.split_estimate_s);
    prefill.push_back(s.prefill_s);
    decode.push_back(s.decode_s);
    stored.push_back(s.stored_bytes);
  }
  add_request_columns(out, times);
  out.add("prompt_tokens", prompt, "tokens");
  out.add("reused_tokens", reused, "tokens");
  out.add("recomputed_tokens", recomputed, "tokens");
  out.add("loaded_tokens", loaded, "tokens");
  out.add("split_s", split, "s");
  out.add("split_estimate_s", estimate, "s");
  out.add("prefill_s", prefill, "s");
  out.add("decode_s", decode, "s");
  out.add("stored_bytes", stored, "bytes");
}

AppTotals PipelineApp::totals() const {
  AppTotals a;
  for (const Served& s : served_) a.add(s.times);
  return a;
}

MOBISIM_REGISTER(App, PipelineApp, "pipeline",
                 "Requests through the stage slots: kv_reuse, load_or_recompute (a kv_split_strategy), prefill and "
                 "decode on a unit, KV held in DRAM.")

}  // namespace mobisim::policies::pipeline
