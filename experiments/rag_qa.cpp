// The `rag_qa` experiment driver: single-user RAG question answering.
//
// For each policy and each user, one simulation of that user's phone replays
// the user's queries in arrival order: between queries the policy may run
// background work (`idle`), then it serves the query. A query that arrives while
// the previous one is still being answered waits (one user, one phone).
//
// Parameters (YAML under `experiment:`):
//   device      built-in profile name, YAML path, or inline mapping
//   model       built-in model name, YAML path, or {base: NAME, <field>: <override>...}
//   workload    {trace: FILE.h5} or {generate: default | PATH | {generator config}}
//               plus max_users / max_queries_per_user (0 = all)
//   pipeline    shared pipeline settings (see PipelineConfig)
//   policies    list of {impl: NAME, label: TEXT (optional), ...policy parameters}
//
// Each policy runs as its pipeline stages (policies/apps/rag_policy_stages.h, `mobisim stages`) in a
// `pipeline` app on the user's phone; each served request becomes a row of the records table
// (record_of_served). A policy with no pipeline stages is a ConfigError naming it. The key
// `serve_on` is gone with the policies' own replay loop it selected (issue 34): a config that still
// sets it is a ConfigError saying so. The values the loop gave, which the pipeline equalled to the
// bit, are pinned in tests/test_rag_qa_on_pipeline.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <unordered_map>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/experiment.h"
#include "experiments/parallel.h"
#include "experiments/plugin_list.h"
#include "experiments/simulation.h"
#include "experiments/workload_cache.h"
#include "experiments/workload_inputs.h"
#include "models/cost_model.h"
#include "policies/apps/pipeline_app.h"
#include "policies/apps/rag_policy_stages.h"
#include "policies/rag/rag_policy.h"
#include "sim/builtin_configs.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "sim/simulator.h"
#include "traces/generator.h"
#include "traces/metrics.h"
#include "traces/rag_trace_io.h"

namespace mobisim::experiments {

namespace {

using policies::QueryRecord;
using policies::RagPolicy;

struct WorkloadSpec {
  static ParamSchema schema() {
    ParamSchema s;
    s.text("trace", std::string(""), "an HDF5 RAG trace (mobisim trace import/generate)").input_path();
    s.node("generate", "generate a trace: 'default', a generator YAML path, or an inline generator config "
           "({base: NAME|PATH, ...} inherits a generator config and overrides its keys)");
    s.integer("max_users", 0, "simulate only the first N users (0 = all)").non_negative();
    s.text_list("user_ids", std::vector<std::string>{}, "simulate only these users, in this order (empty = all)");
    s.integer("max_queries_per_user", 0, "replay only the first N queries of each user (0 = all)").non_negative();
    return s;
  }
};

// The users a run replays, in replay order: read one at a time from a trace file (a replay then
// holds one block of users, not the whole trace), or held in memory when generated for the run.
class UserSource {
 public:
  std::size_t size() const { return file_ ? picked_.size() : memory_.users.size(); }
  const traces::RagTraceMeta& meta() const { return file_ ? file_->meta() : memory_.meta; }
  const std::string& user_id(std::size_t i) const {
    return file_ ? file_->user_id(picked_[i]) : memory_.users[i].user_id;
  }
  bool in_memory() const { return !file_; }
  const traces::RagTrace& memory() const { return memory_; }
  // User i (its first max_queries_per_user queries); `parts` as RagTraceFile::read_user.
  std::shared_ptr<const traces::UserTrace> load(std::size_t i, const traces::UserParts& parts) const {
    if (!file_) return {std::shared_ptr<const traces::UserTrace>(), &memory_.users[i]};  // not owned
    auto u = std::make_shared<traces::UserTrace>(file_->read_user(picked_[i], parts));
    if (max_queries_ > 0 && u->queries.size() > max_queries_) u->queries.resize(max_queries_);
    return u;
  }

