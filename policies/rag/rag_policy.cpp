#include "policies/rag/rag_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "sim/error.h"

namespace mobisim::policies {

// An hour per fixed-cost step: beyond any phone measurement, and far from the simulated clock's
// int64-nanosecond limit (1e308 ms once overflowed it into a "negative timeout").
constexpr double kMaxFixedCostMs = 3.6e6;

ParamSchema PipelineConfig::schema() {
  ParamSchema s;
  s.text("compute_unit", std::string("cpu"), "device compute unit that runs the LLM (and the fixed-cost steps)");
  s.text("prefill_unit", std::string(""),
         "unit that prefills (and runs any other batched transformer work), e.g. npu; empty: compute_unit");
  s.text("decode_unit", std::string(""), "unit that decodes token by token; empty: compute_unit");
  s.integer("system_prompt_tokens", 64, "tokens of the system prompt (the root of every prompt)").range(0, 1000000);
  s.integer("top_k", 3, "knowledge chunks retrieved per query").range(1, 10000);
  s.integer("answer_tokens", 0, "fixed answer length; 0 uses the trace's reference answer length").range(0, 1000000);
  s.real("embed_query_ms", 0.0, "fixed cost of embedding a query (PerCache Table 1 measures 1610 ms incl. matching)")
      .range(0, kMaxFixedCostMs)
      .with_unit("ms")
      .zero_means_not_modelled();
  s.real("retrieval_ms", 0.0, "fixed cost of hybrid retrieval (PerCache Table 1: 3940 ms)").range(0, kMaxFixedCostMs).with_unit("ms")
      .zero_means_not_modelled();
  s.real("qa_match_ms", 0.0, "fixed cost of matching a query against a QA bank (cosine over entries)")
      .range(0, kMaxFixedCostMs)
      .with_unit("ms")
      .zero_means_not_modelled();
  s.real("kv_match_ms", 0.0, "fixed cost of matching retrieved chunks in a KV/QKV cache tree (Table 1: 15 ms)")
      .range(0, kMaxFixedCostMs)
      .with_unit("ms")
      .zero_means_not_modelled();
  return s;
}

PipelineConfig PipelineConfig::from_params(const Params& p) {
  PipelineConfig c;
  c.compute_unit = p.text("compute_unit");
  c.prefill_unit = p.text("prefill_unit").empty() ? c.compute_unit : p.text("prefill_unit");
  c.decode_unit = p.text("decode_unit").empty() ? c.compute_unit : p.text("decode_unit");
  c.system_prompt_tokens = p.integer("system_prompt_tokens");
  c.top_k = p.integer("top_k");
  c.answer_tokens_override = p.integer("answer_tokens");
  c.embed_query_ms = p.real("embed_query_ms");
  c.retrieval_ms = p.real("retrieval_ms");
  c.qa_match_ms = p.real("qa_match_ms");
  c.kv_match_ms = p.real("kv_match_ms");
  return c;
}

RagPipeline::RagPipeline(sim::Simulator& sim, devices::Device& device, const models::CostModel& cost,
                         const PipelineConfig& config, const traces::UserTrace& user, sim::StatGroup& stats,
                         std::shared_ptr<const KnowledgeIndex> knowledge)
    : sim_(sim),
      device_(device),
      cost_(cost),
      config_(config),
      user_(user),
      stats_(stats),
      knowledge_(std::move(knowledge)) {}

std::vector<std::int32_t> RagPipeline::retrieved_chunks(const traces::Query& q) const {
  const auto k = static_cast<std::size_t>(config_.top_k);
  // Only chunks already in the knowledge bank (Chunk::added_s <= now) can be retrieved.
  const sim::Time now = sim_.now();
  auto present = [&](std::size_t c) { return sim::from_seconds(user_.chunks[c].added_s) <= now; };
  if (!q.retrieved.empty()) {
    std::vector<std::int32_t> out;
    for (auto c : q.retrieved) {
      if (out.size() == k) break;
      if (present(static_cast<std::size_t>(c))) out.push_back(c);
    }
    return out;
  }
  // Fallback: cosine similarity of stored embeddings (ties broken by chunk id, so results are stable).
  const auto& chunks = user_.chunks;
  std::vector<std::pair<double, std::int32_t>> scored;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    if (!present(i)) continue;
    double s = 0;
    const auto& e = chunks[i].embedding;
    for (std::size_t j = 0; j < std::min(e.size(), q.embedding.size()); ++j) s += double(e[j]) * q.embedding[j];
    scored.emplace_back(-s, static_cast<std::int32_t>(i));
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < std::min(k, scored.size()); ++i) out.push_back(scored[i].second);
  return out;
}

