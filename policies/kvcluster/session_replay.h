#pragma once
// Replays a KV decode session (traces/kv_session.h) through one cluster policy,
// its flash layout and a DRAM cluster cache, step by step, and records what
// each step reads: the clusters retrieved (P_req, seed 003 Algorithm 1), the
// extra loads forced by the delayed-split budget, the runs of contiguous pages
// on flash, cache hits, and (on request) the exact attention mass the
// retrieved entries capture.
//
// Choices the document leaves open, made here:
//   - GQA (ReplayOptions::gqa): every query head of a KV head's group selects its own
//     top clusters and the KV head retrieves their union (the group attends the union),
//     or the group's first query head selects for all;
//   - the co-retrieval matrix (eq. 8) is built from the first
//     `coretrieval_steps` decode queries, before any of them is replayed;
//   - the cache budget is cache_ratio x the KV bytes of the whole session.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "devices/storage.h"
#include "policies/kvcluster/cluster_cache.h"
#include "policies/kvcluster/flash_layout.h"
#include "policies/kvcluster/kv_cluster.h"
#include "traces/kv_session.h"
#include "traces/kv_stream.h"

namespace mobisim::policies::kvcluster {

enum class GqaSelection { kUnion, kFirstHead };
// "union" or "first_head"; InputError otherwise.
GqaSelection gqa_selection_from_string(const std::string& s);

struct ReplayOptions {
  GqaSelection gqa = GqaSelection::kUnion;
  Placement placement = Placement::kInterCluster;
  std::int64_t entry_bytes = 256;  // K + V of one position of one KV head (2 x head_dim x bytes per element)
  std::int64_t page_bytes = 4096;
  int hot_buffers = 8;
  ReadMerge read_merge = ReadMerge::kPageRuns;
  double cache_ratio = 0.0;
  std::shared_ptr<const ClusterReplacement> replacement;  // null: no cache
  int coretrieval_steps = 32;
  // Exact attention over the whole context (O(context) per table and query head) for the
  // attention mass captured, on every N-th decode step (steps 0, N, 2N, ...); 0: never.
  int accuracy_every = 0;
  // With a storage spec, every layer's reads are timed on a simulated device. Its load_ns_per_byte
  // is the loading thread's: DynaKV loads with one dedicated thread (seed 003, section 7), which
  // copies what it read into the runtime's KV buffers one read after another, so a layer pays it
  // serially on every byte it reads (whole pages: a buffered read copies the pages it brought into
  // the page cache, the path whose merging ReadMerge::kPageRuns models), after the flash reads.
  std::optional<devices::StorageSpec> storage;
};

struct StepRecord {
  std::int64_t read_bytes = 0;      // pages read from flash
  std::int64_t wanted_bytes = 0;    // entry bytes the reads were for
  std::int64_t forced_bytes = 0;    // pages read only to split (B_max)
  std::int64_t commands = 0;        // runs issued
  std::int64_t hit_bytes = 0;       // retrieved from the DRAM cache
  std::int64_t attended = 0;        // entries attended, summed over tables
  int splits = 0;
  double cluster_flops = 0;
  double io_seconds = 0;            // sum over layers of the simulated read time
  // Per layer (section 6.1's two pipelines): the retrieval of P_req minus cache hits plus forced
  // loads (on the critical path), the prefetch of the cached clusters (overlapped with the previous
  // layer's attention and FFN), the flash writes of the step's offload (new entries, pool moves),
  // and the representatives the selection compares against (loaded beside the Q projection).
  std::vector<double> layer_io_seconds;
  std::vector<double> layer_prefetch_seconds;
  std::vector<std::int64_t> layer_write_bytes;
  std::vector<std::int64_t> layer_moved_bytes;
  std::vector<std::int64_t> layer_representatives;
  // The bytes of every read run the step issues, for a simulated device to time as requests
  // (experiments/dynakv_step_events.h), layer after layer: its retrieval runs (the missed clusters',
  // then the forced loads', in the order layer_io_seconds admits them), then its prefetch runs.
  // Kept compact (a figure keeps millions of steps, each dozens of runs): per list its count, then
  // each run, as variable-length numbers (whole pages in a byte when under 64); retrieval_runs(l)
  // and prefetch_runs(l) decode them.
  std::vector<std::uint8_t> run_code;
  std::vector<std::int64_t> retrieval_runs(int layer) const { return runs_of_list(2 * layer); }
  std::vector<std::int64_t> prefetch_runs(int layer) const { return runs_of_list(2 * layer + 1); }
  // Appends one list of runs to run_code (the step's lists in order: layer 0's retrieval, its prefetch, layer 1's, ...).
  void append_runs(std::span<const std::int64_t> bytes);
  // DRAM at the step's end (the DRAM ledger, experiments/dynakv_dram.h): the cluster cache's bytes
  // and the entries held in DRAM only (ClusterTable::dram_only_entries and the layout's page buffers,
  // FlashLayout::write_buffered_entries), summed over tables.
  std::int64_t cache_bytes = 0;
  std::int64_t dram_only_entries = 0;
  double mass = 0;                  // mean attention mass captured (when mass_measured)
  bool mass_measured = false;       // this step was sampled by accuracy_every

