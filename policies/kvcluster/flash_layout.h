#pragma once
// Where the KV entries of one (layer, KV head) live on flash (seed 003 section 5),
// simulated byte-exact: every entry has a byte offset, every write and read is
// resolved to the 4 KB pages it touches, and a read becomes the runs of
// contiguous pages it really is (one storage command per run, so the UFS
// IOPS limit below ~24 KB, Figure 3b, decides its time in devices::Storage).
//
// Placements:
//   kSequence      strict sequence order: entry p at p x entry_bytes (the baseline);
//   kIntraCluster  each cluster contiguous, clusters in id order;
//   kInterCluster  each cluster contiguous, clusters ordered by co-retrieval (eq. 8):
//                  a greedy chain that always continues with the unplaced cluster of
//                  highest P(ij) to the chain's end, so co-retrieved clusters are adjacent.
// Both cluster placements use the dual-head layout (section 5.2): a pool of twice
// the largest initial cluster holds two clusters, one growing up from the pool's
// start, the other down from its end. Pools follow each other, so the downward
// cluster of pool p ends where the upward cluster of pool p+1 begins: the chain
// order c0 c1 | c2 c3 | ... is laid out as [c0-> <-c1][c2-> <-c3]... and the
// pair (c1, c2) is contiguous whatever their sizes.
// A cluster whose head runs into its partner moves to a new pool (its bytes
// count as data movement); a split keeps one child at the original head (its
// entries stay where they are: the other child's leave holes until the slot is
// rewritten) and moves the other to a free slot of a pool.
// `naive_moved_bytes` counts what a packed cluster-by-cluster layout would move
// for the same updates (every append shifts all later clusters), for Figure 13.
//
// Writes: a cluster with a page buffer (the `hot_buffers` most recently updated
// clusters) collects appends in DRAM and writes whole pages; any other append is
// a direct write that programs every page it touches (write amplification).
#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "policies/kvcluster/kv_cluster.h"
#include "policies/kvcluster/running_sums.h"

namespace mobisim::policies::kvcluster {

enum class Placement { kSequence, kIntraCluster, kInterCluster };

// How a read of scattered entries becomes storage commands:
//   kPageRuns          one command per run of contiguous pages touched (the block layer merges
//                      neighbouring page reads; the model, the default);
//   kContiguousPieces  one command per byte-contiguous range of entries, covering the pages it
//                      touches (a runtime issuing one request per range, unmerged: two entries
//                      sharing a page are two commands).
enum class ReadMerge { kPageRuns, kContiguousPieces };
ReadMerge read_merge_from_string(const std::string& s);  // "page_runs", "contiguous"; ConfigError otherwise
const char* to_string(Placement p);
Placement placement_from_string(const std::string& s);  // "sequence", "intra", "inter"; ConfigError otherwise

struct ReadRun {
  std::int64_t offset_bytes = 0;  // page-aligned
  std::int64_t bytes = 0;         // whole pages
  int entries = 0;                // entries whose bytes lie in the run
  // The run's entries as byte-contiguous pieces (entry slots next to each other): what a reader
  // issuing one request per contiguous byte range, without merging neighbouring pages, would send.
  int pieces = 0;
  int longest_piece = 0;          // entries of the longest piece

  bool operator==(const ReadRun&) const = default;
};

struct FlashStats {
  std::int64_t logical_write_bytes = 0;   // entry bytes written (appends, moves, split rewrites)
  std::int64_t physical_write_bytes = 0;  // pages programmed
  std::int64_t moved_bytes = 0;           // entry bytes relocated by pool overflows and splits
  std::int64_t naive_moved_bytes = 0;     // what a packed cluster-by-cluster layout would move
  std::int64_t allocated_bytes = 0;       // flash reserved (pools or the sequence file)
  int pools = 0;
};

// Co-retrieval counts f(C_i, C_j) over prefill-time queries (section 5.1): for
// every query, every pair of clusters selected together adds one (i != j).
// P(ij) of eq. 8 is f / sum f; the greedy chain only needs the order, so f is kept.
std::vector<std::vector<double>> co_retrieval_counts(const ClusterTable& t, const kernel::Mat& queries,
                                                     const TopK& top);
// The greedy chain of eq. 8's adjacency: starts with the most co-retrieved pair.
std::vector<int> correlation_chain(const std::vector<std::vector<double>>& f, const std::vector<int>& clusters);

class FlashLayout {
 public:
  FlashLayout(Placement placement, std::int64_t entry_bytes, std::int64_t page_bytes = 4096, int hot_buffers = 8,
              ReadMerge merge = ReadMerge::kPageRuns);

