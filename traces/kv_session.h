#pragma once
// Long-sequence decode sessions for cluster-based KV retrieval (seed 003, DynaKV):
// per (layer, KV head) the keys and values of every position, and per (layer,
// query head) the query of every decode step. Two sources behind one type:
//   - capture_kv_session: K, V, Q of the real transformer (models/kernel) while it
//     generates a sequence, so exact attention is available;
//   - generate_drifting_session: a documented generator of drifting, splitting
//     clusters for sequences longer than a small checkpoint reaches.
// Stored as HDF5 (format "mobisim-kv-session", traces/SCHEMA.md), so a capture
// from another runtime can be replayed.
#include <cstdint>
#include <string>
#include <vector>

#include "models/kernel/transformer.h"

namespace mobisim::traces {

struct KvSession {
  std::string source;  // "capture(<model>)" or "drifting(seed=...)"
  int n_layers = 0;
  int n_kv_heads = 0;
  int n_heads = 0;     // query heads; a multiple of n_kv_heads (GQA)
  int head_dim = 0;
  int prefill = 0;     // L0
  int decode = 0;      // T
  // Index layer * n_kv_heads + kv_head; [prefill + decode, head_dim] (keys after RoPE).
  std::vector<kernel::Mat> keys, values;
  // Index layer * n_heads + head; row t is the query of decode step t (position prefill + t).
  std::vector<kernel::Mat> queries;

  int tables() const { return n_layers * n_kv_heads; }
  int positions() const { return prefill + decode; }
  int kv_head_of(int head) const { return head / (n_heads / n_kv_heads); }
  // Throws InputError (naming `where`) when a dimension or matrix shape is inconsistent.
  void validate(const std::string& where) const;
};

// Runs `tokens` through the model (one causal pass, identical to step-by-step
// decoding) and keeps K/V of every position and Q of positions [prefill, n).
KvSession capture_kv_session(const kernel::Model& m, const std::vector<int>& tokens, int prefill);

// The drifting-cluster generator (section 2.3's distribution shift). Per (layer, KV head):
//   - `initial_centres` centres c_i ~ N(0, centre_scale^2 I), each with a velocity
//     v_i ~ N(0, drift_per_step^2 I): centre i at step t is c_i + v_i t;
//   - every `birth_every` decode steps a centre is born by splitting a random
//     existing one: the child is the parent's current position plus an offset of
//     norm `split_offset` in a random direction, with its own velocity;
//   - a prefill key picks an initial centre uniformly; a decode key picks, with
//     probability `p_recent`, one of the `recent_centres` newest centres, else any;
//     key = centre + N(0, key_noise^2 I); value ~ N(0, I);
//   - a query is `query_gain` x the centre of the current token's cluster with
//     probability `p_query_local`, else of a uniformly chosen centre, plus
//     N(0, query_noise^2 I): queries attend mostly to a few clusters;
//   - a query head keeps its previous step's centre with probability
//     `query_persistence` (a head attends the same region over many steps), else
//     draws a centre as above;
//   - GQA (`group` query heads per KV head): each further head of the group takes
//     the first head's centre with probability `query_head_correlation`, else
//     follows its own centre as above; every head has its own noise.
// Its defaults are not calibrated on a real capture (see the issue 9 report).
struct DriftingSpec {
  int n_layers = 8, n_kv_heads = 8, group = 1, head_dim = 64;
  int prefill = 512, decode = 4096;
  int initial_centres = 16;
  double centre_scale = 4.0, drift_per_step = 0.002, key_noise = 1.0;
  int birth_every = 128;
  double split_offset = 6.0;
  double p_recent = 0.5;
  int recent_centres = 4;
  double query_gain = 0.5, p_query_local = 0.7, query_noise = 0.5;
  double query_persistence = 0, query_head_correlation = 0;
  std::uint64_t seed = 1;
  void validate() const;  // ConfigError for non-positive sizes or probabilities outside [0, 1]
};
KvSession generate_drifting_session(const DriftingSpec& spec);

void write_kv_session(const KvSession& s, const std::string& path);
// InputError naming the file and object for a missing file, another format or a wrong shape.
KvSession read_kv_session(const std::string& path);

}  // namespace mobisim::traces