  // `cache` (may be null): generated workloads shared with the process's earlier runs.
  static UserSource from_params(const Params& w, std::uint64_t seed, WorkloadCache* cache) {
    const std::string trace_path = w.text("trace");
    YAML::Node gen = w.node("generate");
    const bool has_gen = gen.IsDefined() && !gen.IsNull();
    if (trace_path.empty() == !has_gen)
      w.fail("trace", "give exactly one of 'trace: FILE.h5' or 'generate: default|PATH|{...}'");
    UserSource src;
    const auto ids = w.text_list("user_ids");
    const auto max_users = static_cast<std::size_t>(w.integer("max_users"));
    src.max_queries_ = static_cast<std::size_t>(w.integer("max_queries_per_user"));
    if (!trace_path.empty()) {
      src.file_ = std::make_unique<traces::RagTraceFile>(trace_path);
      const auto& f = *src.file_;
      if (ids.empty()) {
        for (std::size_t u = 0; u < f.num_users(); ++u) src.picked_.push_back(u);
      } else {
        std::unordered_map<std::string, std::size_t> by_id;
        for (std::size_t u = 0; u < f.num_users(); ++u) by_id.emplace(f.user_id(u), u);
        for (const auto& id : ids) {
          auto it = by_id.find(id);
          if (it == by_id.end()) w.fail("user_ids", fmt::format("no user '{}' in the workload", id));
          src.picked_.push_back(it->second);
        }
      }
      if (max_users > 0 && src.picked_.size() > max_users) src.picked_.resize(max_users);
    } else {
      src.memory_ = generate(w, gen, seed, cache);
      auto& users = src.memory_.users;
      if (!ids.empty()) {
        std::vector<traces::UserTrace> picked;
        for (const auto& id : ids) {
          auto it = std::find_if(users.begin(), users.end(), [&](const auto& u) { return u.user_id == id; });
          if (it == users.end()) w.fail("user_ids", fmt::format("no user '{}' in the workload", id));
          picked.push_back(*it);
        }
        users = std::move(picked);
      }
      if (max_users > 0 && users.size() > max_users) users.resize(max_users);
      if (src.max_queries_ > 0)
        for (auto& u : users)
          if (u.queries.size() > src.max_queries_) u.queries.resize(src.max_queries_);
    }
    if (src.size() == 0) w.fail("trace", "the workload has no users");
    return src;
  }

 private:
  // `default` is the built-in rag_default, as the whole value or as the base of an inline config (which is
  // what `-p experiment.workload.generate.users=50` makes of `generate: default`).
  static YAML::Node default_named(const YAML::Node& gen) {
    if (gen.IsScalar() && gen.Scalar() == "default") return YAML::Node("rag_default");
    if (!gen.IsMap() || !gen["base"] || !gen["base"].IsScalar() || gen["base"].Scalar() != "default") return gen;
    YAML::Node copy = YAML::Clone(gen);
    copy["base"] = "rag_default";
    return copy;
  }

  static traces::RagTrace generate(const Params& w, const YAML::Node& gen, std::uint64_t seed, WorkloadCache* cache) {
    const YAML::Node named = default_named(gen);
    const ResolvedWorkload resolved = resolve_workload_config(named, w.source_of("generate"));
    const YAML::Node& cfg = resolved.config;
    const std::string& origin = resolved.origin;
    auto make = [&] { return traces::generate_rag_trace_from_yaml(cfg, origin, seed); };
    if (!cache) return make();
    // The generator's whole input: its resolved keys, the name it records and the seed.
    const std::string key = fmt::format("{}\n{}\n{}", yaml_to_string(cfg), origin, seed);
    return *cache->rag_trace(key, make);  // a copy: the run picks and trims its users
  }

  std::unique_ptr<traces::RagTraceFile> file_;
  std::vector<std::size_t> picked_;  // file users replayed, in order
  std::size_t max_queries_ = 0;
  traces::RagTrace memory_;
};

class RagQaExperiment : public Experiment {
 public:
  explicit RagQaExperiment(const Params& p) : params_(p) {
    devices::require_thermal_none(p, "rag_qa");
    device_ = devices::load_device_for_engine(p);
    engine_ = devices::resolved_engine(p);
    model_ = models::load_model_spec(p.node("model"), p.source_of("model"));
    ParamSchema ps = policies::PipelineConfig::schema();
    pipeline_ = policies::PipelineConfig::from_params(Params(p.node("pipeline"), ps, p.source_of("pipeline"), {}));
    device_.require_engine_values(pipeline_.compute_unit, model_, "pipeline.compute_unit");
    device_.require_engine_values(pipeline_.prefill_unit, model_, "pipeline.prefill_unit");
    device_.require_engine_values(pipeline_.decode_unit, model_, "pipeline.decode_unit");
    policies_ = parse_labelled_plugins<RagPolicy>(p, "policies");
    if (p.has("serve_on")) p.fail("serve_on", kServeOnRemoved);
    const YAML::Node list = p.node("policies");  // as written: the translation's errors name its label and line
    for (std::size_t i = 0; i < policies_.size(); ++i)
      stages_.push_back(policies::pipeline_stages_for(list[i], policies_[i].source, pipeline_));
    ParamSchema ws = WorkloadSpec::schema();
    workload_node_ = p.node("workload");
    Params wp(workload_node_, ws, p.source_of("workload"), {});
    (void)wp;
  }