std::int64_t RagPipeline::prompt_tokens(const traces::Query& q, const std::vector<std::int32_t>& chunks) const {
  std::int64_t n = config_.system_prompt_tokens + q.tokens;
  for (auto c : chunks) n += user_.chunks.at(static_cast<std::size_t>(c)).tokens;
  return n;
}

std::int64_t RagPipeline::answer_tokens(const traces::Query& q) const {
  if (config_.answer_tokens_override > 0) return config_.answer_tokens_override;
  return std::max<std::int64_t>(1, q.answer_tokens);
}

sim::Task<void> RagPipeline::embed(QueryRecord& rec) {
  if (config_.embed_query_ms <= 0) co_return;
  const sim::Time t0 = sim_.now();
  co_await device_.busy(config_.compute_unit, sim::from_ms(config_.embed_query_ms), "embed query", priority_);
  rec.embed_s += sim::to_seconds(sim_.now() - t0);
  add_energy(rec, config_.compute_unit, sim::to_seconds(sim_.now() - t0));
}

sim::Task<void> RagPipeline::retrieve(QueryRecord& rec) {
  if (config_.retrieval_ms <= 0) co_return;
  const sim::Time t0 = sim_.now();
  co_await device_.busy(config_.compute_unit, sim::from_ms(config_.retrieval_ms), "retrieve", priority_);
  rec.retrieval_s += sim::to_seconds(sim_.now() - t0);
  add_energy(rec, config_.compute_unit, sim::to_seconds(sim_.now() - t0));
}

sim::Task<void> RagPipeline::prefill(QueryRecord& rec, const models::PrefillShape& shape, const std::string& label) {
  const models::Work w = cost_.prefill(shape);
  const sim::Time t0 = sim_.now();
  co_await device_.compute_layers(config_.prefill_unit,
                                  device_.unit_cost(config_.prefill_unit, w, cost_.spec().weight_dtype, label),
                                  cost_.spec().n_layers, label, priority_);
  rec.prefill_s += sim::to_seconds(sim_.now() - t0);
  rec.flops += w.flops();
  rec.computed_tokens += shape.n_new - shape.n_reused_qkv;
  rec.reused_tokens += shape.n_cached + shape.n_reused_qkv;
  add_energy(rec, config_.prefill_unit, sim::to_seconds(sim_.now() - t0));
}

const devices::UnitCost& RagPipeline::decode_step(std::int64_t context, const std::string& label) {
  if (context < 0) throw Error(fmt::format("decode step at a negative context length {}", context));
  const auto i = static_cast<std::size_t>(context);
  if (i >= decode_steps_.size()) decode_steps_.resize(std::max(i + 1, 2 * decode_steps_.size()), devices::UnitCost{-1, 0, 0});
  devices::UnitCost& step = decode_steps_[i];
  if (step.seconds < 0) step = device_.unit_cost(config_.decode_unit, cost_.decode(context), cost_.spec().weight_dtype, label);
  return step;
}

