// The `percache_overhead` experiment driver: PerCache's system overhead (Table 1) and its battery
// cost (figure 20), both served on PerCache's request path: the stages the `percache` rag policy is
// made of, as rag_qa serves it, without its idle stage (policies/apps/percache_requests.h), one
// request at a time on one Device.
//
//   mode: table1   one query of `input_tokens` / `output_tokens` through every operation of the
//                  path, each timed alone on the idle phone, beside the document's Table 1: query
//                  embedding + QA matching (the `semantic` answer cache's look-up), knowledge
//                  retrieval and QKV-tree matching (no stage: the pipeline's fixed costs
//                  retrieval_ms and kv_match_ms), loading `loaded_chunks` slices (the `chunk_tree`'s
//                  slices read whole from flash by the pipeline's `always_load` split), prefill (the
//                  `qkv_reuse` stage, nothing reused) and decode (the `vanilla` stage, `output_tokens`
//                  steps after the prefill's token). The query's prompt opens with the
//                  `loaded_chunks` chunks (so they must fit in `input_tokens`); a second query with
//                  the same chunks, once the first one's slices are on flash, gives the loading row.
//                  Plus the per-item storage: QA entry (`qa_entry_kb`), the QKV slice of one chunk
//                  of `chunk_tokens` (the `chunk_tree`'s weight per token), chunk text + embedding
//                  (no stage: words x 6 bytes + `embedding_dim` fp32); and figure 13's Q/K/V
//                  projections of one layer (no stage: the compute unit's roofline per operator).
//   mode: battery  `populations` complete cache populations back to back (figure 20: 51
//                  populations = 10 % on OnePlus Ace 6). Section 5.8: each population of the query
//                  (349 in / 136 out) includes query embedding, retrieval, similar-query matching,
//                  QKV matching and loading, and saving the new QKV tensors and QA pair: one request
//                  on the path whose `new_chunks` chunks are new to the tree (nothing to load, the
//                  whole prompt prefilled, `output_tokens` - 1 decode steps after the prefill's
//                  token), its new slices written to flash after the answer (its QA entry costs no
//                  flash time: the answer cache's, as the rag loop's engine counts it); the next
//                  population starts once they are written. Battery % = the Device's energy since
//                  the start (idle power included) over the battery's. Every query has its own
//                  embedding (a random direction), so none is answered from the QA bank.
#include <fmt/format.h>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/experiment.h"
#include "experiments/simulation.h"
#include "models/cost_model.h"
#include "policies/apps/percache_requests.h"
#include "policies/pipeline/chunk_tree_reuse.h"
#include "policies/rag/rag_policy.h"
#include "sim/builtin_configs.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "sim/rng.h"

namespace mobisim::experiments {
namespace {

class PerCacheOverheadExperiment : public Experiment {
 public:
  explicit PerCacheOverheadExperiment(const Params& p) : p_(p) {
    devices::require_thermal_none(p, "percache_overhead");
    device_ = devices::load_device_for_engine(p);
    engine_ = devices::resolved_engine(p);
    model_ = models::load_model_spec(p.node("model"), p.source_of("model"));
    ParamSchema ps = policies::PipelineConfig::schema();
    pipeline_ = policies::PipelineConfig::from_params(Params(p.node("pipeline"), ps, p.source_of("pipeline"), {}));
    device_.require_engine_values(pipeline_.compute_unit, model_, "pipeline.compute_unit");
    device_.require_engine_values(pipeline_.prefill_unit, model_, "pipeline.prefill_unit");
    device_.require_engine_values(pipeline_.decode_unit, model_, "pipeline.decode_unit");
    mode_ = p.text("mode");
    // Table 1's projection table times Q/K/V on the unit's roofline: it needs a compute unit, not
    // the NPU's graphs (checked here, so that validate fails where run would).
    if (mode_ == "table1") device_.unit(pipeline_.compute_unit, "percache_overhead projections (mode table1)");
    if (mode_ == "battery") device_.require_battery("percache_overhead mode battery");
    device_.require_storage("percache_overhead");
    // The query's prompt holds the chunks it loads (table1) or stores (battery).
    const char* chunks_key = mode_ == "table1" ? "loaded_chunks" : "new_chunks";
    if (p.integer(chunks_key) * p.integer("chunk_tokens") > p.integer("input_tokens"))
      p.fail(chunks_key, fmt::format("{} chunks of chunk_tokens {} do not fit in the query's input_tokens {}",
                                     p.integer(chunks_key), p.integer("chunk_tokens"), p.integer("input_tokens")));
    policies::percache_request_stages(pipeline_, p.real("qa_entry_kb"));  // its ConfigErrors at validation
  }