  static ParamSchema schema() {
    ParamSchema s;
    s.node("thermal", devices::kThermalNoneDoc);
    s.node("device", "device profile: built-in name, YAML path or inline mapping");
    devices::add_engine_param(s);
    s.node("model", "model: built-in name, YAML path, or {base: NAME, field: override}");
    s.node("workload", "{trace: FILE.h5} or {generate: default|PATH|{...}}, max_users, max_queries_per_user");
    s.node("pipeline", "shared pipeline settings: compute_unit, system_prompt_tokens, top_k, answer_tokens, ...");
    s.node("policies", "list of policies to compare: [{impl: naive}, ...]");
    s.node("serve_on", std::string("removed: ") + kServeOnRemoved);
    return s;
  }

  // Why an old config's `serve_on` (loop | pipeline) is refused rather than ignored.
  static constexpr const char* kServeOnRemoved =
      "the key was removed with the policies' own replay loop (`serve_on: loop`, issue 34): every policy now "
      "serves on its pipeline stages (`mobisim stages`), what `serve_on: pipeline` selected; delete the key";

  std::string default_plot() const override { return "rag_latency.py"; }

  // Opens the workload and checks it against every policy and the pipeline, user by user when it
  // is a trace file (one user in memory at a time). No simulation runs here (validate stops after it).
  void prepare(RunContext& ctx) override {
    ParamSchema ws = WorkloadSpec::schema();
    Params wp(workload_node_, ws, params_.source_of("workload"), {});
    users_ = std::make_unique<UserSource>(UserSource::from_params(wp, ctx.seed, ctx.workloads));
    cost_ = std::make_unique<models::CostModel>(model_);
    devices::Dram::check_fits(device_.dram, device_.name, {{"weights", model_.weight_bytes()}});
    std::vector<std::unique_ptr<RagPolicy>> checkers;
    needs_index_ = false;
    parts_ = traces::UserParts{false, false};
    for (const auto& entry : policies_) {
      checkers.push_back(Registry<RagPolicy>::instance().create(entry.node, entry.source));
      needs_index_ = needs_index_ || checkers.back()->needs_knowledge_index();
      parts_.embeddings = parts_.embeddings || checkers.back()->needs_embeddings();
      parts_.content = parts_.content || checkers.back()->needs_trace_content() || needs_index_;
    }
    // Workload checks of every policy (e.g. missing embeddings) before any simulation starts.
    if (users_->in_memory()) {
      for (const auto& policy : checkers) policy->check_workload(users_->memory(), *cost_);
      for (const auto& user : users_->memory().users) check_top_k(user);
      return;
    }
    // Users read here are kept for run() while they fit kKeptUserBytes (a small trace is then
    // read once); the rest are read again, block by block. Policies that read no trace content
    // (naive) check no answers either, so those later users are read here without their answer
    // texts, which run() reads (see traces::UserParts::answers): each answer is inflated once.
    kept_.assign(users_->size(), nullptr);
    std::size_t kept_bytes = 0;
    for (std::size_t u = 0; u < users_->size(); ++u) {
      traces::RagTrace one;
      one.meta = users_->meta();
      traces::UserParts parts = parts_;
      parts.answers = parts_.content || kept_bytes <= kKeptUserBytes;
      auto user = users_->load(u, parts);
      one.users.push_back(*user);
      for (const auto& policy : checkers) policy->check_workload(one, *cost_);
      check_top_k(one.users.front());
      kept_bytes += approx_bytes(*user);
      if (parts.answers && kept_bytes <= kKeptUserBytes) kept_[u] = std::move(user);
    }
  }

  static constexpr std::size_t kKeptUserBytes = std::size_t{64} << 20;

  static std::size_t approx_bytes(const traces::UserTrace& u) {
    std::size_t n = sizeof(u);
    for (const auto& c : u.chunks) n += sizeof(c) + c.text.capacity() + c.embedding.capacity() * sizeof(float);
    for (const auto& q : u.queries)
      n += sizeof(q) + q.text.capacity() + q.answer_text.capacity() + q.kind.capacity() +
           (q.embedding.capacity() + q.retrieved.capacity() + q.relevant.capacity()) * sizeof(float);
    return n;
  }