 private:
  // The k-th list of run_code; none past the recorded ones.
  std::vector<std::int64_t> runs_of_list(int k) const;
};

struct ReplaySummary {
  std::vector<StepRecord> steps;
  // Entries per read run over every run of every step (Figure 12), kept as running totals.
  std::int64_t run_count = 0, run_entries_sum = 0;
  int run_entries_max = 0;
  // The same reads counted in byte-contiguous pieces (entry granularity, no page merging).
  std::int64_t piece_count = 0, piece_entries = 0;
  int longest_piece = 0;
  double mean_variance = 0;         // Table 5, averaged over tables at the end
  int clusters_end = 0;             // live clusters summed over tables
  FlashStats flash;                 // summed over tables
  std::int64_t cache_hits = 0, cache_misses = 0, cache_peak_bytes = 0;
  std::int64_t kv_bytes_end = 0;    // entry bytes of the whole session (every table), what a packed layout stores
  std::int64_t max_representatives = 0;  // most representatives live in one layer at any step
  // Table 2: of the clusters updated at step s, the share retrieved within t steps (t = 1, 2, 4, 8, 16).
  std::vector<double> updated_retrieved_within;
};

// Exact softmax attention of one query over keys [0, n): the unnormalised weights exp(s - max)
// and their sum; the mass a subset of positions captures is its share of the sum.
struct ExactScores {
  Eigen::VectorXf weights;
  double total = 0;
  double mass_of(const std::vector<int>& subset) const;  // positions outside [0, n) are ignored
};
ExactScores exact_scores(const kernel::Mat& keys, int n, const float* q);

// Exact softmax attention of `q` over rows [0, n) of `keys`; returns the mass on `subset` (positions < n).
double attention_mass(const kernel::Mat& keys, int n, const float* q, const std::vector<int>& subset);

// The exact attention of the session's query heads at one decode step, computed on first use and
// kept until another step is asked for. It depends only on the session (keys and queries), not on
// the policy, so replays of one session that advance step by step together share it: the
// O(context) scores of a step are computed once instead of once per policy.
class ExactAttention {
 public:
  // `stride`: decode steps between the steps that will be asked for (accuracy_every); the scores
  // of the next few of them are computed together, in one pass over the keys.
  // `row_block`: key rows per block of that pass when the first of the steps sees a single key (the
  // Eigen fallback; otherwise key_scores reads each row once for every step, whatever the block).
  explicit ExactAttention(const traces::KvSession& s, int stride = 1, int row_block = 256);
  // The same over a stream, which must keep its keys (KvStream::keeps_keys) and outlive this.
  explicit ExactAttention(traces::KvStream& s, int stride = 1, int row_block = 256);
  ~ExactAttention();
  // Query head `head_in_group` of table (layer x KV head) `table`'s GQA group at `step`, over keys [0, n).
  const ExactScores& scores(int step, int table, int head_in_group, int n);