  // Places every entry of the table (after the prefill partition). `co_counts`
  // is used by kInterCluster only (empty: id order).
  void place_initial(const ClusterTable& t, const std::vector<std::vector<double>>& co_counts = {});
  // Brings the layout up to date after a decode step changed the table:
  // new entries on flash, split children, ClusterKV's regrouped window.
  void sync(const ClusterTable& t);
  // The same, looking only at the clusters a step reports as updated or created.
  void sync(const ClusterTable& t, const StepOutcome& step);

  // Read commands for the flash-resident entries of `clusters` (members only;
  // entries still in a write buffer or DynaKV's Buf_j are in DRAM).
  std::vector<ReadRun> read_runs(const ClusterTable& t, const std::vector<int>& clusters) const;
  // Read commands for arbitrary positions (no_cluster's scattered top-k).
  std::vector<ReadRun> read_runs_of(const std::vector<int>& positions) const;
  // The same as read_runs_of(t.positions_of(clusters)): every entry the clusters hold, members and
  // buffered, those on flash read.
  std::vector<ReadRun> read_runs_of_entries(const ClusterTable& t, const std::vector<int>& clusters) const;

  // Positions the layout holds for cluster c (its members as of the last sync).
  std::vector<int> placed_positions(int cluster) const {
    auto it = placed_.find(cluster);
    return it == placed_.end() ? std::vector<int>{} : it->second;
  }
  bool placed(int pos) const { return offset_.count(pos) > 0; }
  std::int64_t offset_of(int pos) const;
  // What the simulated flash holds at `offset` (the position written there), -1 when nothing.
  int content_at(std::int64_t offset) const;
  bool in_write_buffer(int pos) const;
  // Entries waiting in the hot clusters' page buffers (DRAM) for their page to fill.
  std::int64_t write_buffered_entries() const;
  const FlashStats& stats() const { return stats_; }
  std::int64_t entry_bytes() const { return entry_bytes_; }
  std::int64_t page_bytes() const { return page_bytes_; }
  // Throws Error if two entries share bytes, a cluster leaves its pool half, or
  // flash content disagrees with a recorded offset.
  void check_invariants(const ClusterTable& t) const;

