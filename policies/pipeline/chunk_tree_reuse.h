#pragma once
// `chunk_tree`: PerCache's QKV cache tree and RAGCache's knowledge tree (policies/rag/kv_tree.h,
// the same class the `rag` app's PerCache and RAGCache policies use) as a KV-reuse stage. The
// root holds the system prompt's tensors, every other node one retrieved chunk's slice; a
// request's path is its leading `system` segment and the `chunk` segments right after it, in
// prompt order (a chunk segment's key names the chunk). A match walks that path from the root
// until the first miss (the longest stored path; PerCache section 4.1.1), so what is reused is
// always a prefix of the prompt. The tree's eviction (a leaf at a time) keeps it under
// `storage_limit_gb` on flash.
//
// Tokenization boundary rules (PerCache appendix B.2): rule 1 (a shared prefix's last node is not
// shared by a path that goes on differently) is the tree's; rule 2 drops the last
// `boundary_tokens` of the final matched node from the reuse (they are recomputed).
//
// What each stored token weighs on flash is the model's K/V (`payload: kv`) or PerCache's Q/K/V
// (`payload: qkv`, at the K/V dtype); the pipeline's load-or-recompute stage reads the matched
// prefix back with the same weight when its payload says so (PipelineOptions::payload).
// A match names its slices (matched_files()): loaded whole from flash (always_load), each is read
// as its own file, the last one whole (rule 2's tokens are read, then recomputed), as PerCache
// loads them; the split's estimate stays the strategy's plan of one read. Alone, the stage has the
// new slices written right after the answer, in the background (the pipeline's store step); with
// an idle stage that stores them (reactive_store, percache_scheduler, sleeptime: the rag policies'
// CachingPolicy) they are written in idle time, only when the write fits before the next query.
//
// Parameters:
//   storage_limit_gb   flash the tree may hold (PerCache section 5.4: 8 GB)
//   eviction           lfu (PerCache) | pgdsf (RAGCache; a slice's cost is its token count: the stage
//                      does not know the phone's prefill time)
//   boundary_rules     apply the two boundary rules (default true)
//   boundary_tokens    rule 2's recomputed tokens (default 4)
//   payload            kv | qkv: what a stored token weighs (the model's K/V, or its Q, K and V at
//                      the K/V dtype)
#include <cstdint>
#include <map>
#include <vector>

#include "policies/pipeline/kv_reuse.h"
#include "policies/rag/kv_tree.h"
#include "sim/params.h"

namespace mobisim::policies::pipeline {

class ChunkTreeReuse : public KvReuse {
 public:
  explicit ChunkTreeReuse(const Params& p);
  static ParamSchema schema();
  void begin_model(const models::ModelSpec& spec) override;
  KvMatch match(const Request& r, double now_s) override;
  std::vector<std::int64_t> matched_files() const override { return files_; }
  KvStored store(const Request& r, double now_s) override;
  double stored_bytes() const override { return tree_.used_bytes(); }
  std::int64_t evictions() const override { return static_cast<std::int64_t>(tree_.evictions()); }
  const policies::KvTree& tree() const { return tree_; }
  // For the idle stage that works on the same tree (percache_scheduler, sleeptime).
  policies::KvTree& tree() { return tree_; }
  bool boundary_rules() const { return boundary_rules_; }
  std::int64_t boundary_tokens() const { return boundary_tokens_; }
  bool qkv_payload() const { return qkv_; }
  // What one stored token weighs on flash (its K/V, or its Q/K/V), once begin_model() ran.
  double bytes_per_token() const { return bytes_per_token_; }
  // Names the tree's chunks by the workload's chunk ids before any request: chunk_keys[i] (a chunk
  // segment's key) is chunk i, so another user of the tree (the idle stage's CachingPolicy, which
  // inserts slices by workload chunk id) and this stage agree. Keys seen later get ids after them.
  void name_chunks(const std::vector<std::uint64_t>& chunk_keys);

 private:
  struct TreePath {
    std::int64_t root_tokens = 0;
    std::vector<std::int32_t> chunks;
    std::vector<std::int64_t> tokens;
  };
  TreePath path_of(const Request& r);
  policies::KvTree tree_;
  bool boundary_rules_;
  std::int64_t boundary_tokens_;
  bool qkv_;
  double bytes_per_token_ = 0;  // set by begin_model()
  std::vector<std::int64_t> files_;  // the last match's slices (tokens each)
  std::map<std::uint64_t, std::int32_t> chunk_ids_;  // segment key -> tree chunk id, in order of first sight
};

}  // namespace mobisim::policies::pipeline
