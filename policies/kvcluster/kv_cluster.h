#pragma once
// Cluster-based KV retrieval for long-sequence decoding (seed 003, DynaKV,
// section 4 and Algorithm 1), as registered plug-ins of kind "kv_cluster_policy":
//
//   no_cluster  token-level top-k over every key (accuracy upper bound, scattered reads)
//   pqcache     static update: a new entry joins its nearest cluster, clusters never split
//   clusterkv   local update: new entries are re-clustered apart, in a local window
//   dynakv      running variance per cluster, head-specific tau_h, delayed split (Buf_j, B_max)
//
// State lives in one `ClusterTable` per (layer, KV head); a policy holds only
// its parameters and rewrites the table it is handed, so one policy object
// serves every head and a table can be inspected (tests, Table 5) between steps.
//
// Common parameters (every policy's schema starts with them):
//   tokens_per_cluster  int  32   prefill K-means uses M0 = ceil(L0 / tokens_per_cluster) clusters.
//                                 The document does not state M0; 32 matches its flash access
//                                 lengths (25-41 entries per run, Figure 12).
//   kmeans_iters        int  20   Lloyd rounds of every K-means (prefill, split, local window)
//   top_k               int  0    clusters retrieved per step (a count); 0: use top_k_percent
//   top_k_percent       real 10   clusters taken in similarity order until they hold at least
//                                 this percentage of the cached entries (Figure 15's x axis)
//   seed                int  1    seeds every K-means (per head and cluster: deterministic)
//   representatives     text dram where the representatives live between decode steps: dram
//                                 (every layer's, held persistently; read from no flash) or flash
//                                 (each layer's loaded beside its Q projection). Seed 003, section 6.1,
//                                 Pipeline 1: representatives "are typically cached persistently in
//                                 memory" and DynaKV "eliminates this static memory cost by storing
//                                 representatives on flash"; section 4.1: "These representatives are
//                                 stored in DRAM". So dynakv defaults to flash, the baselines to dram
//                                 (ClusterKV's own code keeps its centroids beside the compute and only
//                                 the K/V offloaded: sjtu-zhao-lab/ClusterKV at cb66a229,
//                                 clusterkv/clusterkv_utils/clusterkv_controller.py). For no_cluster
//                                 the representatives are every key.
//
// Definitions used throughout (kept in double precision):
//   representative r_j = mean of the cluster's keys (eq. 4);
//   variance sigma_j^2 = (1/n_j) sum_{k in C_j} ||k - r_j||^2 (mean squared distance);
//   similarity of query q to cluster j = q . r_j (the attention score of the centroid);
//   nearest cluster of a new key = smallest ||k - r_j||^2 (the K-means assignment rule).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "models/kernel/transformer.h"
#include "policies/kvcluster/cluster_scan.h"
#include "sim/params.h"

namespace mobisim::policies::kvcluster {

// Where an entry currently is. Buffered entries (DynaKV's Buf_j) sit in DRAM
// waiting for their cluster to be loaded and split; every other entry is on flash.
enum class Residence : std::uint8_t { kFlash, kBuffer };

struct Cluster {
  std::vector<int> members;   // sequence positions on flash, in the order they joined
  std::vector<int> buffered;  // Buf_j: positions waiting in DRAM (DynaKV only)
  bool split_pending = false; // f_j = Split
  bool alive = true;          // false once merged away (never reused: ids are stable)
  std::int64_t n = 0;         // |C_j| counted in the statistics (members only)
  std::vector<double> centroid;  // r_j
  double variance = 0;           // sigma_j^2
  int last_update_step = -1;     // decode step of the last append or split (-1: prefill)
  bool local_window = false;     // ClusterKV's not-yet-clustered recent entries (DRAM, always attended)
  int size() const { return static_cast<int>(members.size() + buffered.size()); }
};

// The queries of one KV head's GQA group at one decode step: one pointer per query head (head_dim
// floats each), the group's first head first.
using QueryGroup = std::span<const float* const>;

struct TopK {
  int clusters = 0;        // > 0: a fixed count of clusters
  double percent = 10.0;   // otherwise: clusters until this share (%) of all entries is covered
};

// All keys of one (layer, KV head) and their partition into clusters.
class ClusterTable {
 public:
  explicit ClusterTable(int head_dim, int head = 0);