 private:
  struct Slot {
    int pool = -1;
    bool down = false;  // grows down from the pool's end
  };
  struct Pool {
    std::int64_t begin = 0;  // byte offset
    int capacity = 0;        // entries
    int cluster_up = -1, cluster_down = -1;
    int used_up = 0, used_down = 0;
  };
  std::int64_t slot_offset(const Slot& s, int index) const;
  int new_pool(int capacity);
  Slot take_slot(int cluster, int entries);
  void bulk_write(int cluster, const std::vector<int>& positions);
  void append(int cluster, int pos);
  void sync_cluster(const ClusterTable& t, int cluster);
  void place_new_cluster(const ClusterTable& t, int cluster);
  void unplace(int pos);
  void release_slot(int cluster);
  void touch_hot(int cluster);
  void flush_page_buffer(int cluster);
  std::int64_t pages_touched(const std::vector<std::int64_t>& offsets) const;
  // The page runs of distinct entry-slot offsets read straight off a bitmap of their slots, without
  // sorting them (false, runs untouched: not that case, sort and merge instead).
  bool page_runs_from_bitmap(const std::vector<std::int64_t>& offsets, std::vector<ReadRun>& runs) const;
  // The runs of the slots marked in slot_bits_'s first `words` words, which it clears.
  void page_runs_from_marked_slots(std::int64_t words, std::vector<ReadRun>& runs) const;
  // Marks the entry slot of every offset in slot_bits_ (its first `words` words) when
  // page_runs_from_bitmap applies: distinct multiples of entry_bytes, the map not much larger than
  // the list; otherwise false, the bitmap left clear.
  bool mark_distinct_slots(const std::vector<std::int64_t>& offsets, std::int64_t& words) const;
  // Sorts `offsets` in place and returns the reads they make.
  std::vector<ReadRun> runs_from_offsets(std::vector<std::int64_t>& offsets) const;
  // Sorts entry offsets ascending: by a bitmap over entry slots when they are distinct
  // multiples of entry_bytes (every layout's case; linear), otherwise by std::sort.
  void sort_offsets(std::vector<std::int64_t>& offsets) const;
  bool mark_slots(const std::vector<std::int64_t>& offsets, std::int64_t words) const;
  std::vector<ReadRun> pieces_from_sorted_offsets(const std::vector<std::int64_t>& offsets) const;
  // off / entry_bytes and off / page_bytes, by a shift when the size is a power of two (every
  // layout the experiments build): a 64-bit division per entry read was the reads' largest cost.
  std::int64_t entry_slot(std::int64_t off) const { return off >= 0 && entry_shift_ >= 0 ? off >> entry_shift_ : off / entry_bytes_; }
  std::int64_t page_index(std::int64_t off) const { return off >= 0 && page_shift_ >= 0 ? off >> page_shift_ : off / page_bytes_; }
  void charge_naive_append(int cluster);
  std::int64_t placed_count(int cluster) const;  // entries placed_ holds for the cluster
  int naive_index(int cluster) const;            // its first place in naive_order_, -1 when absent
  void add_to_naive_order(int cluster);
  void placed_changed(int cluster);              // placed_[cluster] changed size: naive_sizes_ follows
  void record_offset(int pos, std::int64_t off);  // offset known, not yet on flash
  // The entry's bytes are now on flash, written for `cluster` (-1: the sequence placement's,
  // which keeps no lists per cluster).
  void write_flash(int pos, std::int64_t off, int cluster);
  void delist(int pos);  // takes pos's offset out of the cluster list holding it

  Placement placement_;
  std::int64_t entry_bytes_, page_bytes_;
  int hot_buffers_;
  ReadMerge merge_;
  int entry_shift_ = -1, page_shift_ = -1;  // log2 of entry_bytes_ / page_bytes_ when powers of two
  int pool_entries_ = 0;
  std::vector<Pool> pools_;
  std::unordered_map<int, Slot> slot_of_;               // cluster -> its half of a pool
  std::unordered_map<int, std::vector<int>> placed_;    // cluster -> positions in slot order
  std::unordered_map<int, std::int64_t> offset_;        // position -> byte offset
  std::unordered_map<std::int64_t, int> flash_;         // byte offset -> position (simulated content)
  std::map<int, std::vector<int>> page_buffer_;         // hot cluster -> positions waiting for a page
  std::vector<int> hot_;                                // most recently updated first
  std::vector<int> naive_order_;                        // packed layout's cluster order
  RunningSums naive_sizes_;                             // entries placed per cluster of naive_order_
  std::vector<int> naive_index_;                        // cluster -> its first index in naive_order_ (-1)
  bool naive_repeats_ = false;                          // a cluster entered the order twice (sums not kept)
  int sequence_placed_ = 0;                             // sequence placement: positions written
  FlashStats stats_;
  // Dense mirror of offset_ for the entries on flash ("content_at(offset_of(p)) == p"), -1 for the
  // others: one array, so a read's gather loads one cache line per position, not two.
  std::vector<std::int64_t> flash_offset_;
  // Per cluster, the offsets of the entries written for it that are on flash (any order), and per
  // position the cluster whose list holds its offset (-1: none): a read of whole clusters copies
  // the lists instead of looking up every position.
  std::vector<std::vector<std::int64_t>> cluster_offsets_;
  std::vector<int> listed_in_;
  mutable std::vector<std::uint64_t> slot_bits_;  // scratch of sort_offsets (all zero between calls)
  mutable std::vector<std::int64_t> read_offsets_;  // scratch of read_runs_of (a layout serves one thread at a time)
  // Appends the offsets of those of `positions` that are on flash to read_offsets_.
  void add_flash_offsets(std::span<const int> positions) const;
};

}  // namespace mobisim::policies::kvcluster