  void run(RunContext& ctx) override {
    const std::size_t n_users = users_->size(), n_policies = policies_.size();
    ctx.progress(fmt::format("{} users, {} on {}, {} policies", n_users, model_.name, device_.name, n_policies));
    // One independent simulation per (policy, user). Everything shared is set up here, in order
    // (statistics groups, timeline processes); users are then replayed in blocks: a block's users
    // are loaded (and their knowledge indexes built) once for all policies, its simulations run on
    // ctx.threads workers, each touching only its own job, and their records are appended in
    // (policy, user) order before the block is released. The result does not depend on the
    // thread count, and memory holds one block of users, not the whole workload.
    std::vector<sim::StatGroup*> stats(n_policies * n_users);
    std::vector<sim::TimelineProcess*> timelines(n_policies * n_users);
    for (std::size_t p = 0; p < n_policies; ++p) {
      auto& variant = ctx.results.variant(policies_[p].label);
      variant.stats.tabulate_children("user");
      for (std::size_t u = 0; u < n_users; ++u) {
        const std::string& user_id = users_->user_id(u);
        stats[p * n_users + u] = &variant.stats.child(sanitize(user_id));
        timelines[p * n_users + u] = ctx.timeline_process(
            policies_[p].label + " / " + user_id,
            {{"policy", policies_[p].label}, {"user", user_id}, {"device", device_.name}});
      }
    }
    struct Job {
      std::size_t policy, user;  // user: index in the block
      std::vector<QueryRecord> records;
      DramUse dram;
    };
    // Each policy's records stream to a spooled table (bounded buffer; one scratch file beside the
    // output) block by block; only the running sums of the summary stay in memory.
    const auto scratch = std::make_shared<h5::Writer>(scratch_path(ctx));
    std::vector<std::shared_ptr<h5::SpooledTable>> spools(n_policies);
    for (std::size_t p = 0; p < n_policies; ++p)
      spools[p] = std::make_shared<h5::SpooledTable>(scratch, fmt::format("policy{}", p));
    std::vector<RecordSums> sums(n_policies);
    const std::size_t block = 4 * static_cast<std::size_t>(std::max(1, ctx.threads));
    std::size_t reported = 0;
    for (std::size_t b0 = 0; b0 < n_users; b0 += block) {
      const std::size_t b1 = std::min(n_users, b0 + block);
      std::vector<std::shared_ptr<const traces::UserTrace>> users;
      for (std::size_t u = b0; u < b1; ++u)
        users.push_back(u < kept_.size() && kept_[u] ? std::move(kept_[u]) : users_->load(u, parts_));
      // Indexes are pure functions of each user's chunks: built in parallel, one slot per user.
      std::vector<std::shared_ptr<const policies::KnowledgeIndex>> indexes(users.size());
      if (needs_index_)  // shared by the user's policies (on the pipeline: handed to their idle stages)
        parallel_for(users.size(), ctx.threads, [&](std::size_t i) { indexes[i] = policies::KnowledgeIndex::build(*users[i], users_->meta()); });
      std::vector<Job> jobs;
      for (std::size_t i = 0; i < users.size(); ++i)
        for (std::size_t p = 0; p < n_policies; ++p)
          jobs.push_back(Job{p, i, {}, {}});
      parallel_for(jobs.size(), ctx.threads, [&](std::size_t j) {
        Job& job = jobs[j];
        const std::size_t slot = job.policy * n_users + b0 + job.user;
        job.dram = simulate_user(job.policy, *users[job.user], indexes[job.user], *stats[slot], timelines[slot],
                                 job.records);
      });
      for (std::size_t p = 0; p < n_policies; ++p) {
        RecordColumns batch;
        for (std::size_t i = 0; i < users.size(); ++i)
          for (const auto& rec : jobs[i * n_policies + p].records) batch.add(rec);
        sums[p].add(batch);
        for (std::size_t i = 0; i < users.size(); ++i) sums[p].add(jobs[i * n_policies + p].dram);
        h5::Table rows;
        batch.to_table(rows);
        spools[p]->append(rows);
      }
      if (n_users >= 100 && (b1 * 10) / n_users > reported) {
        reported = (b1 * 10) / n_users;
        ctx.progress(fmt::format("{} of {} users replayed", b1, n_users));
      }
    }
    SummaryBuilder summary;
    for (std::size_t p = 0; p < n_policies; ++p) {
      spools[p]->finish();
      // Percentiles need every latency: read back from the spool, one policy at a time (the
      // histogram's copy and its sorted copy make it 24 bytes a query, for one policy at a time).
      sim::Histogram latency;
      for (double x : spools[p]->doubles("latency_s")) latency.add(x);
      const TokenTimes token_times = token_times_of(*spools[p], latency);
      ctx.progress(fmt::format("policy {}: {} queries, mean latency {:.2f} s", policies_[p].label, latency.count(),
                               latency.mean()));
      ctx.results.variant(policies_[p].label).spooled_records = spools[p];
      summary.add(policies_[p].label, sums[p], latency, token_times);
    }
    summary.to_table(ctx.results.summary);
  }

  YAML::Node resolved_config(const YAML::Node& given) const override {
    YAML::Node out = yaml_clone(given);
    out["device"] = yaml_clone(device_.resolved);
    out["model"] = yaml_clone(model_.resolved);
    ParamSchema ps = policies::PipelineConfig::schema();
    out["pipeline"] = Params(params_.node("pipeline"), ps, params_.source_of("pipeline"), {}).resolved();
    ParamSchema ws = WorkloadSpec::schema();
    out["workload"] = Params(workload_node_, ws, params_.source_of("workload"), {}).resolved();
    out["policies"] = resolved_plugins(policies_);
    return devices::with_engine(out, engine_);
  }

