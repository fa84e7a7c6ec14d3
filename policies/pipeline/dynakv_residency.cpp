#include "policies/pipeline/dynakv_residency.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "policies/kvcluster/flash_io.h"
#include "policies/kvcluster/session_replay.h"
#include "sim/registry.h"
#include "traces/kv_stream.h"

namespace mobisim::policies::pipeline {

namespace {
YAML::Node or_impl(const Params& p, const std::string& key, const char* impl) {
  return p.has(key) ? p.node(key) : YAML::Load(fmt::format("{{impl: {}}}", impl));
}
}  // namespace

DynaKvResidency::DynaKvResidency(const Params& p)
    : policy_(Registry<kvcluster::KvClusterPolicy>::instance().create(or_impl(p, "policy", "dynakv"),
                                                                      p.source_of("policy"))),
      replacement_(kvcluster::make_replacement(p.node("replacement"), p.source_of("replacement"))),
      placement_(kvcluster::placement_from_string(p.text("placement"))),
      cache_ratio_(p.real("cache_ratio")),
      sim_layers_(static_cast<int>(p.integer("sim_layers"))),
      seed_(static_cast<std::uint64_t>(p.integer("seed"))) {}

DynaKvResidency::~DynaKvResidency() = default;

ParamSchema DynaKvResidency::schema() {
  ParamSchema s;
  s.node("policy", "kv_cluster_policy: {impl: dynakv|pqcache|clusterkv|no_cluster, ...} (default dynakv)");
  s.real("cache_ratio", 0.1, "DRAM cluster cache as a share of the request's K/V (1: all in DRAM, no reads)")
      .range(0.0, 1.0);
  s.node("replacement", "kv_cluster_replacement of the cache: {impl: cluster_aligned|lru|lfu} (default cluster_aligned)");
  s.text("placement", std::string("inter"), "flash placement: inter (co-retrieval order), intra, sequence")
      .in({"inter", "intra", "sequence"});
  s.integer("sim_layers", 2, "layers replayed; a step's reads are scaled by n_layers / sim_layers").at_least(1);
  s.integer("seed", 1, "seed of the generated keys and queries (request i: seed + i)").non_negative();
  return s;
}

void DynaKvResidency::begin(const models::CostModel& cost) {
  model_ = std::make_unique<models::ModelSpec>(cost.spec());
  policy_->check_heads(std::min(sim_layers_, model_->n_layers) * model_->n_kv_heads);
}

// A KV session kept between turns: its generated stream and the policy's replay of it.
struct DynaKvResidency::Session {
  std::unique_ptr<traces::DriftingStream> stream;
  std::unique_ptr<kvcluster::ExactAttention> exact;  // what a replay step takes (no accuracy measured)
  std::unique_ptr<kvcluster::SessionReplay> replay;
  std::int64_t entry_bytes = 0;
  double index_held = 0;  // representatives in the ledger
};

std::unique_ptr<DynaKvResidency::Session> DynaKvResidency::open_session(std::int64_t prompt, std::int64_t decode,
                                                                      std::uint64_t request) const {
  const models::ModelSpec& m = *model_;
  traces::DriftingSpec s;
  s.n_layers = std::min(sim_layers_, m.n_layers);
  s.n_kv_heads = m.n_kv_heads;
  s.group = m.n_heads / m.n_kv_heads;
  s.head_dim = m.head_dim;
  s.prefill = static_cast<int>(prompt);
  s.decode = static_cast<int>(decode);
  s.seed = seed_ + request;
  auto out = std::make_unique<Session>();
  out->stream = std::make_unique<traces::DriftingStream>(s, false);
  kvcluster::ReplayOptions opt;
  opt.placement = placement_;
  opt.entry_bytes = std::max<std::int64_t>(1, std::llround(m.kv_bytes_per_token() / (m.n_layers * m.n_kv_heads)));
  opt.cache_ratio = cache_ratio_;
  opt.replacement = cache_ratio_ > 0 ? replacement_ : nullptr;
  opt.accuracy_every = 0;
  out->entry_bytes = opt.entry_bytes;
  out->exact = std::make_unique<kvcluster::ExactAttention>(*out->stream, 1);
  out->replay = std::make_unique<kvcluster::SessionReplay>(*out->stream, *policy_, opt);
  return out;
}

// The representatives' key bytes (half an entry each), scaled to the model's layers.
double DynaKvResidency::index_bytes(const Session& s) const {
  const double scale = static_cast<double>(model_->n_layers) / s.stream->shape().n_layers;
  return static_cast<double>(s.replay->live_clusters()) * static_cast<double>(s.entry_bytes / 2) * scale;
}

void DynaKvResidency::close_session(devices::Device& device, const SessionKey& key) {
  const auto it = sessions_.find(key);
  if (it == sessions_.end()) return;
  device.dram().release(key.first + "/index", it->second->index_held);
  sessions_.erase(it);
}

void DynaKvResidency::hold(devices::Device& device, const std::string& owner, const KvTurn& turn) {
  const models::ModelSpec& m = *model_;
  const double per_token = m.kv_bytes_per_token();
  const std::int64_t prompt = turn.prompt, answer = turn.answer;
  held_ = static_cast<double>(prompt + answer) * per_token * std::min(1.0, cache_ratio_);
  device.dram().reserve(owner, held_);
  prompt_ = prompt;
  steps_.clear();
  appended_ = prefilled_ = 0;
  ending_.reset();
  const std::uint64_t request = static_cast<std::uint64_t>(requests_++);
  if (cache_ratio_ >= 1) return;
  const SessionKey key{owner, turn.session};
  if (turn.session >= 0 && turn.ends_session) ending_ = key;
  auto it = turn.session >= 0 ? sessions_.find(key) : sessions_.end();
  // A prompt shorter than what the session holds does not continue it: start afresh.
  if (it != sessions_.end() && prompt < it->second->replay->positions()) {
    close_session(device, key);
    it = sessions_.end();
  }
  // The prompt as the prefill (a first turn) or appended (a later one), one decode step per answer
  // token after the first.
  const std::int64_t decode = std::max<std::int64_t>(0, answer - 1);
  sim::Simulator& sim = device.sim();
  std::unique_ptr<Session> fresh;
  Session* s = nullptr;
  if (it == sessions_.end()) {
    if (answer < 2) return;
    fresh = open_session(prompt, decode, request);
    s = fresh.get();
    prefilled_ = prompt;
    // The prompt's K/V goes to flash as the prefill lays it out, in the background.
    sim.start(device.storage().write(static_cast<double>(prompt) * per_token, "kv offload"), "kv offload");
  } else {
    s = it->second.get();
    const double scale = static_cast<double>(m.n_layers) / s->stream->shape().n_layers;
    appended_ = prompt - s->replay->positions();
    s->stream->extend(static_cast<int>(prompt + decode - s->stream->shape().prefill));
    const kvcluster::StepRecord placed = s->replay->append(static_cast<int>(appended_));
    std::int64_t written = 0;
    for (std::size_t l = 0; l < placed.layer_write_bytes.size(); ++l)
      written += placed.layer_write_bytes[l] + placed.layer_moved_bytes[l];
    // The new tokens' K/V and the clusters they split go to flash in the background; the clusters
    // loaded only to split (B_max) are read from it, beside the prefill.
    if (written > 0)
      sim.start(device.storage().write(static_cast<double>(written) * scale, "kv offload"), "kv offload");
    if (placed.commands > 0) {
      kvcluster::ReadRun run;
      const auto runs = std::max<std::int64_t>(1, std::llround(static_cast<double>(placed.commands) * scale));
      run.bytes = std::max<std::int64_t>(1, std::llround(static_cast<double>(placed.forced_bytes) * scale / runs));
      read_bytes_ += static_cast<double>(runs) * static_cast<double>(run.bytes);
      sim.start(kvcluster::read_runs(sim, device.storage(), std::vector<kvcluster::ReadRun>(runs, run)), "kv split load");
    }
    // This turn's cluster cache, cache_ratio x its K/V, starts empty.
    const std::int64_t total = (prompt + decode) * s->stream->shape().tables() * s->entry_bytes;
    s->replay->reset_cache(static_cast<std::int64_t>(cache_ratio_ * static_cast<double>(total)));
  }
  for (std::int64_t i = 0; i < decode; ++i) {
    s->replay->step(*s->exact);
    s->stream->release(s->replay->positions() - s->stream->shape().prefill);
  }
  const double scale = static_cast<double>(m.n_layers) / s->stream->shape().n_layers;
  for (const kvcluster::StepRecord& r : s->replay->take_steps()) {
    StepIo io;
    io.runs = std::llround(static_cast<double>(r.commands) * scale);
    io.read_bytes = static_cast<double>(r.read_bytes) * scale;
    std::int64_t written = 0;
    for (std::size_t l = 0; l < r.layer_write_bytes.size(); ++l) written += r.layer_write_bytes[l] + r.layer_moved_bytes[l];
    io.write_bytes = static_cast<double>(written) * scale;
    steps_.push_back(io);
  }
  if (turn.session < 0) return;  // the request's own: dropped with `fresh`
  if (fresh) sessions_[key] = std::move(fresh);
  // The session's representatives, as many as it has now, stay in DRAM until it ends.
  const std::string index_owner = owner + "/index";
  device.dram().release(index_owner, s->index_held);
  s->index_held = index_bytes(*s);
  device.dram().reserve(index_owner, s->index_held);
}

void DynaKvResidency::release(devices::Device& device, const std::string& owner) {
  device.dram().release(owner, held_);
  held_ = 0;
  if (ending_) close_session(device, *ending_);
  ending_.reset();
}

sim::Task<void> DynaKvResidency::step(devices::Device& device, std::int64_t context) {
  const std::int64_t i = context - prompt_;
  if (i < 0 || i >= static_cast<std::int64_t>(steps_.size())) co_return;
  const StepIo io = steps_[static_cast<std::size_t>(i)];
  sim::Simulator& sim = device.sim();
  if (io.write_bytes > 0) sim.start(device.storage().write(io.write_bytes, "kv offload"), "kv offload");
  if (io.runs <= 0) co_return;
  // Layer after layer, every run of a layer in flight together.
  const std::int64_t layers = model_->n_layers;
  const auto run_bytes = std::max<std::int64_t>(1, std::llround(io.read_bytes / static_cast<double>(io.runs)));
  read_bytes_ += static_cast<double>(io.runs) * static_cast<double>(run_bytes);
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::int64_t n = io.runs / layers + (l < io.runs % layers ? 1 : 0);
    if (n == 0) continue;
    kvcluster::ReadRun run;
    run.bytes = run_bytes;
    co_await kvcluster::read_runs(sim, device.storage(), std::vector<kvcluster::ReadRun>(static_cast<std::size_t>(n), run));
  }
}

MOBISIM_REGISTER(KvResidency, DynaKvResidency, "dynakv",
                 "DynaKV: the K/V in adaptive clusters on flash, a DRAM cluster cache; each decode step reads the "
                 "retrieved clusters that miss it (or pqcache / clusterkv / no_cluster).")

}  // namespace mobisim::policies::pipeline
