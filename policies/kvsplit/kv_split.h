#pragma once
// Compute-or-load strategies for a K/V cache held in a slower tier (seed 002:
// KVPR's ILP and its closed forms, Cake's two-pointer schedule), as registered
// plug-ins of kind "kv_split_strategy":
//
//   always_recompute, always_load, kvpr_ilp, kvpr_closed_form, kvpr_closed_form_q, cake
//
// A strategy turns a request (s positions, with or without Q) and the costs of
// the pieces (SplitCosts) into a plan: which positions are rebuilt on the
// compute stream and which are read on the copy stream, and the simulated time
// until K/V (and Q) of [0, s) are ready. Every plan recomputes a prefix [0, l)
// and loads the suffix [l, s) (Cake's blocks meet in one place), so one kernel
// oracle (`kernel::kvpr_assemble`) checks them all.
//
// Timing model (KVPR's ILP objective, seed 002 eq. 1, executed on the DES):
//   T(l) = X(l) + max( [Q(s)] + R(0, l), L(s - l) )
// X (layer inputs to recompute from) and L (K/V to load) share the copy link, so
// X goes first; the compute stream then rebuilds while the link loads. In the
// Q-aware setting Q(s) is computed on the compute stream by every strategy
// (attention needs Q of every position; the document's reading: "we require the
// computation of Q in addition to the acquisition of KV"), including always_load.
#include <cstdint>
#include <string>
#include <vector>

#include "policies/kvsplit/split_costs.h"

namespace mobisim::policies::kvsplit {

struct SplitRequest {
  std::int64_t s = 0;     // positions whose K/V are needed
  bool with_q = false;    // Q of all s positions must be computed too
};

struct SplitPlan {
  std::string strategy;
  std::int64_t s = 0;
  bool with_q = false;
  std::int64_t recomputed_tokens = 0;   // l: positions [0, l) rebuilt, [l, s) loaded
  std::int64_t block_tokens = 0;        // Cake: block size (0 for a single split point)
  std::vector<bool> computed_blocks;    // Cake: per block, true when computed
  double time_s = 0;                    // simulated time until K/V (and Q) of [0, s) are ready
  double compute_busy_s = 0;            // busy time of the compute stream
  double copy_busy_s = 0;               // busy time of the copy stream
};


// KVPR's objective for split l (seed 002 eq. 1; Q(s) added on the compute side when with_q).
double split_objective_s(const SplitCosts& costs, std::int64_t s, std::int64_t l, bool with_q);

// Runs split l on the discrete-event simulator: a copy-link process and a compute process.
SplitPlan simulate_split(const SplitCosts& costs, std::int64_t s, std::int64_t l, bool with_q);

// KVPR's ILP solved exactly: the integer l in [0, s] minimising split_objective_s (smallest l
// among ties). `q_aware` adds Q(s) to the compute side (the document's modified ILP).
std::int64_t ilp_split(const SplitCosts& costs, std::int64_t s, bool q_aware);

// The document's closed forms, rounded to the nearest integer and clamped to [0, s]:
//   l* = c1 * s*p*v_gpu / (2*h*v_com + p*v_gpu)                 (eq. 1 with recompute = load)
//   l* = c2 * s*(p*v_gpu - h*v_com) / (2*h*v_com + p*v_gpu)     (eq. 2, Q-aware)
std::int64_t closed_form_split(const AnalyticRates& r, std::int64_t s, double c1);
std::int64_t closed_form_split_q(const AnalyticRates& r, std::int64_t s, double c2);
// The unrounded real-valued l* (c = 1), for error analysis.
double closed_form_real(const AnalyticRates& r, std::int64_t s, bool q_aware);

struct CakeOptions {
  std::int64_t block_tokens = 64;
  double compute_block_overhead_us = 0;  // per block and layer: pointer check, stream sync, relaunch
  double load_block_overhead_us = 0;     // per block and layer on the copy stream
};
// Cake's two-pointer schedule (seed 002 Algorithm 1) on two concurrent simulated streams:
// the compute stream takes blocks from the front (computing Q of all s positions first when
// with_q), the copy stream from the back, each taking its next block when it is free, until
// the pointers meet. When both become free at once the compute stream claims first.
SplitPlan simulate_cake(const SplitCosts& costs, const SplitRequest& req, const CakeOptions& opt);

class KvSplitStrategy {
 public:
  static constexpr const char* kRegistryKind = "kv_split_strategy";
  virtual ~KvSplitStrategy() = default;
  virtual SplitPlan plan(const SplitCosts& costs, const SplitRequest& req) const = 0;
  // A strategy that decides block by block while the streams run (Cake) returns its blocks here:
  // the request pipeline's event path then replays that schedule on the device's queues instead
  // of one split point (null: one split point, the plan's).
  virtual const CakeOptions* block_schedule() const { return nullptr; }
};

}  // namespace mobisim::policies::kvsplit