  int head_dim() const { return dim_; }
  int head() const { return head_; }
  int n_entries() const { return static_cast<int>(cluster_of_.size()); }
  // Clusters holding at least one entry (members or buffered), kept as they change: a decode step
  // asks for it per table, where counting walked every cluster.
  int n_alive() const { return n_live_; }
  // The same counted over the clusters (check_invariants compares the two).
  int count_alive() const;
  const float* key(int pos) const { return keys_.data() + static_cast<std::size_t>(pos) * dim_; }
  int cluster_of(int pos) const { return cluster_of_[pos]; }
  Residence residence(int pos) const { return residence_[pos]; }
  const std::vector<Cluster>& clusters() const { return clusters_; }
  const Cluster& cluster(int c) const { return clusters_[c]; }
  int step() const { return step_; }
  std::int64_t total_buffered() const { return total_buffered_; }
  // Entries that are on no flash page and live in DRAM only: DynaKV's buffers Buf_j and ClusterKV's
  // not-yet-clustered local window (the DRAM ledger's kv/dram_only, experiments/dynakv_dram.h).
  std::int64_t dram_only_entries() const {
    return total_buffered_ + (window_ >= 0 ? static_cast<std::int64_t>(clusters_[window_].members.size()) : 0);
  }
  // DynaKV's head-specific split threshold tau_h (0 until a policy sets it).
  double threshold() const { return tau_; }
  void set_threshold(double tau) { tau_ = tau; }
  // ClusterKV: the local-window cluster (created on first use).
  int local_window();
  int local_window_id() const { return window_; }  // -1 when there is none
  // Moves positions out of the cluster they are in and into a new cluster.
  int regroup(const std::vector<int>& positions);

  // Appends a key (next sequence position) without placing it in any cluster yet.
  int append_key(const float* k);
  // Partitions every key appended so far (all unassigned) by K-means into
  // ceil(n / tokens_per_cluster) clusters with centroid representatives (eq. 4).
  void initial_partition(int tokens_per_cluster, int iters, std::uint64_t seed);
  // A new cluster holding exactly `positions` (unassigned or moved), statistics recomputed.
  int make_cluster(const std::vector<int>& positions);

  // Adds `pos` to cluster c on flash and updates n, r, sigma^2 in O(d) (Welford).
  void add_entry(int c, int pos);
  // Parks `pos` in Buf_c (DRAM) and flags the cluster for a split.
  void buffer_entry(int c, int pos);
  // 2-means over the members and buffered entries of c: one child keeps id c,
  // the other becomes a new cluster (its id is returned; -1 when c cannot be
  // split because all its keys coincide). Buffered entries join a child on flash.
  int split(int c, int iters, std::uint64_t seed);
  // Moves the buffered entries of c into its members without splitting.
  void flush_buffer(int c);
  void recompute_stats(int c);
  void mark_updated(int c) { clusters_[c].last_update_step = step_; }
  void next_step() { ++step_; }

  // sigma^2 of cluster c if `k` joined it (the UpdateVar of Algorithm 1; c unchanged).
  double variance_with(int c, const float* k) const;
  int nearest_cluster(const float* k) const;
  double similarity(int c, const float* q) const;
  // Live clusters ranked by q . r_j (ties: lower id), cut by `top`.
  std::vector<int> select(const float* q, const TopK& top) const;
  // GQA: every query head of the group selects its own top clusters and the KV head retrieves
  // the union: the first head's selection in rank order, then each further head's new clusters.
  std::vector<int> select_union(QueryGroup qs, const TopK& top) const;
  // Positions of the given clusters (members and buffered).
  std::vector<int> positions_of(const std::vector<int>& cs) const;
  // Mean variance over live clusters with at least two entries (Table 5), weighted by size.
  double mean_variance() const;
  // Whether selection first tries the candidates above the last selection's end (the default) or
  // always ranks every candidate; the selections are equal either way (tests compare the two).
  void set_rank_floor(bool on) { use_rank_floor_ = on; }
  // Selections found above the floor (the rest ranked every candidate), for tests and profiles.
  std::int64_t rank_floor_hits() const { return floor_hits_; }
  // Throws Error when an invariant is broken: every position in exactly one
  // live cluster, on flash xor in that cluster's buffer; buffer totals agree.
  void check_invariants() const;

