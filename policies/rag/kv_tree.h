#pragma once
// The knowledge cache tree (RAGCache's knowledge tree, as PerCache section
// 4.1.1 uses it): the root holds the system prompt's tensors, every other node
// one knowledge chunk's tensor slice (one file on flash), and a root-to-node
// path is the ordered chunk list some query retrieved. A node's tensors are
// valid only after exactly its ancestors (causal attention, RoPE positions), so
// matching walks the retrieved order from the root until the first miss.
//
// Tokenization boundary rule 1 (PerCache appendix B.2): when a new path shares
// a prefix with the tree and goes on beyond it, the last node of the common
// prefix is NOT shared (its final tokens were tokenized together with a
// different successor); the new path gets its own copy of that chunk. Siblings
// may therefore carry the same chunk id; matching takes the longest path (ties:
// higher frequency, then the older node). Rule 2 (drop the last tokens of the
// final matched node) is the caller's (it decides what to recompute).
//
// Eviction under a byte limit removes leaves only (an inner node's tensors are
// the prefix of its children's), never the root while it has children:
//   kLfu   (PerCache): lowest access count, then least recently used, then oldest.
//   kPgdsf (RAGCache): priority = clock + frequency * cost / size; the lowest
//           priority leaf goes, and the clock becomes its priority (Greedy-Dual-
//           Size-Frequency with the "prefix-aware" cost = prefill seconds saved).
#include <cstdint>
#include <string>
#include <vector>

namespace mobisim::policies {

enum class KvEviction { kLfu, kPgdsf };
KvEviction parse_kv_eviction(const std::string& s);  // "lfu" | "pgdsf"

struct KvNode {
  std::int32_t chunk = -1;        // -1: the root (system prompt)
  std::int64_t tokens = 0;
  double bytes = 0;
  double cost_s = 0;              // prefill seconds to recompute this slice (PGDSF)
  std::int64_t freq = 0;
  std::uint64_t last_access = 0;
  std::uint64_t created = 0;
  double priority = 0;            // PGDSF priority
  std::int32_t parent = -1;
  std::vector<std::int32_t> children;
  bool alive = false;
};

struct KvMatch {
  std::vector<std::int32_t> nodes;  // matched nodes, root first (empty when the root is absent)
  std::int64_t chunks = 0;          // matched knowledge chunks (the root excluded)
  std::int64_t tokens = 0;          // tokens of all matched nodes (root included)
  double bytes = 0;                 // bytes of all matched nodes (what must be loaded)
};

// One slice to insert: the chunk id (-1 for the root) and its size and cost.
struct KvSlice {
  std::int32_t chunk = -1;
  std::int64_t tokens = 0;
  double bytes = 0;
  double cost_s = 0;
};

class KvTree {
 public:
  KvTree(double limit_bytes, KvEviction eviction, bool boundary_rule = true);

  KvMatch match(const std::vector<std::int32_t>& chunks) const;
  // Counts an access on every matched node (frequency, recency, PGDSF priority).
  void touch(const KvMatch& m);
  // Inserts the path root + chunks (the root slice is used only when the root is absent).
  // Returns the bytes of newly created slices (what must be written to flash). A slice
  // that cannot be made to fit (even after evicting every unprotected leaf) ends the path there.
  double insert(const KvSlice& root, const std::vector<KvSlice>& chunks);

  // Changes the byte limit; lowering it evicts.
  void set_limit(double limit_bytes);
  double limit_bytes() const { return limit_; }
  double used_bytes() const { return used_; }
  double free_bytes() const { return limit_ - used_; }
  std::size_t live_nodes() const;
  std::uint64_t evictions() const { return evictions_; }
  const std::vector<KvNode>& nodes() const { return nodes_; }
  KvEviction eviction() const { return eviction_; }
  double clock() const { return clock_; }
  // Every live root-to-leaf path as chunk lists (root excluded), in node order (for tests/debugging).
  std::vector<std::vector<std::int32_t>> paths() const;

 private:
  bool preferred(std::int32_t c, std::int64_t len, std::int32_t best_child, std::int64_t best) const;
  std::int64_t longest(std::int32_t node, const std::vector<std::int32_t>& chunks, std::size_t i,
                       std::int32_t* first_child) const;
  // As longest(), and writes the whole chosen chain (chain[0] the first child) in one descent:
  // `scratch` holds the candidates' chains, (n - i) slots per level below.
  std::int64_t best_chain(std::int32_t node, const std::vector<std::int32_t>& chunks, std::size_t i,
                          std::int32_t* chain, std::int32_t* scratch) const;
  std::int32_t make_node(std::int32_t parent, const KvSlice& s);
  bool evict_one(const std::vector<std::int32_t>& protect);
  void update_priority(KvNode& n);
  double limit_;
  KvEviction eviction_;
  bool boundary_rule_;
  std::vector<KvNode> nodes_;      // node 0 is the root slot
  double used_ = 0;
  double clock_ = 0;
  std::uint64_t tick_ = 0;
  std::uint64_t evictions_ = 0;
};

}  // namespace mobisim::policies
