#pragma once
// Dimension-free statistics of a KV decode session, measured the same way on a real
// capture and on the drifting generator, so the generator's parameters can be set
// against real vectors where a capture reaches (traces/SCHEMA.md, "Generator
// calibration"). Each one is averaged over the session's (layer, KV head) tables.
#include <cstdint>

#include "traces/kv_session.h"

namespace mobisim::policies::kvcluster {

struct SessionStats {
  // Exact softmax attention mass of a decode query on its 10% highest-scoring cached keys
  // (how concentrated attention is: query_gain, p_query_local, query_noise).
  double top10_attention_mass = 0;
  // K-means of the prefill keys (tokens_per_cluster per cluster): within-cluster variance over
  // total key variance (how clustered keys are: key_noise against centre_scale).
  double within_over_total_variance = 0;
  // Share of decode keys farther from every prefill centroid than 95% of the prefill keys are
  // from theirs (how much the distribution shifts: drift, births, split_offset, p_recent).
  double novel_key_share = 0;
  // Positional structure (what Figure 12's strict sequence order sees): mean length of the
  // maximal runs of consecutive positions among a decode query's 10% highest-scoring keys,
  // i.e. the sequence-order read length at one entry per read unit (1/(1 - 0.1) = 1.11 when
  // the top keys are scattered uniformly; longer when attended keys form contiguous ranges).
  double top10_position_run = 0;
  // Label every key with its nearest prefill centroid: the share of neighbouring positions
  // (p, p + 1) with the same label over the share expected if positions were shuffled
  // (sum of squared label shares). 1 = no positional structure; > 1 = clusters are token ranges.
  double neighbour_same_cluster_lift = 0;
};

// `query_stride`: every how many decode steps a query is measured (attention is O(P d) each).
SessionStats session_stats(const traces::KvSession& s, int tokens_per_cluster, int query_stride, std::uint64_t seed);

}  // namespace mobisim::policies::kvcluster