 private:
  static constexpr int kLookahead = 16;  // steps computed per pass over the keys
  struct Entry {
    int n = -1;
    ExactScores scores;
  };
  struct Slot {
    int base = -1;  // step of ahead[0]; ahead[k] is step base + k x stride
    std::vector<Entry> ahead;
  };
  std::unique_ptr<traces::SessionStream> own_;  // the stream over a KvSession given to the constructor
  traces::KvStream* stream_;
  int stride_;
  int row_block_;  // key rows per block (256: 128 KB at head_dim 128)
  std::vector<Slot> slots_;
};

// One policy's replay of a session, a decode step at a time (replay_session runs it to the end).
class SessionReplay {
 public:
  SessionReplay(const traces::KvSession& s, const KvClusterPolicy& policy, ReplayOptions opt);
  // The same over a stream (it must outlive the replay); a step makes the stream draw that far.
  SessionReplay(traces::KvStream& s, const KvClusterPolicy& policy, ReplayOptions opt);
  ~SessionReplay();
  SessionReplay(SessionReplay&&) noexcept;
  SessionReplay& operator=(SessionReplay&&) = delete;
  // Replays the next decode step (InputError past the session's last one); the exact attention
  // mass, when this step measures it, comes from `exact` (made for the same session).
  void step(ExactAttention& exact);
  // Appends the next `count` positions without a query and without retrieving anything: a later
  // turn of a conversation, whose prompt's new tokens (and the last answer token, whose K/V that
  // prefill computes) join the clusters kept from the turns before. Each is placed by the policy's
  // own update of a decode step with nothing selected (DynaKV: Algorithm 1's append, buffer, or split
  // when B_max forces a load, applied through the prefill as seed 003's Discussion 1 allows; PQCache:
  // its nearest cluster; ClusterKV: its local window; no_cluster: a singleton), then laid out on
  // flash. No K-means over what is already clustered. The record holds their I/O: the forced loads'
  // reads (forced_bytes, commands) and the layout's writes; steps() does not list it. The stream
  // must reach that far (DriftingStream::extend).
  StepRecord append(int count);
  // Replaces the DRAM cluster cache by an empty one of `capacity_bytes` (0: none) from now on.
  void reset_cache(std::int64_t capacity_bytes);
  // Positions placed so far (prefill, decode steps and appended ones), and the live clusters of every table.
  int positions() const;
  std::int64_t live_clusters() const;
  // The decode steps' records so far, moved out (summary() and finish() then lack them).
  std::vector<StepRecord> take_steps();
  // Final statistics; call once, after the last step.
  ReplaySummary finish();
  // The statistics so far, as finish() would give them after this step (the replay goes on).
  ReplaySummary summary() const;

 private:
  struct State;
  void init(std::unique_ptr<traces::SessionStream> own, traces::KvStream& s, const KvClusterPolicy& policy,
            ReplayOptions opt);
  // Adds the tables', layouts' and cache's statistics to `sum`, as of `decoded` decode steps.
  void fill_end_statistics(ReplaySummary& sum, int decoded) const;
  std::unique_ptr<State> st_;
};

ReplaySummary replay_session(const traces::KvSession& s, const KvClusterPolicy& policy, const ReplayOptions& opt);

// Several policies over one session, step by step together so that the exact attention of each
// step is computed once for all of them. Equal, replay by replay, to replay_session of each.
struct ReplayJob {
  const KvClusterPolicy* policy = nullptr;
  ReplayOptions options;
};
std::vector<ReplaySummary> replay_sessions(const traces::KvSession& s, const std::vector<ReplayJob>& jobs);
// The same over a stream, drawn as the replays go and released behind them, with the summaries
// taken after decode step T - 1 for every T of `lengths` (ascending, each in [1, decode]): result
// [k][j] is job j at lengths[k]. A replay reads nothing past its step, so each equals the replay
// of a session of lengths[k] decode steps, provided no option depends on the session's length
// (no DRAM cache, whose budget is a share of the whole session) and every length reaches the
// co-retrieval window (coretrieval_steps).
std::vector<std::vector<ReplaySummary>> replay_stream(traces::KvStream& s, const std::vector<ReplayJob>& jobs,
                                                      const std::vector<int>& lengths);

}  // namespace mobisim::policies::kvcluster