sim::Task<void> RagPipeline::decode(QueryRecord& rec, std::int64_t context, std::int64_t n_tokens,
                                    const std::string& label) {
  // Each step is its own device request so that other work can interleave between tokens.
  const sim::Time t0 = sim_.now();
  for (std::int64_t i = 0; i < n_tokens; ++i) {
    const devices::UnitCost step = decode_step(context + i, label);
    co_await device_.compute_layers(config_.decode_unit, step, cost_.spec().n_layers, label, priority_);
    rec.flops += step.flops;
  }
  rec.decode_s += sim::to_seconds(sim_.now() - t0);
  add_energy(rec, config_.decode_unit, sim::to_seconds(sim_.now() - t0));
}

sim::Task<void> RagPipeline::load(QueryRecord& rec, double bytes, const std::string& label) {
  const sim::Time t0 = sim_.now();
  const double e0 = device_.storage().io_energy_j();
  co_await device_.storage().read(bytes, label);
  rec.load_s += sim::to_seconds(sim_.now() - t0);
  rec.bytes_loaded += bytes;
  add_storage_energy(rec, sim::to_seconds(sim_.now() - t0), device_.storage().io_energy_j() - e0);
}

sim::Task<void> RagPipeline::qa_match(QueryRecord& rec) {
  if (config_.qa_match_ms <= 0) co_return;
  const sim::Time t0 = sim_.now();
  co_await device_.busy(config_.compute_unit, sim::from_ms(config_.qa_match_ms), "qa match", priority_);
  rec.qa_match_s += sim::to_seconds(sim_.now() - t0);
  add_energy(rec, config_.compute_unit, sim::to_seconds(sim_.now() - t0));
}

sim::Task<void> RagPipeline::kv_match(QueryRecord& rec) {
  if (config_.kv_match_ms <= 0) co_return;
  const sim::Time t0 = sim_.now();
  co_await device_.busy(config_.compute_unit, sim::from_ms(config_.kv_match_ms), "kv match", priority_);
  rec.kv_match_s += sim::to_seconds(sim_.now() - t0);
  add_energy(rec, config_.compute_unit, sim::to_seconds(sim_.now() - t0));
}

sim::Task<void> RagPipeline::compute(QueryRecord& rec, const models::Work& work, const std::string& label) {
  const sim::Time t0 = sim_.now();
  co_await device_.compute_layers(config_.prefill_unit,
                                  device_.unit_cost(config_.prefill_unit, work, cost_.spec().weight_dtype, label),
                                  cost_.spec().n_layers, label, priority_);
  rec.prefill_s += sim::to_seconds(sim_.now() - t0);
  rec.flops += work.flops();
  add_energy(rec, config_.prefill_unit, sim::to_seconds(sim_.now() - t0));
}

sim::Task<void> RagPipeline::store(QueryRecord& rec, double bytes, const std::string& label) {
  if (bytes <= 0) co_return;
  const sim::Time t0 = sim_.now();
  const double e0 = device_.storage().io_energy_j();
  co_await device_.storage().write(bytes, label);
  rec.load_s += sim::to_seconds(sim_.now() - t0);
  add_storage_energy(rec, sim::to_seconds(sim_.now() - t0), device_.storage().io_energy_j() - e0);
}

double RagPipeline::estimate_compute_s(const models::Work& work) const {
  return device_.profile().compute_seconds(config_.prefill_unit, work, cost_.spec().weight_dtype, "pipeline");
}
double RagPipeline::estimate_read_s(double bytes) const {
  return bytes > 0 ? device_.profile().require_storage("pipeline").read_seconds(bytes) : 0.0;
}
double RagPipeline::estimate_write_s(double bytes) const {
  return bytes > 0 ? device_.profile().require_storage("pipeline").write_seconds(bytes) : 0.0;
}

// Energy above the idle floor: what doing this work costs compared with staying idle.
void RagPipeline::add_energy(QueryRecord& rec, const std::string& unit, double busy_s) const {
  rec.active_energy_j += device_.profile().marginal_energy_j(unit, busy_s, "pipeline");
}

void RagPipeline::add_storage_energy(QueryRecord& rec, double busy_s, double io_energy_j) const {
  rec.active_energy_j += io_energy_j - device_.profile().storage->idle_power_w * busy_s;
}

}  // namespace mobisim::policies