 private:
  using PolicyEntry = LabelledPlugin<RagPolicy>;
  struct DramUse {
    double peak_bytes = 0, mean_bytes = 0;
  };

  struct RecordColumns {
    std::vector<std::string> user;
    std::vector<std::int64_t> query, prompt_tokens, reused_tokens, computed_tokens, answer_tokens, qa_hit, kv_hit_chunks,
        retrieved_chunks, bg_jobs, qa_stale;
    std::vector<double> arrival, start, end, latency, embed, qa_match, retrieval, kv_match, load, prefill, decode, flops,
        bytes_loaded, energy, qa_similarity, rouge_l, bleu, bg_s, bg_flops, bg_energy, cache_bytes;
    void add(const QueryRecord& r) {
      user.push_back(r.user);
      query.push_back(r.query_index);
      arrival.push_back(r.arrival_s);
      start.push_back(r.start_s);
      end.push_back(r.end_s);
      latency.push_back(r.latency_s());
      embed.push_back(r.embed_s);
      qa_match.push_back(r.qa_match_s);
      retrieval.push_back(r.retrieval_s);
      kv_match.push_back(r.kv_match_s);
      load.push_back(r.load_s);
      prefill.push_back(r.prefill_s);
      decode.push_back(r.decode_s);
      prompt_tokens.push_back(r.prompt_tokens);
      reused_tokens.push_back(r.reused_tokens);
      computed_tokens.push_back(r.computed_tokens);
      answer_tokens.push_back(r.answer_tokens);
      flops.push_back(r.flops);
      bytes_loaded.push_back(r.bytes_loaded);
      energy.push_back(r.energy_j);
      qa_hit.push_back(r.qa_hit ? 1 : 0);
      qa_stale.push_back(r.qa_stale ? 1 : 0);
      kv_hit_chunks.push_back(r.kv_hit_chunks);
      retrieved_chunks.push_back(r.retrieved_chunks);
      qa_similarity.push_back(r.qa_similarity);
      rouge_l.push_back(r.rouge_l);
      bleu.push_back(r.bleu);
      bg_s.push_back(r.bg_s);
      bg_flops.push_back(r.bg_flops);
      bg_energy.push_back(r.bg_energy_j);
      bg_jobs.push_back(r.bg_jobs);
      cache_bytes.push_back(r.cache_bytes);
    }
    void to_table(h5::Table& t) const {
      t.add("user", user);
      t.add("query", query);
      t.add("arrival_s", arrival, "s");
      t.add("start_s", start, "s");
      t.add("end_s", end, "s");
      t.add("latency_s", latency, "s");
      t.add("embed_s", embed, "s");
      t.add("qa_match_s", qa_match, "s");
      t.add("retrieval_s", retrieval, "s");
      t.add("kv_match_s", kv_match, "s");
      t.add("load_s", load, "s");
      t.add("prefill_s", prefill, "s");
      t.add("decode_s", decode, "s");
      t.add("prompt_tokens", prompt_tokens, "tokens");
      t.add("reused_tokens", reused_tokens, "tokens");
      t.add("computed_tokens", computed_tokens, "tokens");
      t.add("answer_tokens", answer_tokens, "tokens");
      t.add("flops", flops, "FLOP");
      t.add("bytes_loaded", bytes_loaded, "bytes");
      t.add("energy_j", energy, "J");
      t.add("qa_hit", qa_hit, "bool");
      t.add("qa_stale", qa_stale, "bool");
      t.add("kv_hit_chunks", kv_hit_chunks, "chunks");
      t.add("retrieved_chunks", retrieved_chunks, "chunks");
      t.add("qa_similarity", qa_similarity, "cosine");
      t.add("rouge_l", rouge_l, "F");
      t.add("bleu", bleu, "score");
      t.add("bg_s", bg_s, "s");
      t.add("bg_flops", bg_flops, "FLOP");
      t.add("bg_energy_j", bg_energy, "J");
      t.add("bg_jobs", bg_jobs, "count");
      t.add("cache_bytes", cache_bytes, "bytes");
    }
  };

  // Where the records wait until the result file is written: beside the output, as
  // `<output>.records.tmp-<pid>` (removed with the run, also when it fails).
  static std::string scratch_path(const RunContext& ctx) {
    const std::string base =
        ctx.output.empty() ? (std::filesystem::temp_directory_path() / "mobisim").string() : ctx.output;
    return base + ".records";
  }

