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

void DynaKvResidency::hold(devices::Device& device, const std::string& owner, std::int64_t prompt, std::int64_t answer) {
  const models::ModelSpec& m = *model_;
  const double per_token = m.kv_bytes_per_token();
  held_ = static_cast<double>(prompt + answer) * per_token * std::min(1.0, cache_ratio_);
  device.dram().reserve(owner, held_);
  prompt_ = prompt;
  steps_.clear();
  const std::uint64_t request = static_cast<std::uint64_t>(requests_++);
  if (cache_ratio_ >= 1 || answer < 2) return;
  // The request's session: its prompt as the prefill, one decode step per answer token after the first.
  traces::DriftingSpec s;
  s.n_layers = std::min(sim_layers_, m.n_layers);
  s.n_kv_heads = m.n_kv_heads;
  s.group = m.n_heads / m.n_kv_heads;
  s.head_dim = m.head_dim;
  s.prefill = static_cast<int>(prompt);
  s.decode = static_cast<int>(answer - 1);
  s.seed = seed_ + request;
  traces::DriftingStream stream(s, false);
  kvcluster::ReplayOptions opt;
  opt.placement = placement_;
  opt.entry_bytes = std::max<std::int64_t>(1, std::llround(per_token / (m.n_layers * m.n_kv_heads)));
  opt.cache_ratio = cache_ratio_;
  opt.replacement = cache_ratio_ > 0 ? replacement_ : nullptr;
  opt.accuracy_every = 0;
  const auto replayed = kvcluster::replay_stream(stream, {kvcluster::ReplayJob{policy_.get(), opt}}, {s.decode});
  const double scale = static_cast<double>(m.n_layers) / s.n_layers;
  for (const kvcluster::StepRecord& r : replayed.front().front().steps) {
    StepIo io;
    io.runs = std::llround(static_cast<double>(r.commands) * scale);
    io.read_bytes = static_cast<double>(r.read_bytes) * scale;
    std::int64_t written = 0;
    for (std::size_t l = 0; l < r.layer_write_bytes.size(); ++l) written += r.layer_write_bytes[l] + r.layer_moved_bytes[l];
    io.write_bytes = static_cast<double>(written) * scale;
    steps_.push_back(io);
  }
  // The prompt's K/V goes to flash as the prefill lays it out, in the background.
  sim::Simulator& sim = device.sim();
  sim.start(device.storage().write(static_cast<double>(prompt) * per_token, "kv offload"), "kv offload");
}

void DynaKvResidency::release(devices::Device& device, const std::string& owner) {
  device.dram().release(owner, held_);
  held_ = 0;
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
