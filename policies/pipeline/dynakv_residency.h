#pragma once
// `dynakv`: the request's K/V on the phone's flash in DynaKV's adaptive clusters (seed 003), with
// a DRAM cluster cache of `cache_ratio` x the request's K/V; every decode step reads from flash
// the retrieved clusters that miss the cache. The clustering, the flash layout, the cache and its
// replacement are policies/kvcluster's, unchanged: per request, a KV session of the model's shape
// (traces::DriftingStream's generated keys and queries: prefill = the prompt, one decode step per
// answer token) is replayed through the configured kv_cluster_policy (dynakv, or its baselines
// pqcache, clusterkv, no_cluster) for `sim_layers` layers, and each step's reads (the runs of
// contiguous pages its misses and forced split loads resolve to) are scaled to the model's layers
// and issued on the phone's flash, layer after layer (a layer's retrieval needs its own query),
// every run of a layer in flight together, while the decode step computes (the decode stage waits
// for both). Each step's offload writes go to flash in the background, and so does the prompt's
// K/V when the request starts. DRAM holds the cache (cache_ratio x the K/V, in the ledger as
// "<app>/kv"). With cache_ratio 1 the whole K/V stays in DRAM: nothing is offloaded or read,
// exactly the `dram` residency.
//
// A conversation's turns (requests of one KV session, see KvTurn) share one clustered session: the
// first turn's prompt is partitioned by the policy's prefill (K-means), and every later turn adds
// only its new tokens (the new prompt, and the last answer token, whose K/V that prefill computes)
// to the clusters kept from the turns before, through the policy's own update (SessionReplay::append:
// DynaKV's append / delayed split, PQCache's nearest cluster, ClusterKV's local window, no_cluster's
// singletons), then decodes as before. The keys continue one generated stream (seed + the index of
// the session's first request). The layout's writes of the new tokens go to flash in the background
// and so do the forced split loads they cause (counted in the turn's reads). Between turns the
// session's representatives stay in DRAM ("<owner>/index" in the ledger, the key bytes of every
// live cluster, scaled to the model's layers); the cluster cache is emptied at the end of every turn
// and the next one starts cold. The turn that ends the session frees it.
//
// Parameters:
//   policy        kv_cluster_policy: {impl: dynakv|pqcache|clusterkv|no_cluster, ...} (default dynakv)
//   cache_ratio   DRAM cluster cache as a share of the request's K/V, [0, 1] (default 0.1)
//   replacement   kv_cluster_replacement of the cache: {impl: cluster_aligned|lru|lfu} (default cluster_aligned)
//   placement     flash placement: inter (co-retrieval order, DynaKV), intra, sequence (default inter)
//   sim_layers    layers replayed; reads are scaled by n_layers / sim_layers (default 2)
//   seed          seed of the generated keys and queries (request i uses seed + i) (default 1)
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "policies/kvcluster/cluster_cache.h"
#include "policies/kvcluster/flash_layout.h"
#include "policies/kvcluster/kv_cluster.h"
#include "policies/pipeline/kv_residency.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class DynaKvResidency : public KvResidency {
 public:
  explicit DynaKvResidency(const Params& p);
  ~DynaKvResidency() override;
  static ParamSchema schema();
  void begin(const models::CostModel& cost) override;
  using KvResidency::hold;
  void hold(devices::Device& device, const std::string& owner, const KvTurn& turn) override;
  void release(devices::Device& device, const std::string& owner) override;
  void end_session(devices::Device& device, const std::string& owner, std::int64_t session) override {
    close_session(device, {owner, session});
  }
  bool reads_per_step() const override { return cache_ratio_ < 1; }
  double read_bytes() const override { return read_bytes_; }
  sim::Task<void> step(devices::Device& device, std::int64_t context) override;

  // What one decode step reads and writes on the phone's flash (all layers).
  struct StepIo {
    std::int64_t runs = 0;       // read commands (runs of contiguous pages)
    double read_bytes = 0;       // pages read
    double write_bytes = 0;      // offload writes (new entries, moved clusters)
  };
  // The steps of the request held now (empty when nothing is offloaded).
  const std::vector<StepIo>& steps() const { return steps_; }
  // What the request held now added to the clusters before its decode: positions placed without a
  // K-means (a later turn's new tokens; 0 for a first turn or a request outside any session), and
  // positions partitioned by the policy's prefill (a first turn's prompt).
  std::int64_t appended_positions() const { return appended_; }
  std::int64_t prefilled_positions() const { return prefilled_; }
  // KV sessions kept now (between turns).
  std::size_t sessions() const { return sessions_.size(); }

 private:
  struct Session;
  using SessionKey = std::pair<std::string, std::int64_t>;  // (owner, KV session)
  // A fresh clustered session of `prompt` positions and `decode` steps (seed: request `request`).
  std::unique_ptr<Session> open_session(std::int64_t prompt, std::int64_t decode, std::uint64_t request) const;
  // Frees a kept session and its representatives in the ledger.
  void close_session(devices::Device& device, const SessionKey& key);
  double index_bytes(const Session& s) const;
  std::unique_ptr<kvcluster::KvClusterPolicy> policy_;
  std::shared_ptr<const kvcluster::ClusterReplacement> replacement_;
  kvcluster::Placement placement_;
  double cache_ratio_;
  int sim_layers_;
  std::uint64_t seed_;
  std::unique_ptr<models::ModelSpec> model_;  // set by begin()
  std::int64_t requests_ = 0, prompt_ = 0, appended_ = 0, prefilled_ = 0;
  double held_ = 0, read_bytes_ = 0;
  std::vector<StepIo> steps_;
  std::map<SessionKey, std::unique_ptr<Session>> sessions_;
  std::optional<SessionKey> ending_;  // the session the request held now ends
};

}  // namespace mobisim::policies::pipeline