  // The sums a summary row needs, added batch by batch in row order: the same additions in the
  // same order as over whole columns, so the results are bit-identical to summing them at the end.
  struct RecordSums {
    std::size_t rows = 0, phones = 0;
    double dram_peak = 0, dram_mean = 0;  // over the users' phones: the highest peak, the sum of means
    void add(const DramUse& d) {
      ++phones;
      dram_peak = std::max(dram_peak, d.peak_bytes);
      dram_mean += d.mean_bytes;
    }
    std::int64_t stale = 0;
    double prefill = 0, decode = 0, load = 0, hits = 0, flops = 0, energy = 0, kv_hit = 0, kv_retrieved = 0,
           bg_flops = 0, bg_energy = 0, rouge_l = 0, bleu = 0;
    void add(const RecordColumns& c) {
      rows += c.latency.size();
      for (double x : c.prefill) prefill += x;
      for (double x : c.decode) decode += x;
      for (double x : c.load) load += x;
      for (auto x : c.qa_hit) hits += static_cast<double>(x);
      for (auto x : c.qa_stale) stale += x;
      for (double x : c.flops) flops += x;
      for (double x : c.energy) energy += x;
      // Chunk hit rate of the KV/QKV cache over the queries that reached the LLM.
      for (std::size_t i = 0; i < c.qa_hit.size(); ++i)
        if (!c.qa_hit[i]) {
          kv_hit += static_cast<double>(c.kv_hit_chunks[i]);
          kv_retrieved += static_cast<double>(c.retrieved_chunks[i]);
        }
      for (double x : c.bg_flops) bg_flops += x;
      for (double x : c.bg_energy) bg_energy += x;
      for (double x : c.rouge_l) rouge_l += x;
      for (double x : c.bleu) bleu += x;
    }
    double mean(double sum) const { return rows == 0 ? 0.0 : sum / static_cast<double>(rows); }
  };

  // Time to first token (arrival to the end of prefill: decode is a query's last phase) and time
  // per output token (decode time over the tokens decoded, for the queries the LLM answered).
  struct TokenTimes {
    sim::Histogram ttft;
    double mean_tpot_s = 0;
  };
  static TokenTimes token_times_of(const h5::SpooledTable& records, const sim::Histogram& latency) {
    TokenTimes t;
    const auto decode = records.doubles("decode_s");
    const auto tokens = records.ints("answer_tokens");
    double tpot_sum = 0;
    std::size_t decoded = 0;
    for (std::size_t i = 0; i < decode.size(); ++i) {
      t.ttft.add(latency.samples()[i] - decode[i]);
      if (decode[i] > 0 && tokens[i] > 0) {
        tpot_sum += decode[i] / static_cast<double>(tokens[i]);
        ++decoded;
      }
    }
    t.mean_tpot_s = decoded ? tpot_sum / static_cast<double>(decoded) : 0.0;
    return t;
  }

  struct SummaryBuilder {
    std::vector<std::string> policy;
    std::vector<std::int64_t> queries, stale_hits;
    std::vector<double> mean_latency, p50, p90, p99, mean_ttft, p90_ttft, p99_ttft, mean_tpot, mean_prefill,
        mean_decode, mean_load, qa_hit_rate, tflops, energy, kv_chunk_hit_rate, bg_tflops, bg_energy, rouge, bleu_mean,
        dram_peak, dram_mean;
    void add(const std::string& label, const RecordSums& c, const sim::Histogram& latency, const TokenTimes& tokens) {
      policy.push_back(label);
      queries.push_back(static_cast<std::int64_t>(c.rows));
      mean_latency.push_back(latency.mean());
      p50.push_back(latency.percentile(50));
      p90.push_back(latency.percentile(90));
      p99.push_back(latency.percentile(99));
      mean_ttft.push_back(tokens.ttft.mean());
      p90_ttft.push_back(tokens.ttft.percentile(90));
      p99_ttft.push_back(tokens.ttft.percentile(99));
      mean_tpot.push_back(tokens.mean_tpot_s);
      mean_prefill.push_back(c.mean(c.prefill));
      mean_decode.push_back(c.mean(c.decode));
      mean_load.push_back(c.mean(c.load));
      stale_hits.push_back(c.stale);
      qa_hit_rate.push_back(c.mean(c.hits));
      tflops.push_back(c.flops / 1e12);
      energy.push_back(c.energy);
      kv_chunk_hit_rate.push_back(c.kv_retrieved > 0 ? c.kv_hit / c.kv_retrieved : 0.0);
      bg_tflops.push_back(c.bg_flops / 1e12);
      bg_energy.push_back(c.bg_energy);
      rouge.push_back(c.mean(c.rouge_l));
      bleu_mean.push_back(c.mean(c.bleu));
      dram_peak.push_back(c.dram_peak);
      dram_mean.push_back(c.phones == 0 ? 0.0 : c.dram_mean / static_cast<double>(c.phones));
    }
    void to_table(h5::Table& t) const {
      t.add("policy", policy);
      t.add("queries", queries, "count");
      t.add("mean_latency_s", mean_latency, "s");
      t.add("p50_latency_s", p50, "s");
      t.add("p90_latency_s", p90, "s");
      t.add("p99_latency_s", p99, "s");
      t.add("mean_ttft_s", mean_ttft, "s");
      t.add("p90_ttft_s", p90_ttft, "s");
      t.add("p99_ttft_s", p99_ttft, "s");
      t.add("mean_tpot_s", mean_tpot, "s");
      t.add("mean_prefill_s", mean_prefill, "s");
      t.add("mean_decode_s", mean_decode, "s");
      t.add("mean_load_s", mean_load, "s");
      t.add("qa_hit_rate", qa_hit_rate, "fraction");
      t.add("qa_stale_hits", stale_hits, "count");
      t.add("total_tflops", tflops, "TFLOP");
      t.add("query_energy_j", energy, "J");
      t.add("kv_chunk_hit_rate", kv_chunk_hit_rate, "fraction");
      t.add("background_tflops", bg_tflops, "TFLOP");
      t.add("background_energy_j", bg_energy, "J");
      t.add("mean_rouge_l", rouge, "F");
      t.add("mean_bleu", bleu_mean, "score");
      t.add("dram_peak_bytes", dram_peak, "bytes");
      t.add("dram_mean_bytes", dram_mean, "bytes");
    }
  };