  void prepare(RunContext&) override {
    devices::Dram::check_fits(device_.dram, device_.name, {{"weights", model_.weight_bytes()}});
  }

  static ParamSchema schema() {
    ParamSchema s;
    s.node("thermal", devices::kThermalNoneDoc);
    s.node("device", "device profile");
    devices::add_engine_param(s);
    s.node("model", "model: name or {base: NAME, weight_dtype, activation_dtype, kv_dtype}");
    s.node("pipeline", "pipeline settings (fixed costs of embedding/matching/retrieval)");
    s.text("mode", std::nullopt, "table1 | battery").in({"table1", "battery"});
    s.integer("input_tokens", 349, "prompt tokens of the query (section 5.8: 349)").range(1, 1 << 20);
    s.integer("output_tokens", 136, "answer tokens (section 5.8: 136)").range(1, 1 << 20);
    s.integer("chunk_tokens", 152, "tokens of one 100-word knowledge chunk (Llama tokenizer)").range(1, 1 << 20);
    s.integer("loaded_chunks", 2, "QKV slices loaded for the query (table1; its prompt opens with their chunks)")
        .range(0, 1 << 20);
    s.integer("new_chunks", 1, "QKV slices written by a population (battery; its prompt opens with their chunks)")
        .range(0, 1 << 20);
    s.integer("populations", 51, "cache populations (battery)").range(1, 1 << 20);
    s.real("qa_entry_kb", 4.0, "QA entry size").range(1e-3, 1e6);
    s.integer("chunk_words", 100, "words per chunk (chunk text size = words x 6 bytes)").range(1, 1 << 20);
    s.integer("embedding_dim", 1024,
              "embedding dimension of the stored chunks and of the queries (Qwen3-Embedding-0.6B: 1024, fp32)")
        .range(1, 1 << 20);
    return s;
  }

  std::string default_plot() const override { return "percache_overhead.py"; }

  YAML::Node resolved_config(const YAML::Node& given) const override {
    YAML::Node out = yaml_clone(given);
    out["device"] = yaml_clone(device_.resolved);
    out["model"] = yaml_clone(model_.resolved);
    ParamSchema ps = policies::PipelineConfig::schema();
    out["pipeline"] = Params(p_.node("pipeline"), ps, p_.source_of("pipeline"), {}).resolved();
    return devices::with_engine(out, engine_);
  }

  void run(RunContext& ctx) override {
    const models::CostModel cost(model_);
    sim::StatGroup& stats = ctx.results.variant(mode_).stats;  // the phone's DRAM ledger, busy times, energy
    SimulatedRun run(device_, stats.child("device"),
                     ctx.timeline_process("percache_overhead " + mode_, {{"device", device_.name}}));
    run.device().dram().reserve("weights", model_.weight_bytes());
    const policies::PerCacheRequestPath path = policies::percache_request_path(cost, pipeline_, p_.real("qa_entry_kb"));
    QueryEmbeddings embeddings{sim::Rng(ctx.seed, ctx.run, "percache_overhead", "query embeddings"),
                               static_cast<std::size_t>(p_.integer("embedding_dim"))};
    if (mode_ == "table1") {
      run_table1(ctx, run, *path.pipeline, cost, embeddings);
    } else {
      run_battery(ctx, run, *path.pipeline, embeddings);
    }
  }

 private:
  // Each query's embedding: a random direction of the embedder's `embedding_dim` dimensions (two of
  // them are nowhere near tau_query, so every query misses the QA bank and runs the whole path).
  struct QueryEmbeddings {
    sim::Rng rng;
    std::size_t dim;
    std::vector<float> next() {
      const std::vector<double> v = rng.unit_sphere(dim);
      return std::vector<float>(v.begin(), v.end());
    }
  };

  policies::PerCacheQueryShape shape(std::int64_t chunks, std::int64_t output_tokens) const {
    return {p_.integer("input_tokens"), output_tokens, chunks, p_.integer("chunk_tokens")};
  }

  // A request the path served from the QA bank ran no LLM: not the operation or population timed.
  static void require_miss(const policies::pipeline::Served& s, const std::string& what) {
    if (s.answer_hit)
      throw Error(fmt::format("percache_overhead: {} was answered from the QA bank (similarity {}): its query "
                              "embedding is too close to an earlier one's (embedding_dim too small?)",
                              what, s.answer_similarity));
  }