 private:
  std::vector<double> centroid_of(const std::vector<int>& positions) const;
  // Copies cluster c's centroid into the contiguous mirror the scans run over.
  void sync_centroid(int c);
  // A copy of every centroid (kept in step with Cluster::centroid) in the panels the scans of
  // selection and assignment run over (policies/kvcluster/cluster_scan.h).
  CentroidPanels centroids_;
  // Scratch of select / nearest_cluster, kept so a decode step allocates nothing there
  // (a table is only ever used by one thread at a time).
  // Per cluster: alive, with members on flash and not ClusterKV's window (what select and
  // nearest_cluster consider), kept beside the scans so they do not touch every Cluster.
  std::vector<char> candidate_;
  void refresh_candidate(int c);  // and refresh_live
  // Per cluster: alive and not empty (what n_alive counts), and their number.
  std::vector<char> live_;
  int n_live_ = 0;
  void refresh_live(int c);
  // The clusters select considers (candidate_) and their sizes, into scratch_cand_ / _size_, once
  // per selection (candidates_gathered_ is reset when the table's scores are taken).
  void gather_candidates() const;
  mutable bool candidates_gathered_ = false;
  mutable std::vector<int> scratch_cand_, scratch_cand_size_;
  // select's ranking of the gathered candidates by precomputed scores (rows of them; similarity beyond),
  // for query head `slot` of the group (whose last selection's end it remembers: rank_floor).
  std::vector<int> select_scored(const double* scores, int rows, const float* q, const TopK& top, int slot) const;
  // Into `cand`: the candidates scoring at least `floor_score`; true when they hold `need` (entries, or
  // clusters by count), so that they contain the selection (no score NaN).
  bool keep_at_least(const double* scores, int rows, const float* q, double floor_score, double need, bool by_count,
                     std::vector<std::pair<double, int>>& cand) const;
  // Into `cand`: every candidate, less those keep_top_bins shows cannot be selected.
  void keep_ranked_candidates(const double* scores, int rows, const float* q, double need, bool by_count,
                              std::vector<std::pair<double, int>>& cand) const;
  // The score above which query head `slot`'s next selection is looked for first (NaN: none yet).
  // Only where the search starts: the selection is the same whatever it holds.
  double& rank_floor(int slot) const;
  mutable std::vector<double> scratch_floor_;
  bool use_rank_floor_ = true;
  mutable std::int64_t floor_hits_ = 0;
  // Drops the (score, cluster) candidates that cannot be in a selection needing `need` (entries,
  // or clusters when by_count), so the heap orders only the rest; [lo, hi]: the scores' range.
  void keep_top_bins(std::vector<std::pair<double, int>>& cand, double lo, double hi, double need,
                     bool by_count) const;
  mutable Eigen::VectorXd scratch_scores_;
  mutable std::vector<double> scratch_query_, scratch_multi_;  // queries (or a key) in double; every head's scores
  mutable std::vector<char> scratch_taken_;
  mutable std::vector<std::uint8_t> scratch_bins_;
  mutable std::vector<std::pair<double, int>> scratch_heap_, scratch_above_;
  int dim_;
  int head_;
  int step_ = 0;
  std::vector<float> keys_;
  std::vector<int> cluster_of_;
  std::vector<Residence> residence_;
  std::vector<Cluster> clusters_;
  std::int64_t total_buffered_ = 0;
  double tau_ = 0;
  int window_ = -1;
};

// What one decode step did to one head's table.
struct StepOutcome {
  std::vector<int> selected;      // clusters retrieved for this step's attention (P_req)
  std::vector<int> forced_loads;  // clusters loaded only to split (buffer full, B_max): extra I/O
  std::vector<int> updated;       // clusters appended to or split this step
  std::vector<int> created;       // clusters created this step (split children, local clusters)
  std::vector<int> attended;      // positions attended (selected clusters + always-resident entries)
  int splits = 0;
  double cluster_flops = 0;       // selection, assignment, variance and split arithmetic
};

class KvClusterPolicy {
 public:
  static constexpr const char* kRegistryKind = "kv_cluster_policy";
  virtual ~KvClusterPolicy() = default;
  // Checks head-specific parameters against the number of (layer, KV head) tables.
  virtual void check_heads(int n_heads) const { (void)n_heads; }
  // The prefill: `keys` [L0, head_dim] become positions 0..L0-1 and are partitioned.
  virtual void prefill(ClusterTable& t, const kernel::Mat& keys) const;
  // One decode step (Algorithm 1's loop body) on the clusters `selected` for it: the union of the
  // top clusters of the group's `heads` query heads (ClusterTable::select_union), taken by the caller
  // before the table changes (the replay needs the same selection for its cache); then place k_new.
  virtual StepOutcome decode_selected(ClusterTable& t, std::vector<int> selected, int heads, const float* k_new) const = 0;
  // The same, selecting with the group's queries first.
  StepOutcome decode_step(ClusterTable& t, QueryGroup qs, const float* k_new) const {
    return decode_selected(t, t.select_union(qs, top_k()), static_cast<int>(qs.size()), k_new);
  }
  // The same for a group of one query head.
  StepOutcome decode_step(ClusterTable& t, const float* q, const float* k_new) const {
    const float* one[1] = {q};
    return decode_step(t, QueryGroup(one), k_new);
  }
  const TopK& top_k() const { return top_; }
  // Whether a decode step loads each layer's representatives from flash (DynaKV, section 6.1) or
  // finds every layer's in DRAM (the baselines: the parameter `representatives`).
  bool representatives_on_flash() const { return representatives_on_flash_; }
  // What attention reads for query q: the top-k clusters (members and buffered
  // entries) plus ClusterKV's local window, which is always resident.
  std::vector<int> attended_positions(const ClusterTable& t, const float* q) const;

 protected:
  explicit KvClusterPolicy(const Params& p);
  int tokens_per_cluster_;
  int kmeans_iters_;
  TopK top_;
  std::uint64_t seed_;
  bool representatives_on_flash_;
};

// The parameters every kv_cluster_policy accepts (see the header comment); `representatives_default`
// is the policy's own place for its representatives ("dram" or "flash").
ParamSchema common_cluster_schema(const std::string& representatives_default = "dram");
// A seed for K-means on (head, cluster, step), so results never depend on call order across heads.
std::uint64_t cluster_seed(std::uint64_t seed, int head, int cluster, int step);
// Multiply-adds of one q . r_j (or distance) over M clusters of dimension d, as FLOPs.
inline double cluster_scan_flops(int m, int d) { return 2.0 * m * d; }

}  // namespace mobisim::policies::kvcluster