  static std::string sanitize(const std::string& s) {
    std::string out;
    for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
    return out.empty() ? "user" : out;
  }

  // One user's phone under one policy's pipeline stages: the model's weights reserved from the
  // start, the stages in a `pipeline` app over the user's queries. Returns the phone's DRAM use.
  DramUse simulate_user(std::size_t policy, const traces::UserTrace& user,
                        const std::shared_ptr<const policies::KnowledgeIndex>& index, sim::StatGroup& stats,
                        sim::TimelineProcess* timeline, std::vector<QueryRecord>& out) const {
    SimulatedRun run(device_, stats.child("device"), timeline);
    run.device().dram().reserve("weights", model_.weight_bytes());
    const std::unique_ptr<policies::App> app = pipeline_app(policy, user, index);
    const auto& served = dynamic_cast<const policies::PipelineApp&>(*app).served();
    run.start(app->run(run.device(), "rag", stats), "user " + user.user_id);
    run.run();
    // Without an answer cache the translation charges the query's embedding with the retrieval.
    const double embed_in_retrieval_ms = stages_[policy].app["answer_cache"] ? 0.0 : pipeline_.embed_query_ms;
    for (const auto& s : served) {
      out.push_back(record_of_served(s, user, embed_in_retrieval_ms));
      if (timeline)
        timeline->span("queries", fmt::format("query {}#{}", user.user_id, s.times.request),
                       sim::from_seconds(s.times.arrival_s), sim::from_seconds(s.times.end_s), "query");
    }
    return DramUse{run.device().dram().peak_bytes(), run.device().dram().mean_used_bytes()};
  }

  // Policy `policy`'s stages as a pipeline app over `user`'s queries (their arrivals, the driver's model).
  // `index`: the user's knowledge index, built once for all policies (null: none of them needs one).
  std::unique_ptr<policies::App> pipeline_app(std::size_t policy, const traces::UserTrace& user,
                                              const std::shared_ptr<const policies::KnowledgeIndex>& index) const {
    YAML::Node node = yaml_clone(stages_[policy].app);
    node["impl"] = "pipeline";
    node["model"] = yaml_clone(model_.resolved);
    node["workload"] = YAML::Load("{generate: default}");  // a placeholder: rag_workload below gives the user
    auto app = Registry<policies::App>::instance().create(node, policies_[policy].source);
    policies::AppEnvironment env;
    env.device = &device_;
    env.rag_workload = [&](const YAML::Node&, const ConfigSource&) {
      traces::RagTrace one;
      one.meta = users_->meta();
      one.users.push_back(user);
      return one;
    };
    env.knowledge_index = [&index](const traces::UserTrace&) { return index; };
    app->prepare(env);
    return app;
  }