  // Table 1: two queries of the table's shape, served one after the other on the idle phone, so each
  // operation of a request runs alone. The first (its `loaded_chunks` chunks new to the tree) gives
  // the look-up, retrieval, tree-matching, prefill (nothing reused) and decode rows; once its slices
  // are on flash, the second (the same chunks, another query) loads them whole: the loading row.
  void run_table1(RunContext& ctx, SimulatedRun& run, policies::pipeline::Pipeline& pipe,
                  const models::CostModel& cost, QueryEmbeddings& embeddings) const {
    const auto in = p_.integer("input_tokens"), out = p_.integer("output_tokens"), ct = p_.integer("chunk_tokens");
    const auto loaded = p_.integer("loaded_chunks");
    devices::Device& dev = run.device();
    // Table 1 times decoding `output_tokens` tokens apart from the prefill: the decode stage makes one
    // step per answer token after the prefill's, so the first query asks for one more.
    const policies::pipeline::Request first = policies::percache_query(0, shape(loaded, out + 1), 0, embeddings.next());
    const policies::pipeline::Request again = policies::percache_query(1, shape(loaded, out), 0, embeddings.next());
    policies::pipeline::Served fresh, reloaded;
    auto task = [&]() -> sim::Task<void> {
      const std::string owner = "percache", kv_owner = "percache/kv";  // named: see the g++ 12 note in pipeline.cpp
      co_await pipe.start(dev, owner);
      co_await pipe.serve(dev, kv_owner, first, fresh);
      if (fresh.store_write.state()) co_await fresh.store_write.done_event();
      co_await pipe.serve(dev, kv_owner, again, reloaded);
    };
    run.start(task(), "table1");
    run.run();
    require_miss(fresh, "Table 1's query");
    require_miss(reloaded, "Table 1's second query");
    if (fresh.matched_chunks != 0 || reloaded.matched_chunks != loaded)
      throw Error(fmt::format("percache_overhead: Table 1's second query found {} of its {} slices stored (the "
                              "first {}): the tree's storage limit cannot hold them",
                              reloaded.matched_chunks, loaded, fresh.matched_chunks));
    const std::vector<std::string> op = {"Matching Question (embed + QA match)",
                                         "Knowledge Retrieval",
                                         "Matching QKV Cache",
                                         fmt::format("QKV Cache Loading ({} slices, UFS)", loaded),
                                         fmt::format("LLM Prefilling ({} tokens)", in),
                                         fmt::format("LLM Decoding ({} tokens)", out)};
    const std::vector<double> sim_s = {
        fresh.embed_s + fresh.qa_match_s, fresh.retrieval_s, fresh.kv_match_s, reloaded.split_s, fresh.prefill_s,
        // On the clock's integer ns (Served::decode_s is a difference of seconds).
        sim::to_seconds(sim::from_seconds(fresh.times.end_s) - fresh.first_token)};
    const std::vector<double> doc_s = {1.61, 3.94, 0.015, 1.03, 62.14, 10.95};
    std::vector<double> err;
    for (std::size_t i = 0; i < sim_s.size(); ++i) err.push_back(100.0 * (sim_s[i] - doc_s[i]) / doc_s[i]);
    auto& t = ctx.results.tables["latency"];
    t.add("operation", op);
    t.add("simulated_s", sim_s, "s");
    t.add("document_s", doc_s, "s");
    t.add("error_percent", err, "%");
    const auto& tree = dynamic_cast<const policies::pipeline::ChunkTreeReuse&>(pipe.reuse());
    const double slice_bytes = static_cast<double>(ct) * tree.bytes_per_token();
    const double text_bytes = static_cast<double>(p_.integer("chunk_words")) * 6.0;
    const double emb_bytes = static_cast<double>(p_.integer("embedding_dim")) * 4.0;
    auto& s = ctx.results.tables["storage"];
    s.add("component", std::vector<std::string>{"QA Bank entry", fmt::format("QKV Cache per chunk ({} tokens)", ct),
                                                "Knowledge Chunk (text + embedding)"});
    s.add("simulated_bytes", std::vector<double>{p_.real("qa_entry_kb") * 1e3, slice_bytes, text_bytes + emb_bytes},
          "bytes");
    s.add("document_bytes", std::vector<double>{4e3, 87e6, 16e3}, "bytes");
    add_projection_table(ctx, cost, in);
    ctx.results.summary = t;
    ctx.progress(format_table(s));
  }

  // Figure 20: `populations` queries served back to back, each a complete cache population: the
  // next one starts once the previous one's new slices are on flash.
  void run_battery(RunContext& ctx, SimulatedRun& run, policies::pipeline::Pipeline& pipe,
                   QueryEmbeddings& embeddings) const {
    const auto pops = p_.integer("populations"), fresh_chunks = p_.integer("new_chunks");
    devices::Device& dev = run.device();
    sim::Simulator& sim = run.sim();
    std::vector<std::int64_t> n, stored_slices;
    std::vector<double> pct, joules, seconds, request_j, request_s, stored_bytes;
    auto task = [&]() -> sim::Task<void> {
      const std::string owner = "percache", kv_owner = "percache/kv";  // named: see the g++ 12 note in pipeline.cpp
      co_await pipe.start(dev, owner);
      const double e0 = dev.energy_j();
      for (std::int64_t i = 1; i <= pops; ++i) {
        // Population i's chunks are new to the tree: its prefill reuses nothing, its slices are stored.
        const policies::pipeline::Request r = policies::percache_query(
            i - 1, shape(fresh_chunks, p_.integer("output_tokens")),
            static_cast<std::size_t>((i - 1) * fresh_chunks), embeddings.next());
        policies::pipeline::Served s;
        co_await pipe.serve(dev, kv_owner, r, s);
        require_miss(s, fmt::format("population {}", i));
        if (s.store_write.state()) co_await s.store_write.done_event();
        n.push_back(i);
        request_j.push_back(s.device_energy_j);
        request_s.push_back(s.times.end_s - s.times.start_s);
        stored_slices.push_back(s.stored.inserted);
        stored_bytes.push_back(s.stored.bytes);
        joules.push_back(dev.energy_j() - e0);
        pct.push_back(dev.battery_percent(dev.energy_j() - e0));
        seconds.push_back(sim::to_seconds(sim.now()));
      }
    };
    run.start(task(), "battery");
    run.run();
    auto& t = ctx.results.tables["battery"];
    t.add("populations", n, "count");
    t.add("battery_used_percent", pct, "%");
    t.add("energy_j", joules, "J");
    t.add("elapsed_s", seconds, "s");
    // Each population's request as the pipeline served it: the phone's energy from its start to its
    // answer, and what it stored (written after the answer, before the next population).
    auto& rec = ctx.results.variant(mode_).records;
    rec.add("population", n, "count");
    rec.add("request_s", request_s, "s");
    rec.add("request_energy_j", request_j, "J");
    rec.add("stored_slices", stored_slices, "count");
    rec.add("stored_bytes", stored_bytes, "bytes");
    h5::Table sum;
    sum.add("populations", std::vector<std::int64_t>{pops}, "count");
    sum.add("battery_used_percent", std::vector<double>{pct.back()}, "%");
    sum.add("document_percent", std::vector<double>{10.0 * static_cast<double>(pops) / 51.0}, "%");
    sum.add("seconds_per_population", std::vector<double>{seconds.back() / static_cast<double>(pops)}, "s");
    sum.add("joules_per_population", std::vector<double>{joules.back() / static_cast<double>(pops)}, "J");
    ctx.results.summary = sum;
  }

  // Figure 13 (section 5.3): the attention module's Q, K and V projections for User 0's query, one
  // layer each: 162, 55 and 113 ms naive. mobisim's per-layer roofline time of those operators in a
  // prefill of `in` tokens (the document does not give the query's length; Table 1's is used).
  void add_projection_table(RunContext& ctx, const models::CostModel& cost, std::int64_t in) const {
    const devices::ComputeUnitSpec& unit = device_.unit(pipeline_.compute_unit, "percache_overhead projections");
    const models::Work w = cost.prefill(models::PrefillShape{in, 0, 0, 1});
    std::vector<std::string> name;
    std::vector<double> sim_ms, doc_ms;
    const std::pair<models::OpKind, double> rows[] = {
        {models::OpKind::kQProj, 162}, {models::OpKind::kKProj, 55}, {models::OpKind::kVProj, 113}};
    for (const auto& [kind, doc] : rows)
      for (const auto& op : w.ops)
        if (op.kind == kind) {
          name.push_back(fmt::format("{} (one layer, {} tokens)", models::to_string(kind), in));
          sim_ms.push_back(1e3 * unit.op_seconds(op, model_.weight_dtype) / op.layers);
          doc_ms.push_back(doc);
        }
    auto& t = ctx.results.tables["projections"];
    t.add("operation", name);
    t.add("simulated_ms", sim_ms, "ms");
    t.add("document_ms", doc_ms, "ms");
  }

  Params p_;
  devices::DeviceProfile device_;
  YAML::Node engine_;  // the resolved engine profile (stored with results)
  models::ModelSpec model_;
  policies::PipelineConfig pipeline_;
  std::string mode_;
};

MOBISIM_REGISTER(Experiment, PerCacheOverheadExperiment, "percache_overhead",
                 "PerCache Table 1 (per-operation latency, per-item storage) and figure 20 (battery per population).")

}  // namespace
}  // namespace mobisim::experiments