  // One request the pipeline served as its row of the records table (the columns the policies'
  // removed replay loop wrote, kept): every column of the records table and the summary.
  // `embed_in_retrieval_ms`: the query embedding the translation added to the retrieval's fixed
  // cost (a policy without an answer cache), split back out.
  static QueryRecord record_of_served(const policies::pipeline::Served& s, const traces::UserTrace& user,
                                      double embed_in_retrieval_ms) {
    QueryRecord r;
    r.user = user.user_id;
    r.query_index = s.times.request;
    r.arrival_s = s.times.arrival_s;
    r.start_s = s.times.start_s;
    r.end_s = s.times.end_s;
    r.embed_s = s.embed_s;
    r.qa_match_s = s.qa_match_s;
    r.retrieval_s = s.retrieval_s;
    // One busy of embed + retrieval on the unit, recorded as the two back-to-back phases it stands for.
    if (embed_in_retrieval_ms > 0 && s.retrieval_s > 0) {
      const sim::Time embed = sim::from_ms(embed_in_retrieval_ms);
      r.embed_s = sim::to_seconds(embed);
      r.retrieval_s = sim::to_seconds(sim::from_seconds(s.retrieval_s) - embed);
    }
    r.kv_match_s = s.kv_match_s;
    r.load_s = s.split_s;  // bringing the stored K/V back (the slice loads); stores are written after
    r.prefill_s = s.prefill_s;
    // On the clock's integer ns, as every phase is timed (Served::decode_s is a difference of seconds).
    r.decode_s = sim::to_seconds(sim::from_seconds(s.times.end_s) - s.first_token);
    r.qa_hit = s.answer_hit;
    // An answer-cache hit built no prompt and generated nothing: its record has no tokens.
    if (!s.answer_hit) {
      r.prompt_tokens = s.prompt_tokens;
      r.reused_tokens = s.reused_tokens;
      // The prompt's tokens the unit computed: those not reused, and reused ones the split rebuilt.
      r.computed_tokens = s.prompt_tokens - s.reused_tokens + s.recomputed_tokens;
      r.answer_tokens = s.times.output_tokens;
    }
    r.flops = s.device_flops;
    r.bytes_loaded = s.loaded_bytes;
    r.energy_j = s.device_energy_j;
    r.active_energy_j = s.times.active_energy_j;
    r.qa_stale = s.answer_stale;
    r.kv_hit_chunks = s.matched_chunks;
    r.retrieved_chunks = s.retrieved_chunks;
    r.cache_bytes = s.cache_bytes;
    r.qa_similarity = s.answer_similarity;
    r.served_answer = s.served_answer;
    const auto& q = user.queries.at(static_cast<std::size_t>(s.times.request));
    const traces::AnswerScore score = traces::score_served_answer(s.served_answer, q.answer_text);
    r.rouge_l = score.rouge_l;
    r.bleu = score.bleu;
    // The idle stage's work since the previous request (the background jobs before the query).
    r.bg_s = s.idle_work.busy_s;
    r.bg_flops = s.idle_work.flops;
    r.bg_energy_j = s.idle_work.energy_j;
    r.bg_jobs = s.idle_work.jobs;
    return r;
  }

  // The trace's precomputed retrieval holds a fixed number of chunks per query: a larger top_k
  // would apply to predicted queries (retrieved in simulation) but not to the trace's own.
  void check_top_k(const traces::UserTrace& user) const {
    const auto k = static_cast<std::size_t>(pipeline_.top_k);
    const YAML::Node pipeline_node = params_.node("pipeline");
    const YAML::Node at = pipeline_node.IsMap() ? pipeline_node["top_k"] : pipeline_node;
    for (std::size_t i = 0; i < user.queries.size(); ++i) {
      const auto& q = user.queries[i];
      if (q.retrieved.empty() || q.retrieved.size() >= k || q.retrieved.size() >= user.chunks.size()) continue;
      throw ConfigError(fmt::format(
          "{}: pipeline.top_k = {} but the workload's queries carry only {} precomputed retrieved chunks (user '{}', "
          "query {}); regenerate or re-import the trace with top-k >= {}, or lower pipeline.top_k",
          params_.source_of("pipeline").child("top_k").where(at), k, q.retrieved.size(), user.user_id, i, k));
    }
  }

  Params params_;
  devices::DeviceProfile device_;
  YAML::Node engine_;  // the resolved engine profile (stored with results)
  models::ModelSpec model_;
  policies::PipelineConfig pipeline_;
  std::vector<PolicyEntry> policies_;
  std::vector<policies::PolicyStages> stages_;  // each policy's pipeline stages, by policy
  YAML::Node workload_node_;
  // Set by prepare().
  std::unique_ptr<UserSource> users_;
  std::unique_ptr<models::CostModel> cost_;
  bool needs_index_ = false;
  traces::UserParts parts_;  // what of each user the policies read
  std::vector<std::shared_ptr<const traces::UserTrace>> kept_;  // users read by prepare(), by index
};

MOBISIM_REGISTER(Experiment, RagQaExperiment, "rag_qa",
                 "Single-user RAG question answering: replay each user's queries under each policy.")

}  // namespace
}  // namespace mobisim::experiments
